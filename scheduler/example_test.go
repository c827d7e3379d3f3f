package scheduler_test

import (
	"fmt"

	"github.com/gollm/gollm/kvcache"
	"github.com/gollm/gollm/scheduler"
)

// Example runs the engine's step loop over a fake model whose next token is the last token plus
// one. The 10-token prompt does not fit the 8-token budget, so it is prefilled in two chunks, the
// second alongside the other sequence's decode.
func Example() {
	pool, err := kvcache.NewPool(kvcache.Config{NumBlocks: 16, BlockSize: 4, PrefixCaching: true})
	if err != nil {
		panic(err)
	}
	s, err := scheduler.New(scheduler.Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 8}, pool)
	if err != nil {
		panic(err)
	}
	short := scheduler.NewSequence(1, []int32{1, 2, 3}, scheduler.Limits{MaxTokens: 3})
	long := scheduler.NewSequence(2, []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, scheduler.Limits{MaxTokens: 2})
	for _, seq := range []*scheduler.Sequence{short, long} {
		if err := s.Add(seq); err != nil {
			panic(err)
		}
	}
	for s.HasUnfinished() {
		b := s.Schedule()
		// A real engine builds the model's flat step from the chunks here and runs it.
		var sampled []int32
		for i, c := range b.Chunks {
			kind := "prefill"
			if i < b.NumDecodes {
				kind = "decode"
			}
			fmt.Printf("seq %d %s [%d,%d) slots %v", c.Seq.ID(), kind, c.Start, c.Start+c.Len, c.SlotMapping)
			if c.NeedsLogits {
				sampled = append(sampled, c.Tokens[c.Len-1]+1)
				fmt.Print(" -> sample")
			}
			fmt.Println()
		}
		seqs, err := s.Update(b, sampled)
		if err != nil {
			panic(err)
		}
		for _, seq := range seqs {
			if seq.Finished() {
				fmt.Printf("seq %d finished (%s): %v\n", seq.ID(), seq.FinishReason(), seq.Output())
			}
		}
		fmt.Println("--")
	}
	st := pool.Stats()
	fmt.Printf("used %d, cached %d, free %d\n", st.UsedBlocks, st.CachedBlocks, st.FreeBlocks)
	// Output:
	// seq 1 prefill [0,3) slots [0 1 2] -> sample
	// seq 2 prefill [0,5) slots [4 5 6 7 8]
	// --
	// seq 1 decode [3,4) slots [3] -> sample
	// seq 2 prefill [5,10) slots [9 10 11 12 13] -> sample
	// --
	// seq 1 decode [4,5) slots [16] -> sample
	// seq 2 decode [10,11) slots [14] -> sample
	// seq 1 finished (length): [4 5 6]
	// seq 2 finished (length): [20 21]
	// --
	// used 0, cached 3, free 13
}
