//go:build cuda

package model

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gollm/gollm/attention"
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
// decode always on, and compares every logits row with the GPU's plain kernels (relative error 1e-4 in
// float32, 5e-2 in bfloat16) and with the CPU backend's (no farther than the plain kernels' row is, plus
// half that bound: in bfloat16 the plain kernels alone are up to about 5e-2 away): head sizes 64 and 128.
// Every decode step's attention must take the shared path, and the steps run as CUDA graphs of one
// shared-prefix bucket while the groups change within it: three decode steps (the bucket's warm-up,
// capture and a replay), a fork of the long prompt joins its group (a sixteenth sequence), three steps,
// a member of the short prompt's group leaves, three steps. Both changes must replay the bucket's graph.
// With an FP8 KV cache (bfloat16 compute) every backend, the CPU's too, holds FP8 pages.
func TestCUDASharedPrefixMatchesCPU(t *testing.T) {
	dev := gpuDevice(t)
	for _, tc := range []struct {
		headDim int
		dtype   weights.DType
		tol     float64
		kv      string
	}{{64, weights.DTypeF32, 1e-4, ""}, {128, weights.DTypeF32, 1e-4, ""}, {64, weights.DTypeBF16, 5e-2, ""}, {128, weights.DTypeBF16, 5e-2, ""},
		{64, weights.DTypeBF16, 5e-2, KVCacheFP8}, {128, weights.DTypeBF16, 5e-2, KVCacheFP8}} {
		name := fmt.Sprintf("d%d_%v", tc.headDim, tc.dtype)
		if tc.kv != "" {
			name += "_kv" + tc.kv
		}
		t.Run(name, func(t *testing.T) {
			if tc.kv == KVCacheFP8 {
				if m := fp8KVMissing(dev.Info()); m != "" {
					t.Skipf("%s: %s", dev.Info().Name, m)
				}
			}
			cfg := cudaReferenceConfig(tc.headDim)
			r := newRandomModel(cfg, weights.DTypeBF16, 9)
			const numBlocks, blockSize = 1024, 16
			opts := Options{NumBlocks: numBlocks, BlockSize: blockSize, KVCacheDType: tc.kv}
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
			type step struct {
				chunks []chunk
				decode bool
				fork   func(p *pager) // before the step, on every pager
				phase  string         // the decode steps' phase, whose graph replays are counted
			}
			var plan []step
			plan = append(plan, step{chunks: []chunk{{0, long[:320]}, {10, short}}}, step{chunks: []chunk{{0, long[320:]}}})
			// Sequences 1-9 behind sequence 0's pages, 11-12 behind 10's, 13-14 alone: each prefills its
			// own tokens after the fork.
			var own []chunk
			for seq := 1; seq < 15; seq++ {
				own = append(own, chunk{seq, randomTokens(rng, 1+seq%5, cfg.VocabSize)})
			}
			plan = append(plan, step{chunks: own, fork: func(p *pager) {
				for seq := 1; seq < 10; seq++ {
					p.fork(0, seq, 40)
				}
				p.fork(10, 11, 2)
				p.fork(10, 12, 2)
			}})
			decodeSteps := func(phase string, seqs ...int) {
				for range 3 {
					var chunks []chunk
					for _, seq := range seqs {
						chunks = append(chunks, chunk{seq, nil})
					}
					plan = append(plan, step{chunks: chunks, decode: true, phase: phase})
				}
			}
			seqs := func(n int, except ...int) []int {
				var out []int
				for seq := range n {
					if !slices.Contains(except, seq) {
						out = append(out, seq)
					}
				}
				return out
			}
			decodeSteps("15 sequences", seqs(15)...)
			// Sequence 15 forks sequence 0's 40 pages and prefills 3 tokens of its own: it joins the group.
			plan = append(plan, step{chunks: []chunk{{15, randomTokens(rng, 3, cfg.VocabSize)}}, fork: func(p *pager) { p.fork(0, 15, 40) }})
			decodeSteps("a fork joins", seqs(16)...)
			decodeSteps("a member leaves", seqs(16, 12)...) // sequence 12 stops: its group keeps 10 and 11
			decodes := 0
			replays := map[string]int{}
			for i, st := range plan {
				if st.fork != nil {
					for _, p := range pagers {
						st.fork(p)
					}
				}
				chunks := st.chunks
				for j := range chunks {
					if chunks[j].tokens == nil {
						chunks[j].tokens = randomTokens(rng, 1, cfg.VocabSize)
					}
				}
				if st.decode {
					decodes++
				}
				before := backends[0].Stats()
				var out [][][]float32
				for k, m := range models {
					got, err := m.Forward(pagers[k].step(chunks...))
					if err != nil {
						t.Fatalf("step %d, model %d: %v", i, k, err)
					}
					out = append(out, got)
				}
				if st.phase != "" {
					replays[st.phase] += backends[0].Stats().Replayed - before.Replayed
				}
				for j := range out[0] {
					// The plain kernels' own distance from the CPU (bfloat16 rounding of every activation,
					// TestCUDAMatchesCPU's bound) is the baseline: the shared path may add half the bound.
					plain := relErr(out[2][j], out[0][j])
					if e := relErr(out[1][j], out[0][j]); !(e <= plain+tc.tol/2) {
						t.Errorf("step %d, sequence %d: shared GPU against the CPU: relative error %.3g > the plain GPU's %.3g + %g",
							i, chunks[j].seq, e, plain, tc.tol/2)
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
			if st.CaptureFailed != nil {
				t.Fatalf("capture failed: %v", st.CaptureFailed)
			}
			if st.Replayed == 0 {
				t.Errorf("no shared-prefix step replayed a graph (%d captured, %d eager)", st.Captured, st.Eager)
			}
			// The groups change within one shared-prefix bucket: the later phases replay graphs of the
			// first phase's key (graphs are per metadata slot too, so a slot's first step may still
			// capture), and no step asks for a key of its own.
			for _, phase := range []string{"a fork joins", "a member leaves"} {
				if replays[phase] == 0 {
					t.Errorf("%s: no graph replayed (the groups changed within one shared-prefix bucket); %d captured in all", phase, st.Captured)
				}
			}
			if n := len(backends[0].sharedKeys); n != 1 {
				t.Errorf("%d shared-prefix buckets have a graph, want 1 (the groups changed within one)", n)
			}
			t.Logf("shared-prefix GPU: %d eager, %d captured, %d replayed; replays %v", st.Eager, st.Captured, st.Replayed, replays)
			if n := backends[1].Stats().SharedDecodes; n != 0 {
				t.Errorf("SharedPrefixOff ran %d shared-prefix calls", n)
			}
		})
	}
}

// BenchmarkCUDADecodeSharedStep times Llama-3-8B's decode step (random bf16 weights) at batch 64 whose
// sequences share a prefix of 16384 tokens (1024 pages of 16) and have 128 tokens of their own: with
// the shared-prefix decode (SharedPrefixAlways), in its shared-prefix bucket's CUDA graph and eagerly,
// and without it (SharedPrefixOff: the plain kernels, in the bucket's CUDA graph, and eagerly), the same
// steps on one model, and the shared step on the other prefix kernel (shared-W32:
// attention.CUDATuning.SharedPrefix, in its graph). ms/step each, the share of attention calls on the
// shared path and of steps that replayed a graph, and plain/shared. The K/V pages hold zeros (the time
// does not depend on their values).
func BenchmarkCUDADecodeSharedStep(b *testing.B) {
	dev := gpuDevice(b)
	const batch, prefix, suffix, blockSize = 64, 16384, 128, 16
	cfg := llama3_8B()
	prefixPages, suffixPages := prefix/blockSize, suffix/blockSize
	opts := Options{NumBlocks: prefixPages + batch*(suffixPages+1), BlockSize: blockSize, MaxStepTokens: 1024}
	var backend *cudaBackend
	m, err := LoadRandom(cfg, 1, opts, func(s Shape) (Backend, error) {
		bk, err := newCUDABackend(s, cudaConfig{dtype: weights.DTypeBF16, dev: dev})
		backend = bk
		return bk, err
	})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s := &Step{QueryStart: []int32{0}}
	ctx := prefix + suffix
	for seq := range batch {
		table := make([]int32, 0, prefixPages+suffixPages+1)
		for i := range prefixPages {
			table = append(table, int32(i))
		}
		for i := range suffixPages + 1 {
			table = append(table, int32(prefixPages+seq*(suffixPages+1)+i))
		}
		pos := int32(ctx - 1)
		s.Tokens = append(s.Tokens, int32(seq*97%cfg.VocabSize))
		s.Positions = append(s.Positions, pos)
		s.SlotMapping = append(s.SlotMapping, table[pos/blockSize]*blockSize+pos%blockSize)
		s.QueryStart = append(s.QueryStart, int32(seq+1))
		s.ContextLens = append(s.ContextLens, int32(ctx))
		s.BlockTables = append(s.BlockTables, table)
		s.LogitRows = append(s.LogitRows, int32(seq))
	}
	times := map[string]float64{}
	type variant struct {
		name, shared string
		eager        bool
		prefix       attention.SharedPrefixVariant
	}
	variants := []variant{{"shared", SharedPrefixAlways, false, 0}, {"shared-eager", SharedPrefixAlways, true, 0},
		{"plain-graph", SharedPrefixOff, false, 0}, {"plain-eager", SharedPrefixOff, true, 0}}
	variants = append(variants, variant{"shared-" + attention.SharedPrefixW32.String(), SharedPrefixAlways, false, attention.SharedPrefixW32})
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			backend.cfg.sharedPrefix, backend.graphsOff = v.shared, v.eager
			tuning := backend.decode.Tuning
			backend.decode.Tuning.SharedPrefix = v.prefix
			defer func() {
				backend.cfg.sharedPrefix, backend.graphsOff = SharedPrefixAuto, false
				backend.decode.Tuning = tuning
			}()
			for range 4 {
				if _, err := m.ForwardGreedy(s); err != nil {
					b.Fatal(err)
				}
			}
			before := backend.Stats()
			for b.Loop() {
				if _, err := m.ForwardGreedy(s); err != nil {
					b.Fatal(err)
				}
			}
			after := backend.Stats()
			ms := b.Elapsed().Seconds() * 1e3 / float64(b.N)
			times[v.name] = ms
			b.ReportMetric(ms, "ms/step")
			b.ReportMetric(float64(after.SharedDecodes-before.SharedDecodes)/float64(b.N*cfg.NumHiddenLayers), "shared-frac")
			b.ReportMetric(float64(after.Replayed-before.Replayed)/float64(b.N), "graph-frac")
			b.ReportMetric(0, "ns/op")
		})
	}
	if times["shared"] > 0 {
		b.Logf("plain (graph) / shared (graph): %.2f; plain (eager) / shared (eager): %.2f; shared eager / graph: %.2f",
			times["plain-graph"]/times["shared"], times["plain-eager"]/times["shared-eager"], times["shared-eager"]/times["shared"])
	}
}
