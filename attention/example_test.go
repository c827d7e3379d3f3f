package attention_test

import (
	"fmt"

	"github.com/gollm/gollm/attention"
)

// A decode step of one sequence whose context is a single token: the softmax has one term, so the output
// is that token's V row.
func ExampleAttend() {
	const blockSize, kvHeads, headDim, numHeads = 16, 1, 4, 2
	cache := attention.NewCache(8, blockSize, kvHeads, headDim)
	table := []int32{5} // the sequence's only page is physical block 5
	k := []float32{1, 0, 0, 0}
	v := []float32{0.5, -1, 2, 3}
	cache.Write(k, v, []int32{attention.Slot(table, blockSize, 0)})

	q := []float32{1, 2, 3, 4, 4, 3, 2, 1} // [1 row][2 heads][4]
	out := make([]float32, len(q))
	attention.Attend(out, q, numHeads, 0.5, cache, &attention.Batch{
		QueryStart:  []int32{0, 1},
		ContextLens: []int32{1},
		BlockTables: [][]int32{table},
	})
	fmt.Println(out)
	// Output: [0.5 -1 2 3 0.5 -1 2 3]
}

// Plan spreads batch 1 at 128k tokens over a 132-SM GPU with split-k, and keeps a full batch grouped.
func ExamplePlan() {
	llama3 := func(batch int, ctx int32) attention.PlanInput {
		lens := make([]int32, batch)
		for i := range lens {
			lens[i] = ctx
		}
		return attention.PlanInput{Batch: batch, ContextLens: lens, NumHeads: 32, NumKVHeads: 8,
			HeadDim: 128, BlockSize: 16, DTypeSize: 2, NumSMs: 132, ProgramsPerSM: 2}
	}
	long := attention.Plan(llama3(1, 131072))
	full := attention.Plan(llama3(256, 1024))
	fmt.Println(long.Kernel, long.NumPartitions*8 >= 2*132, full.Kernel)
	// Output: split-k true grouped
}
