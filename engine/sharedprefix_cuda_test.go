//go:build cuda

package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// TestCUDASharedPrefixGreedyIdentical is TestSharedPrefixGreedyIdentical on the GPU in float32, on a
// model whose heads of 64 take the decode kernels: 8 choices of one prompt of 20 pages and prompts
// behind one preamble, all at once, with the shared-prefix decode off and always on: identical tokens.
func TestCUDASharedPrefixGreedyIdentical(t *testing.T) {
	requireGPU(t)
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, cudaHead64Config, 44)
	rng := rand.New(rand.NewPCG(44, 16))
	const blockSize = 16
	prompt := randomPrompt(rng, 20*blockSize+3)
	preamble := randomPrompt(rng, 12*blockSize)
	var reqs []Request
	for i := range 8 {
		reqs = append(reqs, Request{ID: fmt.Sprint("n", i), PromptIDs: prompt, MaxTokens: 24, IgnoreEOS: true})
	}
	for i := range 6 {
		p := append(append([]int32(nil), preamble...), randomPrompt(rng, 1+7*i)...)
		reqs = append(reqs, Request{ID: fmt.Sprint("p", i), PromptIDs: p, MaxTokens: 24, IgnoreEOS: true})
	}
	run := func(shared string) []result {
		f, err := weights.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		m, err := model.Load(f, model.Options{NumBlocks: 512, BlockSize: blockSize, Device: model.DeviceCUDA,
			DType: "float32", SharedPrefix: shared})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		e := newEngine(t, m, Config{})
		got := runConcurrent(t, e, reqs)
		closeAndCheckPool(t, e)
		return got
	}
	off, always := run(model.SharedPrefixOff), run(model.SharedPrefixAlways)
	for i, r := range reqs {
		if off[i].err != nil || always[i].err != nil {
			t.Fatalf("request %s: %v, %v", r.ID, off[i].err, always[i].err)
		}
		if fmt.Sprint(off[i].ids) != fmt.Sprint(always[i].ids) {
			t.Errorf("request %s: shared-prefix decode gives %v, the plain kernels %v", r.ID, always[i].ids, off[i].ids)
		}
	}
}
