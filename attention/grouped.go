package attention

import "fmt"

// DecodeGrouped writes decode attention (one query row per sequence) with the grouped algorithm: one unit
// of work per (sequence, KV head) walks the sequence's pages in order, loads each K and V row once and
// serves all G = numHeads/NumKVHeads query heads of the group, keeping (m, l, acc) per head in float32
// (online softmax). q and out are [len(contextLens)][numHeads][HeadDim]; row s attends to positions
// [0, contextLens[s]) through blockTables[s]. It panics on inconsistent shapes.
//
// On the GPU this is a grid of (sequence, KV head) programs, each holding its G×HeadDim queries and
// accumulators in registers and one page of K/V in shared memory: it reads the cache exactly once.
func DecodeGrouped(out, q []float32, numHeads int, scale float32, c *Cache, blockTables [][]int32, contextLens []int32) {
	st := newDecodeStep(out, q, numHeads, scale, c, blockTables, contextLens, "DecodeGrouped")
	st.run(DecodePlan{Kernel: Grouped, NumPartitions: 1}, defaultWorkers())
}

// newDecodeStep validates a decode-only call and makes sequence s's query row s.
func newDecodeStep(out, q []float32, numHeads int, scale float32, c *Cache, blockTables [][]int32, contextLens []int32, who string) *step {
	if len(blockTables) != len(contextLens) {
		panic(fmt.Sprintf("attention: %s: %d block tables for %d context lengths", who, len(blockTables), len(contextLens)))
	}
	st := newStep(out, q, numHeads, scale, c, len(contextLens), who)
	rows := make([]int32, len(contextLens))
	for s := range rows {
		rows[s] = int32(s)
		st.checkTable(who, s, blockTables[s], 0, int(contextLens[s]))
	}
	st.dec = decodeSeqs{rows: rows, tables: blockTables, ctx: contextLens}
	return st
}

// groupedUnit is the program (sequence s, KV head h) of the grouped kernel.
func (st *step) groupedUnit(w *walker, s, h int) {
	d, g := st.c.HeadDim, st.group
	row := int(st.dec.rows[s])
	at := (row*st.numHeads + h*g) * d // the G query heads of KV head h are consecutive
	w.loadQ(0, st.q[at:], g, st.scale)
	ctx := int(st.dec.ctx[s])
	w.walk(st.c, h, st.dec.tables[s], g, st.firstKey(ctx-1), ctx, false)
	w.store(st.out[at:], 0, g)
}
