//go:build !cuda

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBenchAttentionWithoutCUDA(t *testing.T) {
	var out, errb bytes.Buffer
	if got := run([]string{"bench", "attention"}, &out, &errb); got != 2 {
		t.Fatalf("exit code %d, want 2", got)
	}
	if !strings.Contains(errb.String(), "built without CUDA") {
		t.Fatalf("stderr %q", errb.String())
	}
}
