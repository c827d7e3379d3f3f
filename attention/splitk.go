package attention

import "fmt"

// DecodeSplitK writes decode attention (one query row per sequence) with the split-k algorithm: each
// context is cut into partitions of partitionTokens tokens (a positive multiple of BlockSize); one unit
// per (sequence, KV head, partition) walks its partition's pages like DecodeGrouped and leaves the
// partial state (m, l, acc) of all G heads of the group; a reduce per (sequence, KV head) merges the
// partitions by log-sum-exp:
//
//	M = max_p m_p,  L = Σ_p l_p·e^(m_p−M),  out = Σ_p acc_p·e^(m_p−M) / L.
//
// Shapes are those of DecodeGrouped. It panics on inconsistent shapes or a bad partition size.
//
// On the GPU this is a grid of (sequence, KV head, partition) programs writing (m, l, acc) to a
// workspace, then a reduce grid of (sequence, KV head): a batch of one long sequence then occupies every
// SM instead of NumKVHeads of them.
func DecodeSplitK(out, q []float32, numHeads int, scale float32, c *Cache, blockTables [][]int32, contextLens []int32, partitionTokens int) {
	if partitionTokens <= 0 || partitionTokens%c.BlockSize != 0 {
		panic(fmt.Sprintf("attention: DecodeSplitK: partition of %d tokens is not a positive multiple of the page size %d",
			partitionTokens, c.BlockSize))
	}
	st := newDecodeStep(out, q, numHeads, scale, c, blockTables, contextLens, "DecodeSplitK")
	maxCtx := longestContext(contextLens)
	st.run(DecodePlan{Kernel: SplitK, PartitionTokens: partitionTokens, NumPartitions: max(1, ceilDiv(maxCtx, partitionTokens))},
		defaultWorkers())
}

// allocPartials makes the split-k workspace: (m, l) [seq][KV head][partition][G] and acc
// [seq][KV head][partition][G][HeadDim].
func (st *step) allocPartials() {
	n := len(st.dec.ctx) * st.c.NumKVHeads * st.plan.NumPartitions * st.group
	st.partM = make([]float32, n)
	st.partL = make([]float32, n)
	st.partAcc = make([]float32, n*st.c.HeadDim)
}

// partialIndex is the index of head 0 of the group in (m, l) for sequence s, KV head h, partition p.
func (st *step) partialIndex(s, h, p int) int {
	return ((s*st.c.NumKVHeads+h)*st.plan.NumPartitions + p) * st.group
}

// partitionUnit is the program (sequence s, KV head h, partition p) of the split-k kernel.
func (st *step) partitionUnit(w *walker, s, h, p int) {
	d, g := st.c.HeadDim, st.group
	row := int(st.dec.rows[s])
	w.loadQ(0, st.q[(row*st.numHeads+h*g)*d:], g, st.scale)
	ctx := int(st.dec.ctx[s])
	base, _ := st.decodeSpan(ctx)
	start := base + p*st.plan.PartitionTokens
	end := min(start+st.plan.PartitionTokens, ctx)
	w.walk(st.c, h, st.dec.tables[s], g, max(start, st.firstKey(ctx-1)), end, false)
	i := st.partialIndex(s, h, p)
	copy(st.partM[i:i+g], w.m[:g])
	copy(st.partL[i:i+g], w.l[:g])
	copy(st.partAcc[i*d:(i+g)*d], w.acc[:g*d])
}

// reduceUnit is the program (sequence s, KV head h) of the split-k reduce.
func (st *step) reduceUnit(s, h int) {
	d, g := st.c.HeadDim, st.group
	_, span := st.decodeSpan(int(st.dec.ctx[s]))
	parts := ceilDiv(span, st.plan.PartitionTokens)
	row := int(st.dec.rows[s])
	first := st.partialIndex(s, h, 0)
	for head := range g {
		o := st.out[(row*st.numHeads+h*g+head)*d:][:d]
		mergePartials(o, st.partM, st.partL, st.partAcc, mergeSegment{first + head, g, parts})
	}
}
