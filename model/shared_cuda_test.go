//go:build cuda

package model

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gollm/gollm/weights"
)

// fork makes sequence to begin with the first pages pages of sequence from's table (the same physical
// pages, as the prefix cache shares them), its context those pages' tokens.
func (p *pager) fork(from, to, pages int) {
	p.tables[to] = [][]int32{slices.Clone(p.tables[from][0][:pages])}
	p.lens[to] = pages * p.blockSize
}

// TestCUDASharedPrefixMatchesCPU runs decode steps whose sequences share their first pages (ten behind
// one 40-page prompt, three behind another of 2 pages, two alone) on the GPU with the shared-prefix
// decode always on, and compares every logits row with the CPU backend's (relative error 1e-4 in
// float32, 5e-2 in bfloat16) and with the GPU's plain kernels (the same bounds): head sizes 64 and 128.
// The steps run eagerly (a graph cannot hold the groups), and every decode step's attention must take
// the shared path.
func TestCUDASharedPrefixMatchesCPU(t *testing.T) {
	dev := gpuDevice(t)
	for _, tc := range []struct {
		headDim int
		dtype   weights.DType
		tol     float64
	}{{64, weights.DTypeF32, 1e-4}, {128, weights.DTypeF32, 1e-4}, {64, weights.DTypeBF16, 5e-2}, {128, weights.DTypeBF16, 5e-2}} {
		t.Run(fmt.Sprintf("d%d_%v", tc.headDim, tc.dtype), func(t *testing.T) {
			cfg := cudaReferenceConfig(tc.headDim)
			r := newRandomModel(cfg, weights.DTypeBF16, 9)
			const numBlocks, blockSize = 1024, 16
			opts := Options{NumBlocks: numBlocks, BlockSize: blockSize}
			cpu, err := load(cfg, r.get, opts, NewCPUBackend)
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			var backends []*cudaBackend
			var gpus []*Model
			for _, shared := range []string{SharedPrefixAlways, SharedPrefixOff} {
				g, err := load(cfg, r.get, opts, func(s Shape) (Backend, error) {
					b, err := newCUDABackend(s, cudaConfig{dtype: tc.dtype, dev: dev, sharedPrefix: shared})
					backends = append(backends, b)
					return b, err
				})
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				gpus = append(gpus, g)
			}
			rng := newRand(17)
			pagers := []*pager{newModelPager(cpu, newRand(5)), newModelPager(gpus[0], newRand(5)), newModelPager(gpus[1], newRand(5))}
			models := []*Model{cpu, gpus[0], gpus[1]}
			long, short := randomTokens(rng, 40*blockSize, cfg.VocabSize), randomTokens(rng, 2*blockSize, cfg.VocabSize)
			var plan [][]chunk
			plan = append(plan, []chunk{{0, long[:320]}, {10, short}}, []chunk{{0, long[320:]}})
			// Sequences 1-9 behind sequence 0's pages, 11-12 behind 10's, 13-14 alone: each prefills its
			// own tokens after the fork.
			var own []chunk
			for seq := 1; seq < 15; seq++ {
				own = append(own, chunk{seq, randomTokens(rng, 1+seq%5, cfg.VocabSize)})
			}
			var all []chunk
			for seq := range 15 {
				all = append(all, chunk{seq, nil})
			}
			plan = append(plan, own)
			for range 4 {
				plan = append(plan, slices.Clone(all))
			}
			decodes := 0
			for i, chunks := range plan {
				if i == 2 {
					for _, p := range pagers {
						for seq := 1; seq < 10; seq++ {
							p.fork(0, seq, 40)
						}
						p.fork(10, 11, 2)
						p.fork(10, 12, 2)
					}
				}
				for j := range chunks {
					if chunks[j].tokens == nil {
						chunks[j].tokens = randomTokens(rng, 1, cfg.VocabSize)
					}
				}
				if i > 2 {
					decodes++
				}
				var out [][][]float32
				for k, m := range models {
					got, err := m.Forward(pagers[k].step(chunks...))
					if err != nil {
						t.Fatalf("step %d, model %d: %v", i, k, err)
					}
					out = append(out, got)
				}
				for j := range out[0] {
					if e := relErr(out[1][j], out[0][j]); !(e <= tc.tol) {
						t.Errorf("step %d, sequence %d: shared GPU against the CPU: relative error %.3g > %g", i, chunks[j].seq, e, tc.tol)
					}
					if e := relErr(out[1][j], out[2][j]); !(e <= tc.tol) {
						t.Errorf("step %d, sequence %d: shared against plain GPU: relative error %.3g > %g", i, chunks[j].seq, e, tc.tol)
					}
				}
			}
			st := backends[0].Stats()
			if want := decodes * cfg.NumHiddenLayers; st.SharedDecodes != want {
				t.Errorf("%d shared-prefix decode calls, want %d (every layer of %d decode steps)", st.SharedDecodes, want, decodes)
			}
			if n := backends[1].Stats().SharedDecodes; n != 0 {
				t.Errorf("SharedPrefixOff ran %d shared-prefix calls", n)
			}
		})
	}
}
