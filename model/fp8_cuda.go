//go:build cuda

package model

import (
	"fmt"
	"strings"

	"github.com/gollm/gollm/weights"
)

// The CUDA backend has no FP8 kernels yet: no e4m3 weight products and no e4m3 KV pages. It refuses,
// at load and before any weight is uploaded, a model that needs either, naming what is missing and that
// the CPU backend runs it, rather than dequantizing on the GPU and calling that FP8. The kernels must
// compute what FP8Weight (the products) and attention.Cache (the KV pages) define, which the CPU
// backend computes.

// checkFP8 returns an error naming the FP8 features a model with fp8Weights and the KV pages of s needs.
func (b *cudaBackend) checkFP8(fp8Weights bool, s Shape) error {
	var missing []string
	if fp8Weights {
		missing = append(missing, "fp8 weights: not supported on CUDA yet; --device cpu runs them")
	}
	if s.KVCacheDType == KVCacheFP8 {
		missing = append(missing, "fp8 KV cache: not supported on CUDA yet; --device cpu runs it")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("cuda backend: %s: %w", strings.Join(missing, "; "), weights.ErrUnsupported)
}

// UploadFP8 refuses: checkFP8 keeps a model with FP8 weights from reaching it.
func (b *cudaBackend) UploadFP8(w *FP8Weight) (Weight, error) {
	return Weight{}, b.checkFP8(true, Shape{})
}
