package model

import (
	"fmt"
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

// BenchmarkDecode measures decode of a SmolLM2-135M-shaped random model on the CPU backend: each op is
// one Forward of one new token per sequence at a context of 129 tokens, with one logits row per
// sequence (the step rewrites the same position each time, so the cost stays that of context 129).
func BenchmarkDecode(b *testing.B) {
	cfg := smolLM2Config()
	r := newRandomModel(cfg, weights.DTypeBF16, 1)
	for _, batch := range []int{1, 4} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const blockSize, prompt = 16, 128
			numBlocks := batch * (prompt/blockSize + 1)
			m, err := load(cfg, r.get, Options{NumBlocks: numBlocks, BlockSize: blockSize}, NewCPUBackend)
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
			i := 0
			for b.Loop() {
				for seq := range decode.Tokens {
					decode.Tokens[seq] = int32((i*7 + seq) % cfg.VocabSize)
				}
				if _, err := m.Forward(decode); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(i*batch)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
