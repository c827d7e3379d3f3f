package scheduler

import (
	"testing"

	"github.com/gollm/gollm/kvcache"
)

// TestWindowsHoldMoreSequences runs the same long-context workload (prompts of 1024 tokens, 256 output
// tokens each) on two pools of the same memory: a Gemma-3-like model whose layers form a full KV group
// and five sliding groups (window 64) of L layers each, and the same 6L layers without windows in one
// group (blocks six times as large, so a sixth as many). Once their prompts are in, the windowed
// sequences hold their full group's pages and only the window's pages of the others: several decode at
// once where the model without windows decodes one at a time.
func TestWindowsHoldMoreSequences(t *testing.T) {
	const bs, seqs, prompt, output = 16, 8, 1024, 256
	sliding := []kvcache.Group{{}, {Window: 64}, {Window: 64}, {Window: 64}, {Window: 64}, {Window: 64}}
	run := func(groups []kvcache.Group, numBlocks int) (maxDecoding, steps int) {
		pool, err := kvcache.NewPool(kvcache.Config{NumBlocks: numBlocks, BlockSize: bs, Groups: groups})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{MaxNumSeqs: seqs, MaxNumBatchedTokens: 2048}, pool)
		if err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			p := make([]int32, prompt)
			for j := range p {
				p[j] = int32(i*prompt + j) // no two prompts share a block
			}
			if err := s.Add(NewSequence(kvcache.SeqID(i+1), p, Limits{MaxTokens: output})); err != nil {
				t.Fatal(err)
			}
		}
		for s.HasUnfinished() {
			steps++
			b := s.Schedule()
			if len(b.Finished) > 0 {
				t.Fatalf("%v finished with an error", b.Finished[0])
			}
			if b.NumDecodes == len(b.Chunks) {
				maxDecoding = max(maxDecoding, b.NumDecodes)
			}
			if _, err := s.Update(b, make([]int32, b.NumLogits)); err != nil {
				t.Fatal(err)
			}
			if err := pool.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
		return maxDecoding, steps
	}
	// 768 blocks of L page arrays: 128 blocks a group, as the model without windows has 128 blocks of
	// 6L page arrays: one sequence of 1280 tokens (80 pages) at a time.
	windowed, windowedSteps := run(sliding, 6*128)
	full, fullSteps := run(nil, 128)
	t.Logf("sequences decoding at once: %d with windows, %d without (steps %d and %d)", windowed, full, windowedSteps, fullSteps)
	if full != 1 || windowed < 5 {
		t.Errorf("sequences decoding at once: %d with windows, %d without; want at least 5 and 1", windowed, full)
	}
	if windowedSteps*2 > fullSteps {
		t.Errorf("%d steps with windows, %d without: want fewer than half", windowedSteps, fullSteps)
	}
}
