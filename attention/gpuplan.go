package attention

import "math/bits"

// The GPU dispatcher's side of Plan (CUDAKernels.Plan, decode_cuda.go): pure functions of the call's shape
// and the device's size, here so that they build and are tested without CUDA.

// gpuSize is what the GPU dispatcher knows of the device for one call: its SMs, how many programs of
// the call's grouped and split-k kernels run at once on one (their occupancies differ: on the H100 the
// head_dim-64 grouped kernel runs 4 an SM, its split-k twin, with more registers, 3), and bw, its
// memory's peak bandwidth as a multiple of the H100's (bandwidthScale; 0 counts as 1).
type gpuSize struct {
	sms, groupedPerSM, splitPerSM int
	bw                            float64
}

// h100PeakBandwidth is the H100 SXM's peak memory bandwidth in bytes/s as its driver gives it (HBM3: 5120
// bits at 2619 MHz, double data rate), the memory the dispatcher's rules were measured on: exactly, so
// that the H100's own bandwidthScale is 1.
const h100PeakBandwidth = 2 * 2619e6 * 5120 / 8

// bandwidthScale is gpuSize.bw for a device of peak memory bandwidth peak (bytes/s; 0 if unknown): peak
// relative to the H100's, never below 1 (1.44 on the H200).
func bandwidthScale(peak float64) float64 { return max(1, peak/h100PeakBandwidth) }

// groupedSlots is how many grouped programs run at once: one wave of them.
func (g gpuSize) groupedSlots() int { return max(1, g.sms) * max(1, g.groupedPerSM) }

// gpuPlanInput is Plan's input for a GPU call (CUDAKernels.planInput without CUDA): the context lengths,
// heads and head_dim, elemBytes a K/V element, blockSize-token pages, and the device's size, with the
// split-k kernel's programs per SM as ProgramsPerSM and gpuMinPartitionTokens as the partition bound.
func gpuPlanInput(contextLens []int32, numHeads, kvHeads, headDim, elemBytes, blockSize int, g gpuSize) PlanInput {
	in := PlanInput{
		Batch:         len(contextLens),
		ContextLens:   contextLens,
		NumHeads:      numHeads,
		NumKVHeads:    kvHeads,
		HeadDim:       headDim,
		BlockSize:     blockSize,
		DTypeSize:     elemBytes,
		NumSMs:        g.sms,
		ProgramsPerSM: g.splitPerSM,
	}
	in.MinPartitionTokens = gpuMinPartitionTokens(contextLens, kvHeads, in.tokenBytes(), blockSize, g)
	return in
}

// tokenBytes is one token's K and V of one KV head: 2 · head_dim · element size.
func (in PlanInput) tokenBytes() int { return 2 * in.HeadDim * in.DTypeSize }

// gpuPlan is an eager GPU call's plan (CUDAKernels.Plan without CUDA): Plan on in (gpuPlanInput's), the
// partition bound raised to tailBound's where the call's rows fall in tailRows' range, and split-k
// partitions rounded up to whole tiles.
func gpuPlan(in PlanInput, g gpuSize) DecodePlan {
	return tileAligned(Plan(withTailBound(in, g)), in.ContextLens)
}

// withTailBound is in with its partition bound raised to tailBound's where in's rows fall in tailRows'
// range.
func withTailBound(in PlanInput, g gpuSize) PlanInput {
	if bound, ok := tailBound(in, g); ok {
		in.MinPartitionTokens = bound
	}
	return in
}

// gpuMinPartitionTokens is the GPU's bound on Plan's split-k partitions, from what the H100 measurements
// (docs/bench/attention-h100.md) showed Plan's cost model to miss:
//   - a split-k call runs best as one wave that fills the GPU's split-k program slots (SMs ×
//     g.splitPerSM): batch × kv_heads × partitions just at or below the slots; a few programs over them
//     start a second wave (MHA batch 8 × 8192: 288 programs on 264 slots ran 22% slower than 240);
//   - partitions shorter than minSplitTokens only add per-program cost (the first tile's latency, the
//     partial state, the merge) without streaming faster (LLaMA-3-8B batch 1 × 8192: 256-token partitions
//     8% slower than 512), unless that floor leaves SMs idle (splitFloor); then the call is small (a few
//     MB of K and V: a short context at a small batch) and one program per SM is the fastest, not one per
//     slot: the programs' fixed costs, not the stream, are its time (round 21's batch sweep: Llama-3-8B
//     batch 1 × 4096, 8 KV heads: 16 partitions of 256 tokens 14.3 µs, 32 of 128 15.7; Llama-3.2-1B batch
//     4 × 1024: 4 of 256 11.0, 16 of 64 14.1);
//   - at most maxSplitPartitions partitions per context;
//   - the bound is evened out over the longest context (ctx / ⌈ctx / bound⌉), so that the partitions Plan
//     cuts at the bound are equal (5968 + 2224 tokens ran 7% slower than 4096 + 4096), and rounded to
//     whole 64-token tiles;
//   - when batch × kv_heads rows already keep the memory system busy (fillsGPU), splitting did not pay,
//     so the bound is the whole context (but see tailBound, which gpuPlan and gpuGraphPlan apply).
//
// tokenBytes is one token's K and V of one KV head (2 · head_dim · element size).
func gpuMinPartitionTokens(contextLens []int32, kvHeads, tokenBytes, blockSize int, g gpuSize) int {
	longest := longestContext(contextLens)
	sms := max(1, g.sms)
	rows := max(1, len(contextLens)*kvHeads)
	if fillsGPU(rows, tokenBytes, longest, g) {
		return roundUp(longest+1, blockSize)
	}
	floor := splitFloor(longest, rows, sms)
	parts := sms * max(1, g.splitPerSM) / rows
	if floor < minSplitTokens {
		parts = ceilDiv(sms, rows)
	}
	return evenBound(longest, floor, parts)
}

// evenBound is the partition bound that cuts a context of longest tokens into at most parts (and at
// most maxSplitPartitions) equal partitions of whole tiles, none shorter than floor.
func evenBound(longest, floor, parts int) int {
	parts = min(maxSplitPartitions, max(1, parts))
	bound := max(floor, roundUp(ceilDiv(longest, parts), cudaTileTokens))
	parts = ceilDiv(longest, bound)
	return max(floor, roundUp(ceilDiv(longest, parts), cudaTileTokens))
}

// tailBound is the partition bound of a call whose rows exceed the grouped kernel's slots by a part of a
// wave that runs short of bandwidth alone (tailRows), where one program per row leaves its overflow to
// run as a second wave of a few programs alone, each as long as the first wave's: partitions no shorter
// than a tailParts-th of the context (Plan then takes up to tailParts of them) make it short. ok is
// false elsewhere. CUDAKernels.Plan and CUDAKernels.GraphPlan (gpuPlan, gpuGraphPlan) apply it;
// GraphPlan alone does not.
func tailBound(in PlanInput, g gpuSize) (bound int, ok bool) {
	longest := longestContext(in.ContextLens)
	if !tailRows(len(in.ContextLens)*in.NumKVHeads, in.tokenBytes(), longest, g) {
		return 0, false
	}
	return evenBound(longest, minSplitTokens, tailParts), true
}

// tailRows reports whether rows (sequence, KV head) programs of the grouped kernel, whose tiles hold
// tokenBytes a token and whose longest context is longest, exceed its slots (g.groupedSlots) by an
// overflow that runs short of bandwidth: the programs past the first wave start when it ends, all at
// once for equal contexts, and run alone. Two cases:
//   - under tailWaves of a wave, at any context. H100, round 21 (grouped against the best split, µs):
//     Llama-3-8B × 4096 tokens at batch 33 (264 rows, one wave) 185.6 against 185.6, at batch 34 (272)
//     235.8 against 199.7, 40 (320) 249.4 against 229.6, 44 (352) 264.7 against 250.5; Llama-3.2-1B (528
//     slots) at batch 67 215.6 against 198.6 and 80 250.3 against 238.8; split by Plan under tailBound
//     (2 to 4 partitions), each within 3% of the best;
//   - under 1.5 waves, where the overflow's rows alone would not fill the GPU (fillsGPU: the bytes in
//     flight that keep a memory busy grow with its bandwidth), at contexts of longSplitTokens or more,
//     whose partitions are long enough to pay for the split's merge. On the H100 the overflow at 1.45
//     waves (120 rows of head_dim 128, 240 of 64) fills it, and grouped ran within 3% of the best
//     (Llama-3-8B batch 48 × 4096 276.7 against 272.1, × 2048 139.2 against 141.2); on the H200 (bw
//     1.43: 170 rows would) it does not, and two partitions ran 3-6% faster (round 25, µs: Llama-3-8B
//     batch 47 and 48 × 2048 103.5 and 104.3 against 99.6 and 101.6, × 4096 199.3 and 200.5 against
//     186.7 and 191.1, batch 48 × 8192 392.9 against 368.6; Llama-2-7B batch 12 × 4096 200.5 against
//     189.0; MHA 32 × 2048 103.8 against 100.6), but not at 1024 tokens (Llama-3-8B batch 48 54.7
//     grouped against 56.5). Past 1.5 waves two partitions make a fourth wave of split-k programs and
//     more make them short: grouped was as fast or up to 5% faster there (batch 50-54 × 2048, the 1B's
//     800-864 rows × 4096).
//
// Two waves and more hide the tail (Llama-2-7B batch 26 × 2048, 3.2 waves: 300.5 against 298.6 on the
// H100).
func tailRows(rows, tokenBytes, longest int, g gpuSize) bool {
	slots := g.groupedSlots()
	switch {
	case rows <= slots || 2*rows >= 3*slots:
		return false
	case float64(rows) < tailWaves*float64(slots):
		return true
	}
	return longest >= longSplitTokens && !fillsGPU(rows-slots, tokenBytes, longest, g)
}

// tailWaves is where tailRows' first case stops: 1.4 waves of the grouped kernel's programs.
const tailWaves = 1.4

// tailParts is the most partitions per context tailBound allows a call in tailRows' range: the
// overflow's programs are then a half to a quarter as long as a whole context's.
const tailParts = 4

// fillsGPU reports whether one program per (sequence, KV head) row keeps the GPU's memory system busy
// without a split: rows whose tiles hold tokenBytes a token (K and V) give 90% of the SMs the bytes in
// flight of one fullRowTokenBytes program each, times g.bw: by Little's law the bytes in flight that
// keep a memory busy grow with its bandwidth at the same latency, so a faster memory needs more rows. On
// the H200 (bw 1.44) 128 rows of head_dim 128 no longer do: Llama-3-8B batch 16 × 4096 grouped 73.7 µs,
// split in 2 69.0; Llama-2-7B batch 4 × 4096 73.5 against 68.0; Llama-3.2-1B batch 16 × 1024 17.4
// against 15.7 (round 24's batch sweep on an H200), where the H100 ran them level or grouped faster
// (below). A head_dim-64 program has half the bytes of a head_dim-128 one in flight, so it takes twice
// the rows, at contexts past longSplitTokens: Llama-3.2-1B batch 16 × 4096 (128 rows of 64) ran grouped
// at 60.9 µs and split in 3 at 52.4, where Llama-3-8B's 128 rows of 128 ran grouped at 94.3 µs against
// 96.4 split (H100, round 21's batch sweep). At shorter contexts the split's extra programs cost what
// they win there: the 1B at batch 16 × 1024 grouped 19.7 µs, in 2 partitions 19.3, and its decode step
// at context 1088 (cap 2048, 3 partitions) 1.404 ms against 1.390 grouped.
func fillsGPU(rows, tokenBytes, longest int, g gpuSize) bool {
	if longest <= longSplitTokens {
		tokenBytes = fullRowTokenBytes
	}
	return 10*float64(rows)*float64(max(1, tokenBytes)) >= 9*float64(max(1, g.sms))*fullRowTokenBytes*max(1, g.bw)
}

// fullRowTokenBytes is a token's K and V of one head_dim-128 head in 16 bits: the rows whose programs
// fill the GPU one an SM (fillsGPU).
const fullRowTokenBytes = 2 * 128 * 2

// longSplitTokens is the context past which fillsGPU counts the bytes a row's program has in flight.
const longSplitTokens = 2048

// splitFloor is the shortest partition gpuMinPartitionTokens allows for rows (sequence, KV head) rows
// whose longest context is longest: minSplitTokens, unless partitions that long would leave more than
// a tenth of the SMs without a program (short contexts at small batches, which a decode step at batch 1
// waits on: Llama-3-8B at 1024 tokens has 8 KV heads, and 512-token partitions make 16 programs on 132
// SMs), then one tile.
func splitFloor(longest, rows, sms int) int {
	if 10*rows*ceilDiv(longest, minSplitTokens) < 9*sms {
		return cudaTileTokens
	}
	return minSplitTokens
}

// minSplitTokens is the shortest split-k partition the GPU dispatcher allows (see gpuMinPartitionTokens).
const minSplitTokens = 512

// maxSplitPartitions bounds the partitions of one context: each adds a partial to merge (GQA batch 1 ×
// 65536, 2 KV heads: 64 partitions of 1024 tokens ran at 37.5 µs, 128 of 512 at 38.4 µs).
const maxSplitPartitions = 64

// maxPlannedPartitions is the most split-k partitions of a context of up to maxContext tokens that the
// GPU's plans (CUDAKernels.Plan, GraphPlan on its input) choose: partitions are whole 64-token tiles
// (gpuMinPartitionTokens can lower its floor to one tile where longer partitions would leave SMs idle)
// and at most maxSplitPartitions per context.
func maxPlannedPartitions(maxContext int) int {
	return max(1, min(maxSplitPartitions, ceilDiv(maxContext, cudaTileTokens)))
}

// cudaTileTokens is the token tile of the mma kernels (the FMA kernels' 32 divides it); a multiple of
// every supported block size. A split-k partition that is not a multiple of it ends in a partial tile,
// whose copies and mma work are spent on padding.
const cudaTileTokens = 64

// tileAligned rounds a split-k plan's partitions up to whole tiles (Plan rounds them to pages only).
func tileAligned(plan DecodePlan, contextLens []int32) DecodePlan {
	if plan.Kernel != SplitK || plan.PartitionTokens%cudaTileTokens == 0 {
		return plan
	}
	longest := longestContext(contextLens)
	plan.PartitionTokens = roundUp(plan.PartitionTokens, cudaTileTokens)
	plan.NumPartitions = ceilDiv(longest, plan.PartitionTokens)
	if plan.NumPartitions < 2 {
		return DecodePlan{Kernel: Grouped, NumPartitions: 1}
	}
	return plan
}

// maxOneLevelPartitions is the most split-k partitions per context that the fused merge takes in one
// level (mergeChunk); beyond it, it merges in two.
const maxOneLevelPartitions = 16

// gpuGraphPlan is a captured GPU call's plan (CUDAKernels.GraphPlan without CUDA): GraphPlan on in, whose
// rows are the graph's batch bucket, with the partition bound raised to tailBound's where the bucket's
// rows fall in tailRows' range and the smallest batch the graph replays, minBatch, still gives the
// grouped kernel 90% of a wave: then every batch it serves is at or past one wave, and a split costs the
// smallest little (Llama-3-8B at 33 × 4096, exactly one wave: 4 partitions 3% slower than grouped) where
// it takes the tail off the rest. A bucket whose batches reach down well below a wave (the model's
// power-of-two buckets up to 32 replay down to half of theirs) keeps GraphPlan's plan.
func gpuGraphPlan(in PlanInput, g gpuSize, minBatch int) DecodePlan {
	if 10*minBatch*in.NumKVHeads >= 9*g.groupedSlots() {
		in = withTailBound(in, g)
	}
	return GraphPlan(in)
}

// GraphPlan is the plan of a call captured into a CUDA graph and replayed at every context up to the one
// it is planned at: in.ContextLens hold that cap (the model's graph steps run at contexts from half the
// cap to the cap). It is Plan's choice in whole 64-token tiles (tileAligned, as CUDAKernels.Plan: Plan's
// 80-, 144- and 208-token partitions of small-KV-head models at long caps ran up to 7.5% slower than
// 128, 192 and 256 on the H100, round 18), with two changes for split-k that look at the whole range:
//   - partitions are lengthened to at most maxOneLevelPartitions per context where that still gives 90%
//     of the SMs a program at the cap: the cap's plan fills the GPU only at the cap, and a replay at half
//     of it still has more than 16 partitions to merge in two levels where 16 longer ones merge in one
//     (H100, decode step at batch 1, context 1088, cap 2048, BenchmarkCUDADecode: 64-token partitions
//     (Plan's) 1.183 ms (Llama-3.2-1B) and 5.776 ms (Llama-3-8B), 128-token 1.148 and 5.734 ms);
//   - partitions are then shortened to a power of two tiles and halved (not below that one-level
//     length) while the programs that work at three quarters of the cap (the middle of the contexts the
//     graph runs at) still fit in one wave of the GPU's program slots (SMs × in.ProgramsPerSM, the
//     split-k kernel's occupancy): Plan's floor of minSplitTokens counts programs at the cap it sees,
//     but the graph also runs at half of it, where the partitions past a context return at once. H100, context 1088, cap 2048 (BenchmarkCUDADecode,
//     forced partition lengths, one call): batch 4 Llama-3.2-1B (3 split-k programs an SM) 128 tokens
//     1.110 ms, 256 1.131, Plan's 512 1.203; Llama-3-8B (2 an SM) 128 5.871, 256 5.756, 512 5.841; batch
//     8 1B 128 1.199, 256 1.178, 512 1.230; 8B 128 6.226, 256 6.048, 512 6.006: the rule picks the
//     fastest in each (until round 21 it counted the programs at the cap on the grouped kernel's 4 slots an
//     SM for the 1B, which gave the same four choices by two errors that cancelled). Batch 8 of the 1B at
//     context 3000 (cap 4096): Plan's 6 partitions of 704 tokens 1.310 ms, 8 of 512 1.295 (five of 704
//     work there, the last of them 184 tokens long; six of 512 fill the 396 slots evenly); batch 16,
//     which fillsGPU now splits at that cap: 4 partitions of 1024 1.718 ms, grouped 1.786.
func GraphPlan(in PlanInput) DecodePlan {
	plan := tileAligned(Plan(in), in.ContextLens)
	if plan.Kernel != SplitK {
		return plan
	}
	longest := longestContext(in.ContextLens)
	rows := len(in.ContextLens) * in.NumKVHeads
	sms := max(1, in.NumSMs)
	oneLevel := roundUp(ceilDiv(longest, maxOneLevelPartitions), cudaTileTokens)
	if plan.NumPartitions > maxOneLevelPartitions && 10*rows*maxOneLevelPartitions >= 9*sms {
		plan = DecodePlan{Kernel: SplitK, PartitionTokens: oneLevel, NumPartitions: ceilDiv(longest, oneLevel)}
	}
	slots := sms * max(1, in.ProgramsPerSM)
	mid := longest - longest/4
	fits := func(tokens int) bool { return tokens >= oneLevel && rows*ceilDiv(mid, tokens) <= slots }
	tokens := plan.PartitionTokens
	if p := cudaTileTokens << (bits.Len(uint(tokens/cudaTileTokens)) - 1); p < tokens && fits(p) {
		tokens = p
	}
	for tokens%(2*cudaTileTokens) == 0 && fits(tokens/2) {
		tokens /= 2
	}
	if tokens != plan.PartitionTokens {
		plan = DecodePlan{Kernel: SplitK, PartitionTokens: tokens, NumPartitions: ceilDiv(longest, tokens)}
	}
	return plan
}

// longestContext is the longest of the context lengths (0 for none).
func longestContext(contextLens []int32) int {
	longest := 0
	for _, n := range contextLens {
		longest = max(longest, int(n))
	}
	return longest
}

// largeStreamL2s is the stream size, in L2 sizes, from which the K/V copies carry evict_normal instead
// of evict_first on memory slower than largeStreamMaxBandwidth (largeStream).
const largeStreamL2s = 16

// largeStreamMaxBandwidth is the peak memory bandwidth (bytes/s) from which large streams keep
// evict_first too. It lies between the two GPUs measured: the H100 (3.35e12), where evict_normal was level
// or better on large streams (below), and the H200 (4.81e12 by its driver), where it was 5-14% slower
// there (0.3-7% after do_bench's flush): LLaMA-7B 8 × 8192 278-280 against 246 µs (288 against 270
// flushed), LLaMA-3-8B 128 × 8192 1050 against 961 (1058 against 1005), and the Llama-3-8B decode step at
// batch 64 and context 4096 12.81 against 12.13 ms (round 24, docs/bench/attention-h200.md). What differs is a guess: a faster memory
// fills L2 faster than its evict_normal replacement keeps up with.
const largeStreamMaxBandwidth = 4e12

// largeStream reports whether a call reading K and V of contextLens tokens (kvHeads heads of headDim
// elements of elemBytes bytes each) should carry evict_normal: it streams at least largeStreamL2s times
// l2Bytes (838 MB on the H100) on a device whose peak memory bandwidth peakBW is under
// largeStreamMaxBandwidth (0, unknown, counts as under). Below that size evict_first keeps what other
// kernels left in L2 (the weights the model's next products read, the dirty lines of a do_bench flush)
// and was the faster on the H100: the Llama-3-8B decode step at batch 64 and context 2048 (537 MB a
// layer) 11.54 against 11.59 ms with evict_normal (two rounds), and every split-k shape of the issue-6
// grid, flushed or not. On longer streams its gain was gone there and a flush cost it: Llama-3-8B at
// context 4096 (1074 MB a layer) 17.33 against 17.34 ms, Llama-3.2-1B 4.099 against 4.072, and after
// do_bench's flush LLaMA-3-8B 64 × 4096 383.8 against 368.0 µs (level without it: 358.7 both).
// docs/bench/attention-h100.md, round 17. A captured step (the model's CUDA graphs) passes its context
// cap for every row, so there the rule sees up to twice the stream read.
func largeStream(contextLens []int32, kvHeads, headDim, elemBytes int, l2Bytes int, peakBW float64) bool {
	if peakBW >= largeStreamMaxBandwidth {
		return false
	}
	var tokens int64
	for _, n := range contextLens {
		tokens += int64(n)
	}
	bytes := 2 * tokens * int64(kvHeads) * int64(headDim) * int64(elemBytes)
	return bytes >= largeStreamL2s*int64(l2Bytes)
}
