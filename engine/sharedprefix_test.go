package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// loadTinyModelShared is loadTinyModel with Options.SharedPrefix set.
func loadTinyModelShared(t testing.TB, dir string, numBlocks, blockSize int, shared string) *model.Model {
	t.Helper()
	f, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, model.Options{NumBlocks: numBlocks, BlockSize: blockSize, SharedPrefix: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestSharedPrefixGreedyIdentical runs the same greedy requests with the shared-prefix decode off and
// always on: 8 choices of one prompt (what the server makes of n = 8) and prompts behind one preamble
// (gollm generate --prompts-file), all at once. The tokens must be identical, and every choice but the
// first must take the prompt's full pages from the prefix cache (so that their decodes share pages,
// which the shared-prefix path then reads once).
func TestSharedPrefixGreedyIdentical(t *testing.T) {
	dir := writeTinyModel(t, 44)
	rng := rand.New(rand.NewPCG(44, 8))
	const blockSize = 8
	prompt := randomPrompt(rng, 5*blockSize+3)
	preamble := randomPrompt(rng, 6*blockSize)
	var reqs []Request
	for i := range 8 {
		reqs = append(reqs, Request{ID: fmt.Sprint("n", i), PromptIDs: prompt, MaxTokens: 12, IgnoreEOS: true})
	}
	for i := range 5 {
		p := append(append([]int32(nil), preamble...), randomPrompt(rng, 1+5*i)...)
		reqs = append(reqs, Request{ID: fmt.Sprint("p", i), PromptIDs: p, MaxTokens: 12, IgnoreEOS: true})
	}
	run := func(shared string) []result {
		m := loadTinyModelShared(t, dir, 512, blockSize, shared)
		e := newEngine(t, m, Config{})
		got := runConcurrent(t, e, reqs)
		closeAndCheckPool(t, e)
		return got
	}
	off, always := run(model.SharedPrefixOff), run(model.SharedPrefixAlways)
	cached := 0
	for i, r := range reqs {
		if off[i].err != nil || always[i].err != nil {
			t.Fatalf("request %s: %v, %v", r.ID, off[i].err, always[i].err)
		}
		if fmt.Sprint(off[i].ids) != fmt.Sprint(always[i].ids) {
			t.Errorf("request %s: shared-prefix decode gives %v, the plain kernels %v", r.ID, always[i].ids, off[i].ids)
		}
		if len(always[i].ids) != r.MaxTokens {
			t.Errorf("request %s: %d tokens, want %d", r.ID, len(always[i].ids), r.MaxTokens)
		}
		if always[i].usage.CachedTokens > 0 {
			cached++
		}
	}
	// Requests reach the loop one by one (Add is asynchronous), but identical prompts never compute
	// their full pages twice: at least 7 of the 8 choices and 4 of the 5 preamble prompts hit.
	if cached < 11 {
		t.Errorf("%d requests took prompt pages from the prefix cache, want at least 11", cached)
	}
}
