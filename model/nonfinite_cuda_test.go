//go:build cuda

package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/weights"
)

// nonFiniteRows returns rows of cols logits, each with a fault of its own kind: none, a NaN or a +Inf
// somewhere (the first chunk, a middle one, the last partial one), −Inf only (not a fault), NaN and
// +Inf together, and a row of −Inf but one NaN.
func nonFiniteRows(rng *rand.Rand, cols int) (rows [][]float32, names []string) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	add := func(name string, edit func(x []float32)) {
		x := randomLogits(rng, cols, 2, false)
		edit(x)
		rows, names = append(rows, x), append(names, name)
	}
	add("clean", func([]float32) {})
	for _, at := range []int{0, 17, cols / 2, cols - 1} {
		add(fmt.Sprintf("NaN at %d", at), func(x []float32) { x[at] = nan })
		add(fmt.Sprintf("+Inf at %d", at), func(x []float32) { x[at] = inf })
	}
	add("-Inf here and there", func(x []float32) {
		for range 100 {
			x[rng.IntN(cols)] = -inf
		}
	})
	add("NaN and +Inf", func(x []float32) { x[3], x[cols-2] = nan, inf })
	add("all -Inf but a NaN", func(x []float32) {
		for i := range x {
			x[i] = -inf
		}
		x[cols/3] = nan
	})
	add("all -Inf", func(x []float32) {
		for i := range x {
			x[i] = -inf
		}
	})
	return rows, names
}

// TestCUDAPickNonFinite runs the argmax kernels (ArgmaxChunks, ArgmaxPartials) and the sampling kernel
// on rows of a Llama-3-sized vocabulary holding NaN or +Inf in every chunk position: each pick must be
// the CPU twin's (pickRowCPU), NonFinitePick for exactly the rows that hold NaN or +Inf.
func TestCUDAPickNonFinite(t *testing.T) {
	m, b, dev := sampleTestBackend(t)
	defer m.Close()
	rng := rand.New(rand.NewPCG(21, 22))
	const cols = 128256
	rows, names := nonFiniteRows(rng, cols)
	logits, err := b.NewTensor(len(rows), cols)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.CopyToDevice(tensorOf(logits).ptr, cuda.Bytes(slices.Concat(rows...))); err != nil {
		t.Fatal(err)
	}
	p := newPager(8, 16, newRand(1))
	if err := b.BeginStep(p.step(chunk{0, []int32{1}})); err != nil {
		t.Fatal(err)
	}
	greedy := make([]int32, len(rows))
	if err := b.ArgmaxToHost(greedy, logits); err != nil {
		t.Fatal(err)
	}
	params := make([]SampleParams, len(rows))
	for i := range params {
		params[i] = SampleParams{Temperature: 0.7, TopK: 50, TopP: 0.9, Seed: uint64(i)}
	}
	sampled, _ := sampleOnDevice(t, b, dev, rows, params)
	for r, x := range rows {
		if want := pickRowCPU(x, sampleRow{}); greedy[r] != want {
			t.Errorf("%s: argmax kernel %d, twin %d", names[r], greedy[r], want)
		}
		want := SampleLogits(x, params[r])
		if (sampled[r] == NonFinitePick) != (want == NonFinitePick) {
			t.Errorf("%s: sampling kernel %d, twin %d", names[r], sampled[r], want)
		}
	}
}

// TestCUDANonFinitePicks runs checkNonFinitePicks on the CUDA backend (a NaN embedding row poisons one
// sequence of the step), in float32 (the argmax kernels after the LM head) and bfloat16 (the argmax fused
// into the LM head's product), with and without CUDA graphs; then, in bfloat16, steps of 12 and 40
// sequences (the skinny GEMM's fused argmax on Hopper) where every third is poisoned: those pick
// NonFinitePick, and the others exactly what they pick in a model without the poison.
func TestCUDANonFinitePicks(t *testing.T) {
	dev := gpuDevice(t)
	cfg := cudaReferenceConfig(64)
	r := newRandomModel(cfg, weights.DTypeBF16, 4)
	const numBlocks, blockSize = 256, 16
	modes := []cudaMode{{name: "f32", dtype: weights.DTypeF32}, {name: "bf16", dtype: weights.DTypeBF16},
		{name: "bf16_eager", dtype: weights.DTypeBF16, noGraphs: true}}
	loadMode := func(t *testing.T, mode cudaMode, get tensorGetter) *Model {
		m, err := load(cfg, get, Options{NumBlocks: numBlocks, BlockSize: blockSize, SkipWeightCheck: true}, func(s Shape) (Backend, error) {
			return newCUDABackend(s, mode.config(dev, weights.DTypeBF16))
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			poisoned := loadMode(t, mode, poisonedModel(t, r, 7))
			checkNonFinitePicks(t, poisoned, numBlocks, blockSize)
			if mode.dtype != weights.DTypeBF16 {
				return
			}
			clean := loadMode(t, mode, r.get)
			for _, n := range []int{12, 40} {
				rng := newRand(uint64(n))
				chunks := make([]chunk, n)
				for s := range chunks {
					toks := randomTokens(rng, 5, cfg.VocabSize)
					for i, tok := range toks {
						if tok == 7 {
							toks[i] = 8
						}
					}
					if s%3 == 1 {
						toks[2] = 7
					}
					chunks[s] = chunk{s, toks}
				}
				pick := func(m *Model) []int32 {
					ids, err := m.ForwardGreedy(newPager(numBlocks, blockSize, newRand(2)).step(chunks...))
					if err != nil {
						t.Fatal(err)
					}
					return ids
				}
				got, want := pick(poisoned), pick(clean)
				for s := range chunks {
					if s%3 == 1 {
						want[s] = NonFinitePick
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%d sequences: picks %v, want %v", n, got, want)
				}
			}
		})
	}
}
