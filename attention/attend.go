package attention

import (
	"fmt"

	"github.com/gollm/gollm/internal/fanout"
)

// Batch is one step's attention metadata, in vLLM's varlen layout: the query rows of all sequences lie
// in one flat list, prefill chunks and decode tokens mixed.
type Batch struct {
	// QueryStart has len S+1; the query rows of sequence s are [QueryStart[s], QueryStart[s+1]).
	QueryStart []int32
	// ContextLens has len S; ContextLens[s] is sequence s's context length including this step's tokens.
	ContextLens []int32
	// BlockTables has len S; BlockTables[s] lists sequence s's physical block ids in logical order.
	// With a Window, the entries of pages that no query of the step reads may be anything (a KV pool
	// that has given those pages back marks them −1).
	BlockTables [][]int32
	// Window, when positive, is a sliding window: the query at position p attends to positions
	// [p−Window+1, p] only (the last Window positions, its own included). 0 attends to [0, p].
	Window int
	// Shared, when not empty, lists groups of decode sequences whose tables begin with the same pages
	// (FindSharedGroups): the step's decodes then run the shared-prefix algorithm (DecodeShared), the
	// GPU's twin. The CPU gains no time by it (its decode is bound by the products, which the shared
	// path computes all the same: BenchmarkDecodeShared), so callers pass groups to compare the paths.
	// Ignored with a Window.
	Shared []SharedGroup
}

// Attend writes causal attention for every query row: q and out are [T][numHeads][HeadDim]
// (T = QueryStart[S]); scale is usually 1/sqrt(HeadDim). Query j of a sequence with qlen rows sits at
// position ContextLens[s]-qlen+j and attends to positions [0, position] (with b.Window, to the last
// Window of them), read through BlockTables[s]: a prefill chunk thus attends to its cached prefix, whose
// K/V must already be in c (as must this step's, written with Cache.Write). Only the pages holding
// positions some query attends to are read. Decode rows (qlen == 1) go through Plan's choice of
// DecodeGrouped or DecodeSplitK, planned on the tokens each reads; longer chunks through the prefill
// path. Work is spread over runtime.GOMAXPROCS(0) goroutines. It panics on inconsistent shapes
// (programmer errors).
func Attend(out, q []float32, numHeads int, scale float32, c *Cache, b *Batch) {
	attend(out, q, numHeads, scale, c, b, defaultWorkers(), nil)
}

// attend is Attend on a given number of workers, following force instead of Plan's choice when it is not
// nil (a split-k plan must have room for the step's longest span); it returns the decode plan it followed.
func attend(out, q []float32, numHeads int, scale float32, c *Cache, b *Batch, workers int, force *DecodePlan) DecodePlan {
	numSeqs := len(b.ContextLens)
	if len(b.QueryStart) != numSeqs+1 || len(b.BlockTables) != numSeqs {
		panic(fmt.Sprintf("attention: Attend: %d context lengths, %d query starts, %d block tables",
			numSeqs, len(b.QueryStart), len(b.BlockTables)))
	}
	numRows := int(b.QueryStart[numSeqs])
	st := newStep(out, q, numHeads, scale, c, numRows, "Attend")
	if b.Window < 0 {
		panic(fmt.Sprintf("attention: Attend: window %d", b.Window))
	}
	st.window = b.Window
	decodeIndex := make([]int32, numSeqs) // batch sequence → decode index, −1 for a prefill
	for s := range numSeqs {
		decodeIndex[s] = -1
		row, qlen, ctx := int(b.QueryStart[s]), int(b.QueryStart[s+1]-b.QueryStart[s]), int(b.ContextLens[s])
		if qlen < 0 || row < 0 || qlen > ctx {
			panic(fmt.Sprintf("attention: Attend: sequence %d has %d query rows from row %d and context %d",
				s, qlen, row, ctx))
		}
		if qlen > 0 {
			st.checkTable("Attend", s, b.BlockTables[s], st.firstKey(ctx-qlen), ctx)
		}
		switch {
		case qlen == 1:
			decodeIndex[s] = int32(len(st.dec.rows))
			st.dec.rows = append(st.dec.rows, int32(row))
			st.dec.tables = append(st.dec.tables, b.BlockTables[s])
			st.dec.ctx = append(st.dec.ctx, int32(ctx))
		case qlen > 1:
			st.pre = append(st.pre, prefillSeq{row: row, qlen: qlen, ctx: ctx, table: b.BlockTables[s]})
		}
	}
	if force == nil && len(b.Shared) > 0 && b.Window == 0 {
		if st.attendShared(b.Shared, decodeIndex, workers) {
			return DecodePlan{Kernel: Grouped, NumPartitions: 1}
		}
	}
	plan := Plan(st.planInput(workers))
	if force != nil {
		plan = *force
	}
	st.run(plan, workers)
	return plan
}

// attendShared runs the step's decodes with the shared-prefix algorithm, and then its prefill chunks,
// for groups (of batch sequences, mapped to decode indices by decodeIndex); it
// reports whether it ran the step.
func (st *step) attendShared(groups []SharedGroup, decodeIndex []int32, workers int) bool {
	dec := make([]SharedGroup, len(groups))
	for i, g := range groups {
		seqs := make([]int32, len(g.Seqs))
		for j, s := range g.Seqs {
			if s < 0 || int(s) >= len(decodeIndex) || decodeIndex[s] < 0 {
				panic(fmt.Sprintf("attention: Attend: shared group %d names sequence %d, not a decode sequence", i, s))
			}
			seqs[j] = decodeIndex[s]
		}
		dec[i] = SharedGroup{Seqs: seqs, Pages: g.Pages}
	}
	bs := st.c.BlockSize
	members := fitMembers(dec, SharedMembers(st.group))
	l := NewSharedLayout(st.dec.ctx, dec, bs, members)
	if l.Virtual() == 0 {
		return false
	}
	plan := cpuSharedPlan(l, bs)
	pre := st.pre
	st.pre = nil
	st.runShared(l, plan, workers)
	if len(pre) > 0 {
		st.pre, st.dec = pre, decodeSeqs{}
		st.run(DecodePlan{Kernel: Grouped, NumPartitions: 1}, workers)
	}
	return true
}

// step is one call's work: the decode sequences (one query row each), the prefill chunks, and the
// split-k partial state when the plan splits.
type step struct {
	out, q    []float32
	numHeads  int
	group     int // G = numHeads / NumKVHeads
	scale     float32
	c         *Cache
	window    int // Batch.Window: 0, or the positions each query attends to
	dec       decodeSeqs
	pre       []prefillSeq
	queryTile int // prefill query rows per unit

	plan                  DecodePlan
	partM, partL, partAcc []float32   // split-k: [len(dec)][NumKVHeads][NumPartitions][G] (and [HeadDim])
	shared                *sharedStep // the shared-prefix algorithm's state (runShared)
}

// decodeSeqs are the sequences with one query row.
type decodeSeqs struct {
	rows   []int32   // query row of each sequence
	tables [][]int32 // block table of each sequence
	ctx    []int32   // context length of each sequence
}

// prefillSeq is a sequence with several query rows (a prefill chunk).
type prefillSeq struct {
	row, qlen, ctx int // first query row, number of rows, context length after this step
	table          []int32
}

// prefillTileVectors bounds the query vectors (rows × G) of one prefill unit, so that its tile of
// queries and accumulators stays in a core's L1/L2 cache.
const prefillTileVectors = 64

func newStep(out, q []float32, numHeads int, scale float32, c *Cache, numRows int, who string) *step {
	if c.NumKVHeads <= 0 || numHeads <= 0 || numHeads%c.NumKVHeads != 0 {
		panic(fmt.Sprintf("attention: %s: %d query heads is not a multiple of %d KV heads", who, numHeads, c.NumKVHeads))
	}
	n := c.NumBlocks * c.BlockSize * c.NumKVHeads * c.HeadDim
	if c.FP8() {
		if len(c.K8) != n || len(c.V8) != n || c.K != nil || c.V != nil {
			panic(fmt.Sprintf("attention: %s: FP8 cache K %d and V %d values (and float32 %d, %d), want %d", who, len(c.K8), len(c.V8), len(c.K), len(c.V), n))
		}
		if !(c.KScale > 0 && c.VScale > 0) {
			panic(fmt.Sprintf("attention: %s: FP8 cache scales %v, %v", who, c.KScale, c.VScale))
		}
	} else if len(c.K) != n || len(c.V) != n {
		panic(fmt.Sprintf("attention: %s: cache K %d and V %d values, want %d", who, len(c.K), len(c.V), n))
	}
	if n := numRows * numHeads * c.HeadDim; len(q) < n || len(out) < n {
		panic(fmt.Sprintf("attention: %s: %d rows need %d values, have q %d, out %d", who, numRows, n, len(q), len(out)))
	}
	g := numHeads / c.NumKVHeads
	return &step{
		out: out, q: q, numHeads: numHeads, group: g, scale: scale, c: c,
		queryTile: max(1, prefillTileVectors/g),
	}
}

// checkTable panics unless table covers ctx tokens with valid block ids from the page of position
// first on (the pages a step whose first query sits at first may read).
func (st *step) checkTable(who string, s int, table []int32, first, ctx int) {
	if ctx < 1 {
		panic(fmt.Sprintf("attention: %s: sequence %d has context length %d", who, s, ctx))
	}
	need := ceilDiv(ctx, st.c.BlockSize)
	if len(table) < need {
		panic(fmt.Sprintf("attention: %s: sequence %d: %d blocks for %d tokens, need %d", who, s, len(table), ctx, need))
	}
	for i := first / st.c.BlockSize; i < need; i++ {
		if blk := table[i]; blk < 0 || int(blk) >= st.c.NumBlocks {
			panic(fmt.Sprintf("attention: %s: sequence %d: block %d is %d, out of [0, %d)", who, s, i, blk, st.c.NumBlocks))
		}
	}
}

// firstKey is the first position the query at position pos attends to: 0, or pos−Window+1 with a
// window.
func (st *step) firstKey(pos int) int {
	if st.window == 0 {
		return 0
	}
	return max(0, pos-st.window+1)
}

// decodeSpan returns where the pages a decode of context ctx reads begin (the first key's page start)
// and how many positions they span to the end of the context: the decode kernels' partitions are laid
// on whole pages from start, and Plan is given span as the sequence's length.
func (st *step) decodeSpan(ctx int) (start, span int) {
	bs := st.c.BlockSize
	start = st.firstKey(ctx-1) / bs * bs
	return start, ctx - start
}

// planInput is what Plan needs of the step's decodes: their spans (decodeSpan), the tokens they read.
func (st *step) planInput(workers int) PlanInput {
	spans := st.dec.ctx
	if st.window > 0 {
		spans = make([]int32, len(st.dec.ctx))
		for i, ctx := range st.dec.ctx {
			_, span := st.decodeSpan(int(ctx))
			spans[i] = int32(span)
		}
	}
	return PlanInput{
		Batch:       len(spans),
		ContextLens: spans,
		NumHeads:    st.numHeads,
		NumKVHeads:  st.c.NumKVHeads,
		HeadDim:     st.c.HeadDim,
		BlockSize:   st.c.BlockSize,
		DTypeSize:   st.c.ElementSize(),
		NumSMs:      workers,
	}
}

// unitKind says which kernel a unit of work belongs to.
type unitKind uint8

const (
	unitGrouped   unitKind = iota // decode sequence seq, KV head head
	unitPartition                 // decode sequence seq, KV head head, partition index
	unitPrefill                   // prefill sequence seq, KV head head, query tile index
	unitPrefix                    // shared prefix: virtual sequence seq, KV head head, partition index
	unitSuffix                    // shared prefix: decode sequence seq's suffix, KV head head, partition index
)

// unit is one program of the GPU grid: what one worker does without synchronising with others.
type unit struct {
	kind             unitKind
	seq, head, index int32
}

// run executes the step: all prefill units and the decode units of plan in one parallel phase, then the
// split-k reduce in a second one.
func (st *step) run(plan DecodePlan, workers int) {
	st.plan = plan
	hkv := st.c.NumKVHeads
	var units []unit
	for s, p := range st.pre {
		// Later tiles see more keys: hand them out first so that the short ones fill the gaps at the end.
		for tile := ceilDiv(p.qlen, st.queryTile) - 1; tile >= 0; tile-- {
			for h := range hkv {
				units = append(units, unit{unitPrefill, int32(s), int32(h), int32(tile)})
			}
		}
	}
	maxVectors := st.group
	if len(st.pre) > 0 {
		maxVectors = st.queryTile * st.group
	}
	switch plan.Kernel {
	case Grouped:
		for s := range st.dec.ctx {
			for h := range hkv {
				units = append(units, unit{unitGrouped, int32(s), int32(h), 0})
			}
		}
	case SplitK:
		st.allocPartials()
		for s, ctx := range st.dec.ctx {
			_, span := st.decodeSpan(int(ctx))
			for h := range hkv {
				for p := range ceilDiv(span, plan.PartitionTokens) {
					units = append(units, unit{unitPartition, int32(s), int32(h), int32(p)})
				}
			}
		}
	default:
		panic(fmt.Sprintf("attention: unknown kernel %v", plan.Kernel))
	}
	d, bs := st.c.HeadDim, st.c.BlockSize
	fanout.For(workers, len(units), func() *walker { return newWalker(maxVectors, d, bs) },
		func(w *walker, i int) {
			u := units[i]
			switch u.kind {
			case unitGrouped:
				st.groupedUnit(w, int(u.seq), int(u.head))
			case unitPartition:
				st.partitionUnit(w, int(u.seq), int(u.head), int(u.index))
			case unitPrefill:
				st.prefillUnit(w, int(u.seq), int(u.head), int(u.index))
			}
		})
	if plan.Kernel == SplitK {
		fanout.For(workers, len(st.dec.ctx)*hkv, func() struct{} { return struct{}{} },
			func(_ struct{}, i int) { st.reduceUnit(i/hkv, i%hkv) })
	}
}
