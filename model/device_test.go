package model

import (
	"errors"
	"slices"
	"testing"

	"github.com/gollm/gollm/weights"
)

// TestForwardGreedyMatchesForward checks ForwardGreedy against the argmax of Forward's logits on the
// same steps (prefill of two sequences, then decodes), on two models loaded alike.
func TestForwardGreedyMatchesForward(t *testing.T) {
	cfg := tinyConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 3)
	opts := Options{NumBlocks: 32, BlockSize: 4}
	full, err := load(cfg, r.get, opts, NewCPUBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	greedy, err := load(cfg, r.get, opts, NewCPUBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer greedy.Close()
	pFull, pGreedy := newPager(32, 4, newRand(4)), newPager(32, 4, newRand(4))
	chunks := []chunk{{0, []int32{1, 2, 3, 4, 5, 6}}, {1, []int32{7, 8}}}
	for step := range 5 {
		logits, err := full.Forward(pFull.step(chunks...))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := greedy.ForwardGreedy(pGreedy.step(chunks...))
		if err != nil {
			t.Fatal(err)
		}
		want := argmaxRows(logits)
		if !slices.Equal(ids, want) {
			t.Fatalf("step %d: ForwardGreedy %v, argmax of Forward %v", step, ids, want)
		}
		for i := range chunks {
			chunks[i].tokens = []int32{ids[i]}
		}
	}
	empty := pGreedy.step(chunk{0, []int32{1}})
	empty.LogitRows = nil
	if ids, err := greedy.ForwardGreedy(empty); err != nil || len(ids) != 0 {
		t.Fatalf("no logits rows: %v, %v", ids, err)
	}
}

func TestResolveDevice(t *testing.T) {
	if dev, notice, err := ResolveDevice("cpu"); dev != DeviceCPU || notice != "" || err != nil {
		t.Errorf("cpu: %q %q %v", dev, notice, err)
	}
	if _, _, err := ResolveDevice("tpu"); err == nil {
		t.Error("tpu: no error")
	}
	for _, name := range []string{"auto", ""} {
		dev, notice, err := ResolveDevice(name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		usable := cudaUsable() == nil
		if (dev == DeviceCUDA) != usable || (notice == "") != usable || (dev != DeviceCUDA && dev != DeviceCPU) {
			t.Errorf("%q: device %q, notice %q, CUDA usable %v", name, dev, notice, usable)
		}
	}
	dev, _, err := ResolveDevice("cuda")
	if cudaUsable() != nil {
		if !errors.Is(err, ErrNoCUDA) {
			t.Errorf("cuda without a GPU: %q, %v, want ErrNoCUDA", dev, err)
		}
	} else if dev != DeviceCUDA || err != nil {
		t.Errorf("cuda: %q, %v", dev, err)
	}
	if !cudaBuilt && cudaUsable() == nil {
		t.Error("a build without the cuda tag claims a usable GPU")
	}
}

func TestBackendForOptions(t *testing.T) {
	cfg := tinyConfig()
	for _, tc := range []struct {
		opts Options
		ok   bool
	}{
		{Options{}, true},
		{Options{Device: "cpu"}, true},
		{Options{Device: "auto"}, true},
		{Options{Device: "gpu"}, false},
		{Options{Device: "cuda", DType: "int8"}, false},
	} {
		_, _, err := backendFor(cfg, tc.opts)
		if tc.opts.Device == "cuda" && cudaUsable() != nil {
			if !errors.Is(err, ErrNoCUDA) {
				t.Errorf("%+v: %v, want ErrNoCUDA", tc.opts, err)
			}
			continue
		}
		if (err == nil) != tc.ok {
			t.Errorf("%+v: error %v, want ok %v", tc.opts, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		dtype string
		want  weights.DType
	}{{"", weights.DTypeF32}, {"bfloat16", weights.DTypeBF16}, {"float16", weights.DTypeF16}, {"float32", weights.DTypeF32}} {
		if got, err := computeDTypeFor(cfg, Options{DType: tc.dtype}); got != tc.want || err != nil {
			t.Errorf("dtype %q: %v, %v; want %v", tc.dtype, got, err, tc.want)
		}
	}
}

// TestZeroBlocksNeedsASizer checks that NumBlocks 0 is refused by a backend that cannot size its pool.
func TestZeroBlocksNeedsASizer(t *testing.T) {
	cfg := tinyConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	cpuWithBlocks := func(s Shape) (Backend, error) { s.NumBlocks = 4; return NewCPUBackend(s) }
	if _, err := load(cfg, r.get, Options{}, cpuWithBlocks); err == nil {
		t.Fatal("NumBlocks 0 on a backend without AllocateKV loaded")
	}
	if _, err := load(cfg, r.get, Options{NumBlocks: -1}, NewCPUBackend); err == nil {
		t.Fatal("NumBlocks -1 loaded")
	}
}
