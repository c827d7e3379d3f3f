//go:build cuda

package model

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gollm/gollm/weights"
)

// TestCUDAMixedStepsMatchCPU runs mixed steps as the scheduler lays them out (decodes first, then
// prefill chunks) with the decodes on the decode kernels (MixedDecodeMin 1) against the CPU: decodes at
// about 1500 tokens (past every family's window: the decode kernels skip the pages behind it and the −1
// entries of a sliding group's table; split-k at such a context), 120 and 30 tokens, beside a new
// prompt's two chunks (the second attends to the first's pages), then a decode step, on the reference
// model at head sizes 64 and 128 and on cudaFamilies, in each of familyDTypes. Wherever the backend has
// the decode kernels, the mixed steps' decodes must have run on them.
func TestCUDAMixedStepsMatchCPU(t *testing.T) {
	dev := gpuDevice(t)
	cases := []struct {
		name string
		cfg  func(c *weights.Config)
	}{{"d64", func(c *weights.Config) { c.HeadDim = 64 }}, {"d128", func(*weights.Config) {}}}
	cases = append(cases, cudaFamilies...)
	for _, fam := range cases {
		for _, tc := range familyDTypes {
			t.Run(fam.name+"/"+tc.dtype.String(), func(t *testing.T) {
				cfg := cudaReferenceConfig(128)
				fam.cfg(cfg)
				cpu, gpu, backend := loadPair(t, dev, cfg, tc.dtype, false)
				backend.tune.MixedDecodeMin = 1
				rng := newRand(17)
				pc, pg := newModelPager(cpu, newRand(3)), newModelPager(gpu, newRand(3))
				long, prompt := randomTokens(rng, 1500, cfg.VocabSize), randomTokens(rng, 90, cfg.VocabSize)
				decodes := []chunk{{0, nil}, {1, nil}, {2, nil}}
				plan := [][]chunk{
					{{0, long[:800]}, {1, randomTokens(rng, 120, cfg.VocabSize)}},
					{{0, long[800:]}, {2, randomTokens(rng, 30, cfg.VocabSize)}},
					append(append([]chunk(nil), decodes...), chunk{3, prompt[:40]}),
					append(append([]chunk(nil), decodes...), chunk{3, prompt[40:]}),
					append(append([]chunk(nil), decodes...), chunk{3, nil}),
				}
				matchSteps(t, cpu, gpu, pc, pg, plan, rng, cfg.VocabSize, tc.tol)
				if st := backend.Stats(); backend.decodeFits && st.MixedDecodes == 0 {
					t.Errorf("no mixed step's decodes ran on the decode kernels")
				}
			})
		}
	}
}

// BenchmarkCUDAMixedStep measures the step continuous batching runs most under load: decodes beside
// prefill chunks, as the scheduler lays them out (decodes first). Llama-3-8B's shape, random bfloat16
// weights, decodes at contexts 1025-1152 (the decode half of gollm bench throughput's 1024-token
// prompts and 128 output tokens) beside two 1024-token prompts, with the decodes' attention on the
// decode kernels (default, from mixedDecodeMin decodes) or as items of the prefill kernel
// (items, gemvTuning.MixedDecodeMin −1). Metrics: ms/step (wall time of ForwardGreedy: mixed steps run
// eagerly), attn-ms/step (the attention ops of one step run op by op, stepProfile), kv-floor-ms (the
// decodes' K/V bytes at the copy bandwidth: what their attention cannot beat), and the per-op profile
// of the largest batch in the log.
//
//	go test -tags cuda -run XXX -bench CUDAMixedStep ./model
func BenchmarkCUDAMixedStep(b *testing.B) {
	dev := gpuDevice(b)
	bw := copyBandwidth(b)
	cfg := llama3_8B()
	const blockSize, prompts, promptLen, maxDecodes = 16, 2, 1024, 254
	perSeq := (promptLen+128)/blockSize + 1
	opts := Options{NumBlocks: (maxDecodes + prompts) * perSeq, BlockSize: blockSize, MaxStepTokens: maxDecodes + prompts*promptLen}
	start := time.Now()
	m, err := LoadRandom(cfg, 1, opts, newCUDABackendFunc(cudaConfig{dtype: weights.DTypeBF16, dev: dev}))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.Logf("loaded random bf16 weights (%.2f GB) in %v", float64(decodeWeightBytes(cfg, ""))/1e9,
		time.Since(start).Round(time.Millisecond))
	backend := m.backend.(*cudaBackend)
	for _, decodes := range []int{8, 32, 64, 96, 128, maxDecodes} {
		// The decodes' K/V are in place (zeros: the speed does not depend on them), the prompts new.
		pg, rng := newModelPager(m, newRand(5)), newRand(6)
		var chunks []chunk
		kvTokens := 0
		for seq := range decodes {
			ctx := promptLen + 1 + seq*37%128
			kvTokens += ctx
			pg.lens[seq] = ctx - 1
			chunks = append(chunks, chunk{seq, randomTokens(rng, 1, cfg.VocabSize)})
		}
		for p := range prompts {
			chunks = append(chunks, chunk{maxDecodes + p, randomTokens(rng, promptLen, cfg.VocabSize)})
		}
		s := pg.step(chunks...)
		kvFloor := float64(decodeKVBytes(cfg, 1, 1)*int64(kvTokens)) / bw * 1e3
		for _, v := range []struct {
			name    string
			noMixed bool
		}{{"default", false}, {"items", true}} {
			b.Run(fmt.Sprintf("decodes=%d/%s", decodes, v.name), func(b *testing.B) {
				if v.noMixed {
					backend.tune.MixedDecodeMin = -1
				}
				defer func() { backend.tune.MixedDecodeMin = 0 }()
				before := backend.Stats().MixedDecodes
				if _, err := m.ForwardGreedy(s); err != nil { // warm-up
					b.Fatal(err)
				}
				ran, want := backend.Stats().MixedDecodes > before, !v.noMixed && decodes >= mixedDecodeMin
				if ran != want {
					b.Fatalf("decodes on the decode kernels: %v, want %v", ran, want)
				}
				for b.Loop() {
					if _, err := m.ForwardGreedy(s); err != nil {
						b.Fatal(err)
					}
				}
				ms := b.Elapsed().Seconds() * 1e3 / float64(b.N)
				b.StopTimer()
				ops := profileStep(b, m, s)
				var attn float64
				for _, o := range ops {
					if o.Name == opAttention.String() {
						attn += o.MS
					}
				}
				b.ReportMetric(ms, "ms/step")
				b.ReportMetric(attn, "attn-ms/step")
				b.ReportMetric(kvFloor, "kv-floor-ms")
				b.ReportMetric(float64(decodes)/ms*1e3, "decode-tok/s")
				if decodes == maxDecodes {
					b.Logf("\n%s", strings.TrimSpace(formatProfile(fmt.Sprintf("llama-3-8b, %d decodes beside %d prompts of %d (%s)",
						decodes, prompts, promptLen, v.name), summarize(ops, 1, cfg.DType.Size()), bw)))
				}
			})
		}
	}
}
