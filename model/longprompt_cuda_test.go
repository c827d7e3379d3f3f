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
// allocation granule of slack), and
// gives the greedy ids of the same prompt prefilled in one step.
func TestCUDALongPromptBoundedMemory(t *testing.T) {
	gpuDevice(t)
	cfg := tinyConfig()
	cfg.MaxPositionEmbeddings = 32768
	cfg.RopeScaling = weights.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4,
		OriginalMaxPositionEmbeddings: 4096}
	const promptLen, chunkLen, newTokens, blockSize = 16384, 512, 6, 16
	prompt := randomTokens(newRand(5), promptLen, cfg.VocabSize)
	load := func() *Model {
		m, err := LoadRandom(cfg, 7, Options{Device: DeviceCUDA, DType: "float32", NumBlocks: promptLen/blockSize + 4,
			BlockSize: blockSize, MaxStepTokens: chunkLen, MaxLogitRows: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	// generate prefills in steps of stepTokens (logits on the prompt's last row only), then decodes
	// greedily; it returns the ids and the device's free memory after the first and the last prefill step.
	generate := func(m *Model, stepTokens int) (ids []int32, freeFirst, freeLast int64) {
		b := m.backend.(*cudaBackend)
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
			free, _, err := b.dev.MemInfo()
			if err != nil {
				t.Fatal(err)
			}
			if start == 0 {
				freeFirst = int64(free)
			}
			freeLast, ids = int64(free), got
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
	chunked := load()
	gotChunked, freeFirst, freeLast := generate(chunked, chunkLen)
	if ws := chunked.ws; ws.capTokens != chunkLen || ws.capLogits != 1 {
		t.Errorf("chunked: workspace of %d token rows and %d logit rows, want %d and 1", ws.capTokens, ws.capLogits, chunkLen)
	}
	// One allocation granule of slack; a buffer of chunk × context scores would be 512 × 16384 × 6 heads × 4
	// bytes, 192 MiB.
	if grew := freeFirst - freeLast; grew > 2<<20 {
		t.Errorf("chunked: the prefill's later chunks took %d bytes of device memory past its first", grew)
	}
	whole := load()
	gotWhole, _, _ := generate(whole, promptLen)
	if fmt.Sprint(gotChunked) != fmt.Sprint(gotWhole) {
		t.Errorf("greedy ids in chunks of %d: %v, in one step: %v", chunkLen, gotChunked, gotWhole)
	}
}
