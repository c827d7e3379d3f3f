//go:build cuda

package model

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/weights"
)

var benchCopy struct {
	once sync.Once
	bw   float64
	err  error
}

// copyBandwidth is GPU 0's device-to-device copy bandwidth (bytes read plus written per second), measured
// once per process as gollm bench measures it (cuda.Device.CopyBandwidth of 1 GiB) and logged on the
// first t that asks: the ceiling a decode step, which must read every weight once, and a weight-streaming
// product are judged by. Measured, not written in, so that the floors and %BW hold on any GPU.
func copyBandwidth(t testing.TB) float64 {
	t.Helper()
	dev := gpuDevice(t)
	benchCopy.once.Do(func() {
		if benchCopy.bw, benchCopy.err = dev.CopyBandwidth(1 << 30); benchCopy.err == nil {
			t.Logf("copy bandwidth %.2f TB/s", benchCopy.bw/1e12)
		}
	})
	if benchCopy.err != nil {
		t.Fatalf("copy bandwidth: %v", benchCopy.err)
	}
	return benchCopy.bw
}

// llama32_1B and llama3_8B are the shapes of Llama-3.2-1B and Meta-Llama-3-8B (bfloat16).
func llama32_1B() *weights.Config {
	return &weights.Config{
		Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192,
		NumHiddenLayers: 16, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64,
		MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 500000,
		RopeScaling: weights.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4,
			OriginalMaxPositionEmbeddings: 8192},
		TieWordEmbeddings: true, DType: weights.DTypeBF16,
	}
}

func llama3_8B() *weights.Config {
	return &weights.Config{
		Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 4096, IntermediateSize: 14336,
		NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
		MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5, RopeTheta: 500000,
		RopeScaling: weights.RopeScaling{Type: "default"}, DType: weights.DTypeBF16,
	}
}

// qwen25_7B is the shape of Qwen2.5-7B (bfloat16): q/k/v biases, seven query heads a KV head.
func qwen25_7B() *weights.Config {
	return &weights.Config{
		Architecture: "Qwen2ForCausalLM", ModelType: "qwen2", HiddenAct: weights.ActSiLU, QKVBias: true,
		VocabSize: 152064, HiddenSize: 3584, IntermediateSize: 18944, NumHiddenLayers: 28, NumAttentionHeads: 28,
		NumKeyValueHeads: 4, HeadDim: 128, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6,
		RopeScaling: weights.RopeScaling{Type: "default"}, DType: weights.DTypeBF16,
	}
}

// benchModel is a shape the CUDA decode benchmarks can run.
type benchModel struct {
	name string
	cfg  func() *weights.Config
}

// allBenchModels are the shapes GOLLM_BENCH_MODELS can name.
var allBenchModels = []benchModel{{"llama-3.2-1b", llama32_1B}, {"llama-3-8b", llama3_8B}, {"qwen2.5-7b", qwen25_7B}}

// benchModels are the shapes the CUDA decode benchmarks run: those GOLLM_BENCH_MODELS names
// (comma-separated), else Llama-3.2-1B and Llama-3-8B.
var benchModels = func() []benchModel {
	v := os.Getenv("GOLLM_BENCH_MODELS")
	if v == "" {
		return allBenchModels[:2]
	}
	var ms []benchModel
	for _, name := range strings.Split(v, ",") {
		i := slices.IndexFunc(allBenchModels, func(m benchModel) bool { return m.name == name })
		if i < 0 {
			panic(fmt.Sprintf("GOLLM_BENCH_MODELS: no shape %q", name))
		}
		ms = append(ms, allBenchModels[i])
	}
	return ms
}()

// benchContext is the decode context of the CUDA decode benchmarks: GOLLM_BENCH_CONTEXT, else def.
func benchContext(b *testing.B, def int) int {
	v := os.Getenv("GOLLM_BENCH_CONTEXT")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1024 || n > 4096 {
		b.Fatalf("GOLLM_BENCH_CONTEXT=%q: want a context from 1024 to 4096", v)
	}
	return n
}

// benchBatches is the batches BenchmarkCUDADecode runs: GOLLM_BENCH_BATCHES (comma-separated, each in
// [1, maxBatch]; e.g. 40, a batch past one wave of the grouped attention kernel's programs), else 1, 2,
// 4, 8, 16 and 64.
func benchBatches(b *testing.B, maxBatch int) []int {
	v := os.Getenv("GOLLM_BENCH_BATCHES")
	if v == "" {
		return []int{1, 2, 4, 8, 16, 64}
	}
	var batches []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxBatch {
			b.Fatalf("GOLLM_BENCH_BATCHES=%q: want batches from 1 to %d", v, maxBatch)
		}
		batches = append(batches, n)
	}
	return batches
}

// decodeWeightBytes is what one decode step must read of the weights: every matrix once (the LM head
// included; of the embedding table only the step's rows, none when it is not also the head), the FP8
// layers a model loaded with Options.Quantization quantization has (fp8WeightNames) at one byte an
// element.
func decodeWeightBytes(cfg *weights.Config, quantization string) int64 {
	c := *cfg
	c.HeadDim = headDim(cfg)
	fp8 := fp8WeightNames(cfg, quantization)
	var n int64
	for name, shape := range weights.TensorShapes(&c) {
		if name == "model.embed_tokens.weight" && !cfg.TieWordEmbeddings {
			continue
		}
		size := int64(1)
		for _, d := range shape {
			size *= int64(d)
		}
		if !fp8[name] {
			size *= int64(cfg.DType.Size())
		}
		n += size
	}
	return n
}

// decodeKVBytes is the K and V a decode step of batch sequences at context tokens reads.
func decodeKVBytes(cfg *weights.Config, batch, context int) int64 {
	return int64(batch) * int64(context) * int64(cfg.NumHiddenLayers) * 2 * int64(cfg.NumKeyValueHeads) *
		int64(headDim(cfg)) * int64(cfg.DType.Size())
}

// BenchmarkCUDADecode measures a decode step of random-weight models of Llama-3.2-1B and Llama-3-8B shape
// in bfloat16 at batch 1, 2, 4, 8, 16 and 64 (GOLLM_BENCH_BATCHES sets others), every sequence at a context of 1024 tokens (the step rewrites
// position 1023, so every step costs the same), greedy with the argmax on the device, replayed as a CUDA
// graph, in each of decodeVariants. The KV pages hold zeros (the speed does not depend on their values).
// Metrics: ms/step (wall time of ForwardGreedy, host work, copies and all), gpu-ms/step (the step's graph
// replayed back to back, timed with events: the device's share), host-ms/step (the difference),
// weights-floor-ms (the weights' bytes at the copy bandwidth, copy_TB/s: measured at the start, see
// copyBandwidth), floor-ms (weights and KV), and %floor = floor-ms / ms/step. Each sub-benchmark then
// logs a per-op profile of one more step (stepProfile: op by op with events between, so each op carries
// about 2 µs of launch gap a graph does not have; %BW is against the same copy bandwidth). The
// prefill sub-benchmark times one 1024-token prompt and logs its per-op profile (with FP8 layers also
// prefill1024-noscalefold: the FP8NoScaleFold tuning; prefill1024-regs and -staged: FP8Staged −1 and 1;
// prefill1024-noout16: FP8NoOut16; prefill1024-rope8 and -rope16, every model: RoPEHeads 8 and 16).
// GOLLM_BENCH_CONTEXT sets
// another decode context (e.g. 1088, the mean context of gollm bench latency's 1024-token prompts and 128
// output tokens). GOLLM_BENCH_FILL_KV=1 fills the sequences' pages by a prefill first (real K/V instead
// of zeros); GOLLM_BENCH_POOL=full sizes the KV pool as the engine does (the rest of the memory, with an
// activation workspace for 8192 tokens). GOLLM_BENCH_QUANTIZATION=fp8 quantizes the Linear layers at load
// (Options.Quantization; the floors count them at a byte an element).
//
//	go test -tags cuda -run XXX -bench CUDADecode ./model
func BenchmarkCUDADecode(b *testing.B) {
	dev := gpuDevice(b)
	bw := copyBandwidth(b)
	const blockSize = 1024 / 64
	context := benchContext(b, 1024)
	if p := os.Getenv("GOLLM_BENCH_POOL"); p != "" && p != "full" {
		b.Fatalf("GOLLM_BENCH_POOL=%q: only \"full\" (or unset)", p)
	}
	if f := os.Getenv("GOLLM_BENCH_FILL_KV"); f != "" && f != "1" {
		b.Fatalf("GOLLM_BENCH_FILL_KV=%q: only 1 (or unset)", f)
	}
	for _, mc := range benchModels {
		b.Run(mc.name, func(b *testing.B) {
			cfg := mc.cfg()
			const maxBatch = 64
			opts := Options{NumBlocks: maxBatch * (context/blockSize + 1), BlockSize: blockSize, MaxStepTokens: context,
				Quantization: os.Getenv("GOLLM_BENCH_QUANTIZATION")}
			if os.Getenv("GOLLM_BENCH_POOL") == "full" { // the engine's layout: the KV pool fills the memory
				opts.NumBlocks, opts.MaxStepTokens = 0, 8192
			}
			start := time.Now()
			m, err := LoadRandom(cfg, 1, opts, newCUDABackendFunc(cudaConfig{dtype: weights.DTypeBF16, dev: dev}))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			b.Logf("%s: loaded random bf16 weights %s(%.2f GB) in %v", mc.name, opts.Quantization,
				float64(decodeWeightBytes(cfg, opts.Quantization))/1e9,
				time.Since(start).Round(time.Millisecond))
			prefills := map[string]gemvTuning{"prefill1024": defaultGemvTuning,
				"prefill1024-rope8":  tweak(func(t *gemvTuning) { t.RoPEHeads = 8 }),
				"prefill1024-rope16": tweak(func(t *gemvTuning) { t.RoPEHeads = 16 })}
			if opts.Quantization != "" { // and with cuBLASLt's products scaled by a pass of their own
				prefills["prefill1024-noscalefold"] = tweak(func(t *gemvTuning) { t.FP8NoScaleFold = true })
				prefills["prefill1024-regs"] = tweak(func(t *gemvTuning) { t.FP8Staged = -1 })
				prefills["prefill1024-staged"] = tweak(func(t *gemvTuning) { t.FP8Staged = 1 })
				prefills["prefill1024-noout16"] = tweak(func(t *gemvTuning) { t.FP8NoOut16 = true })
			}
			for _, name := range slices.Sorted(maps.Keys(prefills)) {
				b.Run(name, func(b *testing.B) {
					backend := m.backend.(*cudaBackend)
					backend.tune = prefills[name]
					defer func() { backend.tune = defaultGemvTuning }()
					const context = 1024
					table := make([]int32, context/blockSize)
					for i := range table {
						table[i] = int32(i)
					}
					s := &Step{QueryStart: []int32{0, context}, ContextLens: []int32{context}, BlockTables: [][]int32{table},
						LogitRows: []int32{context - 1}}
					for pos := range context {
						s.Tokens = append(s.Tokens, int32(pos*31%cfg.VocabSize))
						s.Positions = append(s.Positions, int32(pos))
						s.SlotMapping = append(s.SlotMapping, table[pos/blockSize]*blockSize+int32(pos%blockSize))
					}
					if _, err := m.ForwardGreedy(s); err != nil { // warm-up
						b.Fatal(err)
					}
					for b.Loop() {
						if _, err := m.ForwardGreedy(s); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/prefill")
					b.ReportMetric(float64(context*b.N)/b.Elapsed().Seconds(), "tok/s")
					b.StopTimer()
					b.Logf("\n%s", formatProfile(fmt.Sprintf("%s prefill of %d tokens", mc.name, context),
						summarize(profileStep(b, m, s), 1, cfg.DType.Size()), bw))
				})
			}
			for _, batch := range benchBatches(b, maxBatch) {
				s := &Step{QueryStart: []int32{0}}
				for seq := range batch {
					table := make([]int32, (context+blockSize-1)/blockSize)
					for i := range table {
						table[i] = int32(seq*(context/blockSize+1) + i)
					}
					pos := int32(context - 1)
					s.Tokens = append(s.Tokens, int32(seq*97%cfg.VocabSize))
					s.Positions = append(s.Positions, pos)
					s.SlotMapping = append(s.SlotMapping, table[pos/blockSize]*blockSize+pos%blockSize)
					s.QueryStart = append(s.QueryStart, int32(seq+1))
					s.ContextLens = append(s.ContextLens, int32(context))
					s.BlockTables = append(s.BlockTables, table)
					s.LogitRows = append(s.LogitRows, int32(seq))
				}
				if os.Getenv("GOLLM_BENCH_FILL_KV") == "1" {
					// The sequences' pages hold the K/V of a prefill of their first context−1 tokens, as
					// in the engine, instead of zeros.
					for seq := range batch {
						pre := &Step{QueryStart: []int32{0, int32(context - 1)}, ContextLens: []int32{int32(context - 1)},
							BlockTables: [][]int32{s.BlockTables[seq]}, LogitRows: []int32{int32(context - 2)}}
						for pos := range int32(context - 1) {
							table := s.BlockTables[seq]
							pre.Tokens = append(pre.Tokens, (pos*31+int32(seq))%int32(cfg.VocabSize))
							pre.Positions = append(pre.Positions, pos)
							pre.SlotMapping = append(pre.SlotMapping, table[pos/blockSize]*blockSize+pos%blockSize)
						}
						if _, err := m.ForwardGreedy(pre); err != nil {
							b.Fatal(err)
						}
					}
				}
				for _, v := range decodeVariants {
					if (v.tune.Pipe > 0 || v.tune.Plan > 0) && batch > 8 {
						continue
					}
					b.Run(fmt.Sprintf("batch=%d/%s", batch, v.name), func(b *testing.B) {
						backend := m.backend.(*cudaBackend)
						backend.tune = v.tune
						if backend.decode != nil {
							backend.decode.Tuning = v.attn
						}
						defer func() {
							backend.tune = defaultGemvTuning
							if backend.decode != nil {
								backend.decode.Tuning = attention.CUDATuning{}
							}
						}()
						for range 4 { // each ring slot's graph run eagerly, then captured: the loop times replays only
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
						b.StopTimer()
						gpuMS, err := graphTime(backend, 20)
						if err != nil {
							b.Fatal(err)
						}
						// Pipelined steps (model.Start before the previous pick is read, inputs from it),
						// without the engine: the step's graph plus its copies and launches.
						fed := *s
						fed.InputFrom = make([]int32, len(s.Tokens))
						for i := range fed.InputFrom {
							fed.InputFrom[i] = int32(i)
						}
						// Five steps first: each slot's graph of the fed step, run eagerly, then captured.
						if err := pipeline(m, 4, func(i int) *Step {
							if i == 0 {
								return s
							}
							return &fed
						}, nil); err != nil {
							b.Fatal(err)
						}
						const pipeSteps = 100
						pipeStart := time.Now()
						if err := pipeline(m, pipeSteps-1, func(int) *Step { return &fed }, nil); err != nil {
							b.Fatal(err)
						}
						pipeMS := time.Since(pipeStart).Seconds() * 1e3 / pipeSteps
						ops := profileStep(b, m, s) // one more step op by op, for the per-op table
						wFloor := float64(decodeWeightBytes(cfg, opts.Quantization)) / bw * 1e3
						floor := float64(decodeWeightBytes(cfg, opts.Quantization)+decodeKVBytes(cfg, batch, context)) / bw * 1e3
						b.ReportMetric(gpuMS, "gpu-ms/step")
						b.ReportMetric(pipeMS, "pipe-ms/step")
						b.ReportMetric(ms-gpuMS, "host-ms/step")
						b.ReportMetric(ms, "ms/step")
						b.ReportMetric(wFloor, "weights-floor-ms")
						b.ReportMetric(floor, "floor-ms")
						b.ReportMetric(100*floor/ms, "%floor")
						b.ReportMetric(bw/1e12, "copy_TB/s")
						b.ReportMetric(float64(batch)/ms*1e3, "tok/s")
						b.ReportMetric(float64(after.Replayed-before.Replayed)/float64(b.N), "graph-frac")
						b.Logf("\n%s", formatProfile(fmt.Sprintf("%s batch %d %s (graph %.3f ms, wall %.3f ms)", mc.name, batch,
							v.name, gpuMS, ms), summarize(ops, 1, cfg.DType.Size()), bw))
					})
				}
			}
		})
	}
}

// profileStep runs s once more on m op by op (stepProfile) and returns each op's device time.
func profileStep(b *testing.B, m *Model, s *Step) []profiledOp {
	b.Helper()
	backend := m.backend.(*cudaBackend)
	backend.prof = &stepProfile{}
	_, err := m.ForwardGreedy(s)
	prof := backend.prof
	backend.prof = nil
	if err != nil {
		b.Fatal(err)
	}
	return prof.Ops
}

// decodeVariants are the ways BenchmarkCUDADecode runs each step: every product on cuBLAS with separate
// SwiGLU, RoPE and argmax kernels and no programmatic dependent launch (the backend before the skinny
// kernel, but with its other kernels as they are now), the skinny kernel without programmatic dependent
// launch, the default, the default with the decode-attention kernels' switches (attention.CUDATuning:
// L2 policy, separate split-k reduce), the default with the other launch plans and loops of the
// one-token-tile kernel (gemvTuning.Plan and Pipe; batch 1 only: larger batches do not use it), and at
// 9-64 rows every product on cuBLAS (no-gemm, the default before the skinny GEMM), every product on the
// GEMM (gemm-all), every kernel with programmatic dependent launch (pdl64), the RoPE kernel instead of
// decode attention rotating (no-attn-rope), FP8 products of 9-16 rows on cuBLASLt instead of the GEMM's
// e4m3 kernel (fp8-lt, with GOLLM_BENCH_QUANTIZATION=fp8) or all of 9-64 on the GEMM (fp8-gemm64), the
// quantizing norms and SwiGLU never or always staged (fp8-regs, fp8-staged), the O and down products whole (no-split), in k halves or
// quarters (k-split, split4) or in halves of their output rows (split-rows) whatever the model's size,
// and the one-token-tile products with k splits of up to 16 (the plan before gemvMaxKS) or 4 (ks16, ks4).
// The skip and attn variants are the default with one change.
var decodeVariants = []struct {
	name string
	tune gemvTuning
	attn attention.CUDATuning // the decode-attention kernels' switches (zero: their defaults)
}{
	{"cublas", gemvTuning{NoFuse: true}, attention.CUDATuning{}},
	{"gemv-nopdl", gemvTuning{MaxTokens: defaultGemvTuning.MaxTokens}, attention.CUDATuning{}},
	{"default", defaultGemvTuning, attention.CUDATuning{}},
	{"no-gemm", gemvTuning{MaxTokens: 8, PDL: true}, attention.CUDATuning{}},
	{"gemm-all", gemvTuning{MaxTokens: 8, PDL: true, Gemm: true}, attention.CUDATuning{}},
	{"gemm-64mb", gemvTuning{MaxTokens: 8, PDL: true, Gemm: true, GemmMinBytes: 64 << 20, GemmSwiGLUMinBytes: 64 << 20}, attention.CUDATuning{}},
	{"pdl64", tweak(func(t *gemvTuning) { t.PDLRows = 64 }), attention.CUDATuning{}},
	{"attn-p128", tweak(func(t *gemvTuning) { t.AttnPartition = 128 }), attention.CUDATuning{}},
	{"attn-grouped", tweak(func(t *gemvTuning) { t.AttnPartition = -1 }), attention.CUDATuning{}},
	{"attn-late", defaultGemvTuning, attention.CUDATuning{LatePrologue: true}},
	{"no-normfold", tweak(func(t *gemvTuning) { t.NoNormFold = true }), attention.CUDATuning{}},
	{"no-attn-rope", tweak(func(t *gemvTuning) { t.NoAttnRoPE = true }), attention.CUDATuning{}},
	{"no-split", tweak(func(t *gemvTuning) { t.SplitK = -1 }), attention.CUDATuning{}},
	{"fp8-lt", tweak(func(t *gemvTuning) { t.FP8NoGemm = true }), attention.CUDATuning{}},
	{"fp8-noscalefold", tweak(func(t *gemvTuning) { t.FP8NoScaleFold = true }), attention.CUDATuning{}},
	{"fp8-regs", tweak(func(t *gemvTuning) { t.FP8Staged = -1 }), attention.CUDATuning{}},
	{"fp8-staged", tweak(func(t *gemvTuning) { t.FP8Staged = 1 }), attention.CUDATuning{}},
	{"fp8-noout16", tweak(func(t *gemvTuning) { t.FP8NoOut16 = true }), attention.CUDATuning{}},
	{"ks16", tweak(func(t *gemvTuning) { t.MaxKS = 16 }), attention.CUDATuning{}},
	{"ks4", tweak(func(t *gemvTuning) { t.MaxKS = 4 }), attention.CUDATuning{}},
	{"fp8-gemm64", tweak(func(t *gemvTuning) { t.FP8GemmRows = 64 }), attention.CUDATuning{}},
	{"split4", tweak(func(t *gemvTuning) { t.SplitK = 4 }), attention.CUDATuning{}},
	{"k-split", tweak(func(t *gemvTuning) { t.SplitK = 2 }), attention.CUDATuning{}},
	{"split-rows", tweak(func(t *gemvTuning) { t.SplitRows = true }), attention.CUDATuning{}},
	{"attn-p64", tweak(func(t *gemvTuning) { t.AttnPartition = 64 }), attention.CUDATuning{}},
	{"attn-p256", tweak(func(t *gemvTuning) { t.AttnPartition = 256 }), attention.CUDATuning{}},
	{"attn-p512", tweak(func(t *gemvTuning) { t.AttnPartition = 512 }), attention.CUDATuning{}},
	{"attn-p1024", tweak(func(t *gemvTuning) { t.AttnPartition = 1024 }), attention.CUDATuning{}},
	{"attn-noevict", defaultGemvTuning, attention.CUDATuning{NoEvictFirst: true}},
	{"attn-nonarrow", defaultGemvTuning, attention.CUDATuning{NoNarrow: true}},
	{"attn-evict-large", defaultGemvTuning, attention.CUDATuning{EvictFirstLarge: true}},
	{"attn-reduce", defaultGemvTuning, attention.CUDATuning{SplitKReduceKernel: true}},
	{"attn-reduce-noevict", defaultGemvTuning, attention.CUDATuning{SplitKReduceKernel: true, NoEvictFirst: true}},
	{"plan1", gemvTuning{MaxTokens: defaultGemvTuning.MaxTokens, PDL: true, Plan: 1}, attention.CUDATuning{}},
	{"plan2", gemvTuning{MaxTokens: defaultGemvTuning.MaxTokens, PDL: true, Plan: 2}, attention.CUDATuning{}},
	{"pipe1", gemvTuning{MaxTokens: defaultGemvTuning.MaxTokens, PDL: true, Pipe: 1}, attention.CUDATuning{}},
	{"pipe1-plan1", gemvTuning{MaxTokens: defaultGemvTuning.MaxTokens, PDL: true, Pipe: 1, Plan: 1}, attention.CUDATuning{}},
}

// tweak returns the default tuning changed by f (the decode variants that differ from it in one thing).
func tweak(f func(*gemvTuning)) gemvTuning {
	t := defaultGemvTuning
	f(&t)
	return t
}

// graphTime returns the device time of the last step's graph, replayed n times back to back (ms each).
func graphTime(backend *cudaBackend, n int) (float64, error) {
	g := backend.lastGraph
	if g == nil {
		return 0, fmt.Errorf("no graph launched")
	}
	start, err := backend.dev.NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := backend.dev.NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	if err := start.Record(backend.stream); err != nil {
		return 0, err
	}
	for range n {
		if err := g.Launch(backend.stream); err != nil {
			return 0, err
		}
	}
	if err := end.Record(backend.stream); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	ms, err := start.Elapsed(end)
	return ms / float64(n), err
}
