//go:build cuda

package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
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

// TestCUDAFP8LoadRefused loads an FP8 checkpoint, and a float one with an FP8 KV cache, on the GPU: Load
// refuses both before any weight is uploaded, naming what is missing.
func TestCUDAFP8LoadRefused(t *testing.T) {
	gpuDevice(t)
	fp8Dir, bf16Dir := t.TempDir(), t.TempDir()
	weightstest.WriteFP8(t, fp8Dir, fp8Config, 1, weightstest.FP8Dynamic, weightstest.FP8Scales{})
	weightstest.WriteLlamaBF16(t, bf16Dir, fp8Config, 1)
	for _, tc := range []struct {
		name, dir string
		opts      Options
		want      string
	}{
		{"fp8 checkpoint", fp8Dir, Options{}, "fp8 weights: not supported on CUDA yet; --device cpu runs them"},
		{"--quantization fp8", bf16Dir, Options{Quantization: QuantizationFP8}, "fp8 weights: not supported on CUDA yet"},
		{"--kv-cache-dtype fp8", bf16Dir, Options{KVCacheDType: KVCacheFP8}, "fp8 KV cache: not supported on CUDA yet; --device cpu runs it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Device, opts.NumBlocks, opts.BlockSize = DeviceCUDA, 16, 16
			m, err := Load(openFolder(t, tc.dir), opts)
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !errors.Is(err, weights.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want one saying %q", err, tc.want)
			}
		})
	}
}
