package attention

import (
	"fmt"
	"math"
)

// Kernel names a decode-attention algorithm.
type Kernel int

const (
	// Grouped runs one unit of work per (sequence, KV head) over the whole context; each unit reads a
	// K/V row once and serves all G = NumHeads/NumKVHeads query heads of the group.
	Grouped Kernel = iota
	// SplitK cuts each context into partitions of PartitionTokens tokens, runs one unit per (sequence,
	// KV head, partition) that leaves (m, l, acc) for the G heads, and merges partitions by log-sum-exp.
	SplitK
)

// String returns "grouped" or "split-k".
func (k Kernel) String() string {
	switch k {
	case Grouped:
		return "grouped"
	case SplitK:
		return "split-k"
	}
	return fmt.Sprintf("Kernel(%d)", int(k))
}

// DefaultMinPartitionTokens is the shortest split-k partition Plan chooses unless told otherwise: shorter
// partitions make the partial results (G·(HeadDim+2) floats per partition) and the reduce a noticeable
// share of the bytes moved, and the fixed cost of a unit a noticeable share of its time.
const DefaultMinPartitionTokens = 256

// PlanInput is what Plan needs to know about one decode step and the machine running it.
type PlanInput struct {
	// Batch is the number of decode sequences; 0 or len(ContextLens).
	Batch int
	// ContextLens holds each decode sequence's context length, this step's token included.
	ContextLens []int32
	// NumHeads and NumKVHeads are the query and KV head counts (G = NumHeads/NumKVHeads).
	NumHeads, NumKVHeads int
	// HeadDim is the size of one head; BlockSize the page size in tokens.
	HeadDim, BlockSize int
	// DTypeSize is the size in bytes of one K/V element (2 for fp16/bf16, 4 for fp32).
	DTypeSize int
	// NumSMs is the number of SMs of the GPU, or the number of workers on the CPU.
	NumSMs int
	// ProgramsPerSM is how many units run at once on one SM (resident programs that together keep the
	// memory system busy); 0 means 1, which is right for a CPU worker.
	ProgramsPerSM int
	// MinPartitionTokens bounds split-k partitions from below; 0 means DefaultMinPartitionTokens. It is
	// rounded up to a multiple of BlockSize.
	MinPartitionTokens int
}

// DecodePlan is Plan's choice for one decode step.
type DecodePlan struct {
	// Kernel is the algorithm to run.
	Kernel Kernel
	// PartitionTokens is the split-k partition length, a multiple of BlockSize; 0 for Grouped.
	PartitionTokens int
	// NumPartitions is the number of partitions of the longest context (the third dimension of the
	// split-k grid); 1 for Grouped.
	NumPartitions int
}

// The cost model's constants, in units of "the time one unit takes to stream one token of one KV head"
// (2·HeadDim·DTypeSize bytes at its share of the bandwidth).
const (
	// unitOverheadTokens is the fixed cost of a unit: starting it, loading its queries, writing its
	// output or partial state.
	unitOverheadTokens = 32
	// reduceLaunchTokens is the fixed cost of the reduce (a second launch on the GPU, a second parallel
	// phase on the CPU).
	reduceLaunchTokens = 64
	// tailFraction is the share of the longest unit by which the last wave overruns: units do not finish
	// in lockstep, so shorter units leave a shorter tail.
	tailFraction = 0.25
	// splitMargin is how much faster split-k must be predicted to be before it is chosen over grouped:
	// the model is coarse, and grouped has no reduce and no partial state to get wrong.
	splitMargin = 0.9
	// nearBest is how close to the best predicted time a split must be for Plan to prefer it for having
	// fewer partitions.
	nearBest = 1.03
	// linearCandidates is how many partition counts are tried one by one before the search steps
	// geometrically (long contexts have thousands of possible counts; neighbours cost the same).
	linearCandidates = 32
)

// Plan chooses the decode-attention kernel and its partitioning for one step. It is a pure function of
// the step's shape and the machine's size.
//
// Decode attention is memory-bound: it must stream every sequence's K and V once, so the question is only
// whether enough units run at once to keep the memory system busy and whether they finish together.
// Plan models the machine as NumSMs·ProgramsPerSM slots that each run one unit at a time, and a unit's
// time as the tokens it streams plus a fixed overhead. A set of units then takes about
//
//	max(waves · average unit, longest unit) + tailFraction · longest unit,   waves = ⌈units / slots⌉
//
// which charges wave quantization (units/slots just above an integer wastes most of a wave), stragglers
// (one long sequence among short ones) and the ragged end of the last wave.
//
// Grouped has batch × kv_heads units, one per (sequence, KV head) as long as its context. When that fills
// the machine (batch 256 × 1024 tokens × 8 KV heads is 2048 units, several waves on 132 SMs), it is
// already balanced and splitting only adds partial state and a reduce. When it does not (batch 1 ×
// 131072 tokens × 8 KV heads is 8 units: 6% of a 132-SM GPU, each walking 131072 tokens alone), split-k
// cuts each context into partitions so that batch × kv_heads × partitions covers a few waves of shorter
// units, like FlashAttention's num_splits heuristic. The partition count is chosen by the same model,
// which now also charges each partition's fixed cost, its partial (m, l, acc) written and read back
// (G·(HeadDim+2) float32 values) and the reduce's launch: that is why partitions stay at least
// MinPartitionTokens long and a multiple of the page size (a page is never shared by two units).
// Split-k is chosen only when the model predicts it at least 10% faster than grouped, and among the
// partition counts predicted within 3% of the best, the smallest is taken (the model is flat there).
// Plan costs a few microseconds: the search over partition counts is skipped when grouped is already
// within the margin of perfect balance, and steps geometrically beyond 32 partitions.
//
// The same function serves the CPU, with NumSMs = number of workers: with 2 workers and 8 KV heads every
// batch fills the machine and grouped runs; an MQA model at batch 1 splits to use both cores.
func Plan(in PlanInput) DecodePlan {
	grouped := DecodePlan{Kernel: Grouped, NumPartitions: 1}
	if in.Batch != 0 && in.Batch != len(in.ContextLens) {
		panic(fmt.Sprintf("attention: Plan: Batch %d but %d context lengths", in.Batch, len(in.ContextLens)))
	}
	if len(in.ContextLens) == 0 || in.NumKVHeads <= 0 || in.BlockSize <= 0 {
		return grouped
	}
	maxCtx, sumCtx := 0, 0
	for _, n := range in.ContextLens {
		maxCtx = max(maxCtx, int(n))
		sumCtx += int(n)
	}
	minPart := in.MinPartitionTokens
	if minPart <= 0 {
		minPart = DefaultMinPartitionTokens
	}
	minPart = roundUp(minPart, in.BlockSize)
	if maxCtx <= minPart {
		return grouped // a second partition would be shorter than the minimum
	}

	slots := float64(max(1, in.NumSMs) * max(1, in.ProgramsPerSM))
	kvHeads := float64(in.NumKVHeads)
	batch := float64(len(in.ContextLens))

	groupedTime := makespan(batch*kvHeads, kvHeads*(float64(sumCtx)+batch*unitOverheadTokens),
		float64(maxCtx)+unitOverheadTokens, slots)

	// No split can beat perfect balance of the same tokens plus the reduce's launch: when grouped is
	// within the margin of that bound, there is nothing to search for.
	if splitMargin*groupedTime <= kvHeads*float64(sumCtx)/slots+reduceLaunchTokens {
		return grouped
	}

	// Partial state per unit, written by the partition and read by the reduce, in token-equivalents.
	group := float64(max(1, in.NumHeads/in.NumKVHeads))
	tokenBytes := 2 * float64(max(1, in.HeadDim)) * float64(max(1, in.DTypeSize))
	partialTokens := 2 * group * float64(in.HeadDim+2) * 4 / tokenBytes

	type candidate struct {
		plan DecodePlan
		time float64
	}
	var candidates []candidate // in increasing partition count
	bestTime := math.Inf(1)
	maxSplits := ceilDiv(maxCtx, minPart)
	for n := 2; n <= maxSplits; n = nextSplitCount(n) {
		part := max(minPart, roundUp(ceilDiv(maxCtx, n), in.BlockSize))
		partitions := ceilDiv(maxCtx, part)
		if partitions < 2 || (len(candidates) > 0 && part == candidates[len(candidates)-1].plan.PartitionTokens) {
			continue
		}
		units := 0
		for _, ctx := range in.ContextLens {
			units += ceilDiv(int(ctx), part)
		}
		u := float64(units) * kvHeads
		t := makespan(u, kvHeads*float64(sumCtx)+u*unitOverheadTokens, float64(part)+unitOverheadTokens, slots)
		t += reduceLaunchTokens + u*partialTokens/slots
		candidates = append(candidates, candidate{DecodePlan{Kernel: SplitK, PartitionTokens: part, NumPartitions: partitions}, t})
		bestTime = min(bestTime, t)
	}
	if !(bestTime < splitMargin*groupedTime) {
		return grouped
	}
	// The model is flat near its minimum; the fewest partitions within a few percent of the best keep
	// the reduce cheapest and the choice stable from one step to the next.
	for _, c := range candidates {
		if c.time <= nearBest*bestTime {
			return c.plan
		}
	}
	panic("attention: Plan: no candidate reaches the best time") // unreachable: the best is a candidate
}

// makespan estimates how long units of total work (longest unit longest) take on slots parallel slots.
func makespan(units, total, longest, slots float64) float64 {
	waves := math.Ceil(units / slots)
	return max(waves*total/units, longest) + tailFraction*longest
}

func nextSplitCount(n int) int {
	if n < linearCandidates {
		return n + 1
	}
	return n + n/8
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func roundUp(a, b int) int { return ceilDiv(a, b) * b }
