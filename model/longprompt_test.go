package model

import (
	"fmt"
	"testing"

	"github.com/gollm/gollm/weights"
)

// TestLongPromptBoundedMemory prefills a prompt many times longer than the step (chunked prefill, each
// chunk attending to the pages the earlier ones cached) and checks that the activation buffers, the
// model's and the CPU backend's, stay the size of one chunk whatever the prompt's length: no buffer of
// every prompt position (logits, rotary factors, q/k/v) and none of chunk × context (attention scores),
// with logits computed for the last position only, as the scheduler asks. The chunked prefill must then
// give the greedy ids of the prompt prefilled in one step, on a Llama-3.1-style rotary scaling taken
// past its original context.
func TestLongPromptBoundedMemory(t *testing.T) {
	cfg := tinyConfig()
	cfg.MaxPositionEmbeddings = 4096
	cfg.RopeScaling = weights.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4,
		OriginalMaxPositionEmbeddings: 256}
	const chunkLen, newTokens, blockSize = 64, 6, 16
	for _, promptLen := range []int{chunkLen * 3, 1500} {
		t.Run(fmt.Sprint("prompt=", promptLen), func(t *testing.T) {
			prompt := randomTokens(newRand(uint64(promptLen)), promptLen, cfg.VocabSize)
			load := func() *Model {
				m, err := LoadRandom(cfg, 7, Options{NumBlocks: (promptLen+newTokens)/blockSize + 2, BlockSize: blockSize}, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			// generate prefills the prompt in steps of at most stepTokens tokens, logits on the last row of
			// the last chunk only, then decodes greedily.
			generate := func(m *Model, stepTokens int) []int32 {
				p := newModelPager(m, newRand(3))
				var ids []int32
				for start := 0; start < promptLen; start += stepTokens {
					end := min(start+stepTokens, promptLen)
					s := p.step(chunk{seq: 0, tokens: prompt[start:end]})
					if end < promptLen {
						s.LogitRows = nil
					}
					got, err := m.ForwardGreedy(s)
					if err != nil {
						t.Fatalf("prefill [%d, %d): %v", start, end, err)
					}
					ids = got
				}
				out := []int32{ids[0]}
				for len(out) < newTokens {
					ids, err := m.ForwardGreedy(p.step(chunk{seq: 0, tokens: out[len(out)-1:]}))
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, ids[0])
				}
				return out
			}
			chunked, whole := load(), load()
			gotChunked, gotWhole := generate(chunked, chunkLen), generate(whole, promptLen)
			if fmt.Sprint(gotChunked) != fmt.Sprint(gotWhole) {
				t.Errorf("greedy ids in chunks of %d: %v, in one step: %v", chunkLen, gotChunked, gotWhole)
			}

			// The chunked model's buffers hold one chunk; the one-step model's grew with the prompt (the
			// check can fail).
			if ws := chunked.ws; ws.capTokens != chunkLen || ws.capLogits != 1 {
				t.Errorf("chunked: workspace of %d token rows and %d logit rows, want %d and 1", ws.capTokens, ws.capLogits, chunkLen)
			}
			if ws := whole.ws; ws.capTokens != nextPow2(promptLen) || ws.capLogits != 1 {
				t.Errorf("one step: workspace of %d token rows and %d logit rows, want %d and 1", ws.capTokens, ws.capLogits, nextPow2(promptLen))
			}
			b := chunked.backend.(*cpuBackend)
			sh := b.shape
			for _, buf := range []struct {
				name      string
				have, per int
			}{
				{"k", cap(b.k), sh.NumKVHeads * sh.HeadDim}, {"v", cap(b.v), sh.NumKVHeads * sh.HeadDim},
				{"q", cap(b.q), sh.NumHeads * sh.HeadDim}, {"cos", cap(b.cos[0]), sh.HeadDim / 2},
				{"sin", cap(b.sin[0]), sh.HeadDim / 2},
			} {
				if buf.have > chunkLen*buf.per {
					t.Errorf("chunked: CPU backend's %s holds %d rows, more than the chunk's %d", buf.name, buf.have/buf.per, chunkLen)
				}
			}
		})
	}
}
