package attention

// prefillVectors is PREFILL_VECTORS of prefill.cu: (row, head) query vectors per program of its kernels.
const prefillVectors = 64

// PrefillSM90Vectors is the query vectors of a work item of the Hopper kernel (prefill_sm90.cu): 64 for
// each of its two consumer warpgroups.
const PrefillSM90Vectors = 128

// PrefillHeadsPerItem is the number of a group's query heads one prefill work item covers: the whole
// group when it has at most 64 heads (each K/V row is then read once per item for all of them).
func PrefillHeadsPerItem(group int) int { return min(group, prefillVectors) }

// PrefillItems appends to dst the work items of a step whose sequence s owns query rows
// [queryStart[s], queryStart[s+1]), for a group of group query heads per KV head, and returns the
// extended slice: four int32 per item (sequence, first row, rows, first head of the group), each item
// holding at most vectors (row, head) vectors of consecutive rows of one sequence: the Vectors of the
// kernel that runs them (64, or PrefillSM90Vectors).
func PrefillItems(dst []int32, queryStart []int32, group, vectors int) []int32 {
	hpi := PrefillHeadsPerItem(group)
	rowsPer := int32(vectors / hpi)
	for s := 0; s+1 < len(queryStart); s++ {
		for r0 := queryStart[s]; r0 < queryStart[s+1]; r0 += rowsPer {
			rows := min(rowsPer, queryStart[s+1]-r0)
			for g0 := 0; g0 < group; g0 += hpi {
				dst = append(dst, int32(s), r0, rows, int32(g0))
			}
		}
	}
	return dst
}

// PrefillItemsBefore is how many of items (PrefillItems' layout, sequences in order) belong to the
// sequences before seq: the offset, in items, of seq's first one.
func PrefillItemsBefore(items []int32, seq int32) int {
	n := 0
	for 4*n < len(items) && items[4*n] < seq {
		n++
	}
	return n
}

// prefillUnit is the program (prefill sequence s, KV head h, query tile) of the prefill path: it takes up
// to queryTile consecutive query rows of the chunk and all G heads of the group as one tile of vectors,
// walks the pages from the tile's first key (position 0, or the first row's window start) to the last
// row's position, and masks each row causally (row j of a chunk of qlen rows sits at position
// ctx-qlen+j and sees keys [0, position], or its last Window of them). Each K/V row is loaded once per
// tile and used by every row and head of it, like FlashAttention's varlen kernel with paged K/V; pages
// before the tile's window are never read.
func (st *step) prefillUnit(w *walker, s, h, tile int) {
	p := st.pre[s]
	d, g := st.c.HeadDim, st.group
	first := tile * st.queryTile
	rows := min(st.queryTile, p.qlen-first)
	firstPos := p.ctx - p.qlen + first
	for i := range rows {
		row := p.row + first + i
		w.loadQ(i*g, st.q[(row*st.numHeads+h*g)*d:], g, st.scale)
		for head := range g {
			w.lower[i*g+head] = st.firstKey(firstPos + i)
			w.limit[i*g+head] = firstPos + i + 1
		}
	}
	w.walk(st.c, h, p.table, rows*g, st.firstKey(firstPos), firstPos+rows, true)
	for i := range rows {
		row := p.row + first + i
		w.store(st.out[(row*st.numHeads+h*g)*d:], i*g, g)
	}
}

// sm90Pages reports whether the Hopper kernels (prefill_sm90.cu: prefill and the shared-prefix pass) copy
// pages of blockSize tokens: a page is one box of the cache's tensor map, whole within a tile of keys
// (64 at head size 256, else 128) and starting on a 1024-byte boundary of the 128-byte swizzle, so a
// power of two from 8; and at most 64, the page sizes their tests run (the decode kernels' too). Calls
// with other page sizes run the mma.sync kernels.
func sm90Pages(blockSize int) bool {
	return blockSize >= 8 && blockSize <= 64 && blockSize&(blockSize-1) == 0
}
