//go:build !cuda

package main

import (
	"context"
	"fmt"
	"io"
)

// runBenchAttention needs the GPU kernels, which only a build with -tags cuda has.
func runBenchAttention(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "gollm bench attention: this binary was built without CUDA (build with -tags cuda)")
	return 2
}
