package attention

import "math/bits"

// The partition rules of the GPU dispatcher (Decide, dispatch.go): pure functions of the call's shape
// and the device's size that set Plan's input and adjust its output where its cost model misses what
// the GPU does. The measurements behind each rule are in docs/bench/attention-h100.md and
// docs/bench/attention-h200.md.

// gpuSize is what the partition rules know of the device for one call: its SMs, how many programs of
// the call's grouped and split-k kernels run at once on one (their occupancies differ), and bw, its
// memory's peak bandwidth as a multiple of the H100's (bandwidthScale; 0 counts as 1).
type gpuSize struct {
	sms, groupedPerSM, splitPerSM int
	bw                            float64
}

// bandwidthScale is gpuSize.bw for a device of peak memory bandwidth peak (bytes/s; 0 if unknown): peak
// relative to the H100's, never below 1.
func bandwidthScale(peak float64) float64 { return max(1, peak/h100PeakBandwidth) }

// groupedSlots is how many grouped programs run at once: one wave of them.
func (g gpuSize) groupedSlots() int { return max(1, g.sms) * max(1, g.groupedPerSM) }

// gpuPlanInput is Plan's input for a GPU call: the context lengths, heads and head_dim, elemBytes a K/V
// element, blockSize-token pages, and the device's size, with the split-k kernel's programs per SM as
// ProgramsPerSM (the programs Plan counts against the slots are split-k's) and gpuMinPartitionTokens as
// the partition bound.
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

// gpuPlan is an eager GPU call's plan: Plan on in (gpuPlanInput's), the partition bound raised to
// tailBound's where the call's rows fall in tailRows' range, and split-k partitions rounded up to whole
// tiles.
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

// gpuMinPartitionTokens is the GPU's bound on Plan's split-k partitions, where Plan's cost model misses
// what the GPU does:
//   - a split-k call runs best as one wave that fills the split-k program slots (SMs × g.splitPerSM):
//     a few programs over them start a second wave;
//   - partitions shorter than minSplitTokens only add per-program cost, unless that floor leaves SMs
//     idle (splitFloor: a small call); then one program per SM is the fastest, not one per slot, since
//     the programs' fixed costs, not the stream, are its time;
//   - at most maxSplitPartitions partitions per context;
//   - the bound is evened out over the longest context (ctx / ⌈ctx / bound⌉), so that the partitions Plan
//     cuts are equal, and rounded to whole tiles;
//   - where batch × kv_heads rows already keep the memory system busy (fillsGPU) splitting does not pay:
//     the bound is the whole context (but see tailBound).
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
// wave that runs short of bandwidth alone (tailRows): one program per row would leave the overflow to
// run as a second wave of a few programs, each as long as the first wave's; partitions no shorter than
// a tailParts-th of the context (Plan then takes up to tailParts of them) make it short. ok is false
// elsewhere. gpuPlan and gpuGraphPlan apply it; GraphPlan alone does not.
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
//   - under tailWaves of a wave, at any context;
//   - under 1.5 waves, where the overflow's rows alone would not fill the GPU (fillsGPU: the bytes in
//     flight that keep a memory busy grow with its bandwidth, so this holds on the H200 and not on the
//     H100), at contexts of longSplitTokens or more, whose partitions are long enough to pay for the
//     split's merge. Past 1.5 waves two partitions would make a fourth wave of split-k programs, and
//     grouped is as fast or faster.
//
// Two waves and more hide the tail.
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

// fillsGPU reports whether one program per (sequence, KV head) row keeps the GPU's memory system busy
// without a split: rows whose tiles hold tokenBytes a token (K and V) give a full wave of the SMs
// (fillsWave) the bytes in flight of one fullRowTokenBytes program each, times g.bw: by Little's law the
// bytes in flight that keep a memory busy grow with its bandwidth at the same latency, so a faster
// memory needs more rows. A head_dim-64 program has half the bytes of a head_dim-128 one in flight, so
// it takes twice the rows, at contexts past longSplitTokens; at shorter contexts the split's extra
// programs cost what they win, and every row counts as a full one. Wider rows never count as more than
// a full one: a head_dim-256 program's ring holds no more bytes than a head_dim-128 one's (its tile is
// narrower), so it takes as many rows (docs/bench/families-h200.md).
func fillsGPU(rows, tokenBytes, longest int, g gpuSize) bool {
	tokenBytes = min(tokenBytes, fullRowTokenBytes)
	if longest <= longSplitTokens {
		tokenBytes = fullRowTokenBytes
	}
	return fillsWave(float64(rows)*float64(max(1, tokenBytes)), float64(max(1, g.sms))*fullRowTokenBytes*max(1, g.bw))
}

// splitFloor is the shortest partition gpuMinPartitionTokens allows for rows (sequence, KV head) rows
// whose longest context is longest: minSplitTokens, unless partitions that long would leave more than
// a tenth of the SMs without a program (short contexts at small batches, which a decode step at batch 1
// waits on), then one tile.
func splitFloor(longest, rows, sms int) int {
	if !fillsWave(float64(rows*ceilDiv(longest, minSplitTokens)), float64(sms)) {
		return cudaTileTokens
	}
	return minSplitTokens
}

// maxPlannedPartitions is the most split-k partitions of a context of up to maxContext tokens that the
// GPU's plans (CUDAKernels.Plan, GraphPlan on its input) choose: partitions are whole 64-token tiles
// (gpuMinPartitionTokens can lower its floor to one tile where longer partitions would leave SMs idle)
// and at most maxSplitPartitions per context.
func maxPlannedPartitions(maxContext int) int {
	return max(1, min(maxSplitPartitions, ceilDiv(maxContext, cudaTileTokens)))
}

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

// gpuGraphPlan is a captured GPU call's plan: GraphPlan on in, whose rows are the graph's batch bucket,
// with the partition bound raised to tailBound's where the bucket's rows fall in tailRows' range and the
// smallest batch the graph replays, minBatch, still fills a wave of the grouped kernel's slots: then
// every batch it serves is at or past one wave, and a split costs the smallest little where it takes the
// tail off the rest. A bucket whose batches reach down well below a wave (the model's power-of-two
// buckets replay down to half of theirs) keeps GraphPlan's plan.
func gpuGraphPlan(in PlanInput, g gpuSize, minBatch int) DecodePlan {
	if fillsWave(float64(minBatch*in.NumKVHeads), float64(g.groupedSlots())) {
		in = withTailBound(in, g)
	}
	return GraphPlan(in)
}

// GraphPlan is the plan of a call captured into a CUDA graph and replayed at every context up to the one
// it is planned at: in.ContextLens hold that cap (the model's graph steps run at contexts from half the
// cap to the cap). It is Plan's choice in whole 64-token tiles (tileAligned, as CUDAKernels.Plan), with
// two changes for split-k that look at the whole range:
//   - partitions are lengthened to at most maxOneLevelPartitions per context where that still gives a
//     full wave of the SMs a program at the cap: the cap's plan fills the GPU only at the cap, and a
//     replay at half of it still has more than 16 partitions to merge in two levels where 16 longer ones
//     merge in one;
//   - partitions are then shortened to a power of two tiles and halved (not below that one-level
//     length) while the programs that work at three quarters of the cap (the middle of the contexts the
//     graph runs at) still fit in one wave of the GPU's program slots (SMs × in.ProgramsPerSM, the
//     split-k kernel's occupancy): Plan's floor of minSplitTokens counts programs at the cap it sees,
//     but the graph also runs at half of it, where the partitions past a context return at once.
func GraphPlan(in PlanInput) DecodePlan {
	plan := tileAligned(Plan(in), in.ContextLens)
	if plan.Kernel != SplitK {
		return plan
	}
	longest := longestContext(in.ContextLens)
	rows := len(in.ContextLens) * in.NumKVHeads
	sms := max(1, in.NumSMs)
	oneLevel := roundUp(ceilDiv(longest, maxOneLevelPartitions), cudaTileTokens)
	if plan.NumPartitions > maxOneLevelPartitions && fillsWave(float64(rows*maxOneLevelPartitions), float64(sms)) {
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

// largeStream reports whether a call reading K and V of contextLens tokens (kvHeads heads of headDim
// elements of elemBytes bytes each) should carry evict_normal: it streams at least largeStreamL2s times
// l2Bytes on a device whose peak memory bandwidth peakBW is under largeStreamMaxBandwidth (0, unknown,
// counts as under). Below that size evict_first keeps what other kernels left in L2 (the weights the
// model's next products read, the dirty lines of a benchmark's L2 flush); on longer streams its gain is
// gone on the H100 and a flush costs it, while on the faster H200 memory evict_normal was the slower
// there (why is a guess: a faster memory fills L2 faster than its evict_normal replacement keeps up
// with). A captured step (the model's CUDA graphs) passes its context cap for every row, so there the
// rule sees up to twice the stream read.
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
