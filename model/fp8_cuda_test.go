//go:build cuda

package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// TestCUDAFP8Refused checks that the CUDA backend refuses FP8 weights and an FP8 KV cache, naming
// each and the CPU's flag, and says nothing for a model with neither. It needs no device: the refusal
// happens before any is used.
func TestCUDAFP8Refused(t *testing.T) {
	b := &cudaBackend{}
	if err := b.checkFP8(false, Shape{}); err != nil {
		t.Fatalf("no FP8: %v", err)
	}
	for _, tc := range []struct {
		name    string
		weights bool
		kv      string
		want    []string
	}{
		{"weights", true, "", []string{"fp8 weights: not supported on CUDA yet; --device cpu runs them"}},
		{"KV cache", false, KVCacheFP8, []string{"fp8 KV cache: not supported on CUDA yet; --device cpu runs it"}},
		{"both", true, KVCacheFP8, []string{"fp8 weights", "fp8 KV cache"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := b.checkFP8(tc.weights, Shape{KVCacheDType: tc.kv})
			if err == nil || !errors.Is(err, weights.ErrUnsupported) {
				t.Fatalf("error %v, want one wrapping ErrUnsupported", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if _, err := b.UploadFP8(&FP8Weight{}); err == nil {
		t.Error("UploadFP8 accepted a weight")
	}
}
