// Package gputest holds what the GPU tests of every package share: the rule for a test that finds no
// usable GPU. It imports nothing of gollm, so internal/cuda's own tests can use it too.
package gputest

import (
	"os"
	"testing"
)

// Require ends t when err, the reason the GPU (or a library the test needs on it) cannot be used, is
// not nil: it skips t, so that `go test -tags cuda` passes on a machine without a GPU, or, when the
// environment sets GOLLM_REQUIRE_GPU=1 (the device runs do), fails it, so that a run meant to exercise
// the GPU cannot pass by skipping.
func Require(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("GOLLM_REQUIRE_GPU") == "1" {
		t.Fatalf("GPU: %v", err)
	}
	t.Skipf("no GPU: %v", err)
}
