//go:build cuda

package model

import (
	"fmt"
	"testing"

	"github.com/gollm/gollm/weights"
)

// TestCUDALongPromptBoundedMemory is TestLongPromptBoundedMemory on the GPU: a 16384-token prompt in
// chunks of 512 leaves the workspace at one chunk, takes no device memory past what its first chunk took
// (the metadata's block tables grow by a page id per 16 tokens, within the arena's first allocation; one
// allocation granule of slack), and gives the greedy ids of the same prompt prefilled in one step
// (float32 compute, as the CPU's).
func TestCUDALongPromptBoundedMemory(t *testing.T) {
	dev := gpuDevice(t)
	cfg := cudaReferenceConfig(128) // llama3 rotary scaling past its original context of 256
	cfg.MaxPositionEmbeddings = 32768
	const promptLen, chunkLen, newTokens, blockSize = 16384, 512, 6, 16
	prompt := randomTokens(newRand(5), promptLen, cfg.VocabSize)
	r := newRandomModel(cfg, weights.DTypeBF16, 7)
	newModel := func() *Model {
		m, err := load(cfg, r.get, Options{NumBlocks: promptLen/blockSize + 4, BlockSize: blockSize}, func(s Shape) (Backend, error) {
			return newCUDABackend(s, cudaConfig{dtype: weights.DTypeF32, dev: dev})
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	// generate prefills in steps of stepTokens (logits on the prompt's last row only), then decodes
	// greedily; it returns the ids and the device's free memory after the first and the last prefill step.
	generate := func(m *Model, stepTokens int) (ids []int32, freeFirst, freeLast int64) {
		p := newModelPager(m, newRand(3))
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
			free, _, err := dev.MemInfo()
			if err != nil {
				t.Fatal(err)
			}
			if start == 0 {
				freeFirst = free
			}
			freeLast, ids = free, got
		}
		out := []int32{ids[0]}
		for len(out) < newTokens {
			got, err := m.ForwardGreedy(p.step(chunk{seq: 0, tokens: out[len(out)-1:]}))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got[0])
		}
		return out, freeFirst, freeLast
	}
	chunked := newModel()
	gotChunked, freeFirst, freeLast := generate(chunked, chunkLen)
	if ws := chunked.ws; ws.capTokens != chunkLen || ws.capLogits != 1 {
		t.Errorf("chunked: workspace of %d token rows and %d logit rows, want %d and 1", ws.capTokens, ws.capLogits, chunkLen)
	}
	// One allocation granule of slack; a buffer of chunk × context scores would be 512 × 16384 × 8 heads × 4
	// bytes, 256 MiB.
	if grew := freeFirst - freeLast; grew > 2<<20 {
		t.Errorf("chunked: the prefill's later chunks took %d bytes of device memory past its first", grew)
	}
	whole := newModel()
	gotWhole, _, _ := generate(whole, promptLen)
	if fmt.Sprint(gotChunked) != fmt.Sprint(gotWhole) {
		t.Errorf("greedy ids in chunks of %d: %v, in one step: %v", chunkLen, gotChunked, gotWhole)
	}
}
