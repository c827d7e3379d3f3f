package model

import (
	"cmp"
	"fmt"
	"log/slog"
	"testing"

	"github.com/gollm/gollm/weights"
)

// smolLM2Config is SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads, 3 KV heads, MLP 1536, vocab
// 49152, tied embeddings).
func smolLM2Config() *weights.Config {
	return &weights.Config{
		Architecture: "LlamaForCausalLM", VocabSize: 49152, HiddenSize: 576, IntermediateSize: 1536,
		NumHiddenLayers: 30, NumAttentionHeads: 9, NumKeyValueHeads: 3, HeadDim: 64,
		MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5, RopeTheta: 100000,
		RopeScaling: weights.RopeScaling{Type: "default"}, TieWordEmbeddings: true, DType: weights.DTypeBF16,
	}
}

// BenchmarkDecode measures decode of a SmolLM2-135M-shaped random model on the CPU backend, with the
// checkpoint in bfloat16 (as SmolLM2 ships; the weights stay bfloat16) and in float32: each op is one
// Forward of one new token per sequence at a context of 129 tokens, with one logits row per sequence
// (the step rewrites the same position each time, so the cost stays that of context 129). tok/s counts
// tokens of all sequences; cpu-ns/op is the process's CPU time per step (the machine is shared).
//
//	go test -run XXX -bench Decode ./model
func BenchmarkDecode(b *testing.B) {
	cfg := smolLM2Config()
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF32} {
		r := newRandomModel(cfg, dt, 1)
		for _, batch := range []int{1, 4} {
			b.Run(fmt.Sprintf("%v/batch=%d", dt, batch), func(b *testing.B) {
				benchmarkDecode(b, r, batch)
			})
		}
	}
}

// BenchmarkDecodeFP8 is BenchmarkDecode of the bfloat16 checkpoint run as FP8 (Options.Quantization
// fp8), with float32 and FP8 KV pages: the CPU's FP8 path is the GPU kernels' reference, not a fast
// path; this measures what it costs.
//
//	go test -run XXX -bench DecodeFP8 ./model
func BenchmarkDecodeFP8(b *testing.B) {
	r := newRandomModel(smolLM2Config(), weights.DTypeBF16, 1)
	for _, kv := range []string{"", KVCacheFP8} {
		b.Run(fmt.Sprintf("kv=%s/batch=1", cmp.Or(kv, KVCacheAuto)), func(b *testing.B) {
			benchmarkDecode(b, r, 1, Options{Quantization: QuantizationFP8, KVCacheDType: kv})
		})
	}
}

func benchmarkDecode(b *testing.B, r *randomModel, batch int, opts ...Options) {
	const blockSize, prompt = 16, 128
	cfg := r.cfg
	numBlocks := batch * (prompt/blockSize + 1)
	o := Options{}
	if len(opts) > 0 {
		o = opts[0]
	}
	o.NumBlocks, o.BlockSize, o.Logger = numBlocks, blockSize, slog.New(slog.DiscardHandler)
	m, err := load(cfg, r.get, o, NewCPUBackend)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	p := newPager(numBlocks, blockSize, newRand(5))
	var chunks []chunk
	for seq := range batch {
		chunks = append(chunks, chunk{seq, randomTokens(newRand(uint64(seq)), prompt, cfg.VocabSize)})
	}
	if _, err := m.Forward(p.step(chunks...)); err != nil {
		b.Fatal(err)
	}
	for seq := range chunks {
		chunks[seq].tokens = []int32{1}
	}
	decode := p.step(chunks...)
	steps, cpu0 := 0, cpuTime()
	for b.Loop() {
		for seq := range decode.Tokens {
			decode.Tokens[seq] = int32((steps*7 + seq) % cfg.VocabSize)
		}
		if _, err := m.Forward(decode); err != nil {
			b.Fatal(err)
		}
		steps++
	}
	b.ReportMetric(float64(steps*batch)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(steps), "cpu-ns/op")
}

// BenchmarkPrefill measures a 64-token prefill of the SmolLM2-135M shape (bfloat16 weights) on the CPU
// backend: each op prefills a new sequence into fresh pages, with the last row's logits.
func BenchmarkPrefill(b *testing.B) {
	const blockSize, prompt = 16, 64
	cfg := smolLM2Config()
	r := newRandomModel(cfg, weights.DTypeBF16, 1)
	numBlocks := prompt / blockSize
	m, err := load(cfg, r.get, Options{NumBlocks: numBlocks, BlockSize: blockSize}, NewCPUBackend)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	tokens := randomTokens(newRand(3), prompt, cfg.VocabSize)
	steps, cpu0 := 0, cpuTime()
	for b.Loop() {
		p := newPager(numBlocks, blockSize, newRand(uint64(steps)))
		if _, err := m.Forward(p.step(chunk{0, tokens})); err != nil {
			b.Fatal(err)
		}
		steps++
	}
	b.ReportMetric(float64(steps*prompt)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(steps), "cpu-ns/op")
}
