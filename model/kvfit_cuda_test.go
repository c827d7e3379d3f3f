//go:build cuda

package model

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// TestCUDAKVTooLarge: an explicit KV pool larger than the device's free memory after the weights is
// refused by Load's path with ErrKVTooLarge saying how many pages fit (before, the constructor tried
// to allocate it before any weight and failed with the driver's out-of-memory), and one that fits is
// allocated after the weights with exactly the pages asked for.
func TestCUDAKVTooLarge(t *testing.T) {
	gpuDevice(t) // skips without a GPU
	cfg := cudaReferenceConfig(64)
	newBackend, deferKV, err := backendFor(cfg, Options{Device: DeviceCUDA, NumBlocks: 1})
	if err != nil || !deferKV {
		t.Fatalf("backendFor: %v, deferKV %v", err, deferKV)
	}
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	for _, n := range []int{1_000_000_000_000, 1 << 40} {
		_, err := loadContext(context.Background(), cfg, r.get, Options{NumBlocks: n, BlockSize: 16}, newBackend, true)
		if !errors.Is(err, ErrKVTooLarge) || !strings.Contains(err.Error(), "pages fit") {
			t.Errorf("%d pages: %v, want ErrKVTooLarge saying how many pages fit", n, err)
		}
	}
	m, err := loadContext(context.Background(), cfg, r.get, Options{NumBlocks: 64, BlockSize: 16}, newBackend, true)
	if err != nil {
		t.Fatalf("64 pages: %v", err)
	}
	defer m.Close()
	if m.NumBlocks() != 64 || m.backend.(*cudaBackend).shape.NumBlocks != 64 {
		t.Errorf("NumBlocks %d, backend's %d, want 64", m.NumBlocks(), m.backend.(*cudaBackend).shape.NumBlocks)
	}
	p := newPager(64, 16, newRand(1))
	if _, err := m.ForwardGreedy(p.step(chunk{0, []int32{1, 2, 3}})); err != nil {
		t.Fatalf("a step on the deferred pool: %v", err)
	}
}
