package attention

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/gollm/gollm/internal/fanout"
)

// Shared-prefix decode attention (cascade attention): decode sequences whose block tables begin with the
// same physical pages (n > 1 samples of one prompt, requests behind one system prompt) read those pages
// once for the whole group instead of once per sequence.
//
// The algorithm, on the CPU here and on the GPU (shared_cuda.go, shared.cu) alike, has three parts:
//
//  1. the prefix pass: a group's members are packed, up to Members at a time, into virtual sequences
//     whose query heads of KV head h are the members' G heads of h, one after another (Members·G rows);
//     one unit per (virtual sequence, KV head, partition of the shared pages) walks the pages once for
//     all those rows and leaves the split-k partial state (m, l, acc) of each row;
//  2. the suffix pass: one unit per (sequence, KV head, partition of the rest of its context) walks the
//     sequence's own pages from the end of its shared prefix (the whole context for a sequence in no
//     group), leaving partials in the same way;
//  3. the merge: per (sequence, query head), the split-k log-sum-exp merge of its prefix and suffix
//     partials (mergePartials, the reduce's own code).
//
// The shared prefix is whole pages that end before the sequence's newest token, so every suffix has at
// least that token and the pages the step writes are never shared.

// SharedGroup is a set of decode sequences of one step whose block tables begin with the same Pages
// physical pages.
type SharedGroup struct {
	// Seqs are the members' indices into the step's sequences (Batch.ContextLens), each a decode
	// sequence (one query row) in at most one group.
	Seqs []int32
	// Pages is the number of leading pages every member's table holds in common; Pages·BlockSize is
	// less than every member's context.
	Pages int
}

// FindSharedGroups returns the groups of b's decode sequences (one query row) whose block tables begin
// with the same physical pages, each with the longest common run of full pages that ends before its
// members' newest tokens; every sequence is in at most one group, and groups have two members or
// more. Sequences are bucketed by their first block id, and a bucket is extended page by page while its
// members agree, split where they part: the cost is the pages its members share, never a comparison of
// every pair of sequences. It returns nil for a batch with a sliding window (its queries read no common
// prefix) or without two sequences sharing a page. It is safe for concurrent use; a caller that groups
// every step keeps a SharedGrouper instead, which reuses its scratch from one step to the next.
func FindSharedGroups(b *Batch, blockSize int) []SharedGroup {
	var g SharedGrouper
	return g.Find(b, blockSize)
}

// SharedGrouper is FindSharedGroups with scratch that outlives a call (the sequences' limits, and each
// depth of the splits' buckets), cleared and reused, so that a step allocates only the groups it
// returns: nothing where no two sequences share a page. The zero value is ready. It is not safe for
// concurrent use: each caller that groups steps owns one.
type SharedGrouper struct {
	limits []int          // [sequence]: the pages it may share (0 for a prefill sequence)
	decode []int32        // the decode sequences
	splits []*sharedSplit // [depth]: the scratch of the splits that depth deep; 0 the batch's by first page
}

// sharedSplit lays a set of sequences out by their page k: bucket by bucket in order of first
// appearance, in the set's order within a bucket.
type sharedSplit struct {
	bucket map[int32]int32 // page → bucket
	of     []int32         // [member]: its bucket, or −1 without a page k
	starts []int32         // [bucket+1]: where each bucket begins in member, and the end
	fill   []int32         // [bucket]: where its next member goes
	member []int32
	rest   []int32 // extend's members left over
}

// Find is FindSharedGroups(b, blockSize). The groups it returns hold none of g's scratch: they stay
// valid after the next call.
func (g *SharedGrouper) Find(b *Batch, blockSize int) []SharedGroup {
	if b.Window > 0 || blockSize <= 0 {
		return nil
	}
	g.limits = resized(g.limits, len(b.ContextLens))
	g.decode = g.decode[:0]
	for s, n := range b.ContextLens {
		g.limits[s] = 0
		if b.QueryStart[s+1]-b.QueryStart[s] == 1 {
			g.limits[s] = min(int(n-1)/blockSize, len(b.BlockTables[s]))
			g.decode = append(g.decode, int32(s))
		}
	}
	var groups []SharedGroup
	top := g.split(0)
	for i := range top.split(b.BlockTables, g.limits, g.decode, 0) {
		if members := top.members(i); len(members) > 1 {
			g.extend(&groups, b.BlockTables, members, 1, 1)
		}
	}
	return groups
}

// split returns the scratch of the splits depth deep.
func (g *SharedGrouper) split(depth int) *sharedSplit {
	for len(g.splits) <= depth {
		g.splits = append(g.splits, &sharedSplit{})
	}
	return g.splits[depth]
}

// extend adds to groups the groups of members, which share their first k pages and are depth splits
// deep: it extends the run while every member has the same next page; where they part, each set of two
// or more members that agree on the next page goes on alone, and the members left over (alone on their
// page, at the end of what they may share, or left over by such a set) make a group of the pages shared
// so far when there are two or more of them. It returns the one member left over, or −1, to its
// caller's leftovers.
func (g *SharedGrouper) extend(groups *[]SharedGroup, tables [][]int32, members []int32, k, depth int) int32 {
	for {
		common := true
		for _, s := range members {
			if k >= g.limits[s] || tables[s][k] != tables[members[0]][k] || tables[s][k] < 0 {
				common = false
				break
			}
		}
		if !common {
			break
		}
		k++
	}
	sp := g.split(depth)
	buckets := sp.split(tables, g.limits, members, k)
	rest := sp.rest[:0]
	for j, s := range members {
		if sp.of[j] < 0 {
			rest = append(rest, s)
		}
	}
	for i := range buckets {
		if sub := sp.members(i); len(sub) > 1 {
			if s := g.extend(groups, tables, sub, k+1, depth+1); s >= 0 {
				rest = append(rest, s)
			}
		} else {
			rest = append(rest, sub[0])
		}
	}
	sp.rest = rest
	switch len(rest) {
	case 0:
		return -1
	case 1:
		return rest[0]
	}
	seqs := slices.Clone(rest)
	slices.Sort(seqs)
	*groups = append(*groups, SharedGroup{Seqs: seqs, Pages: k})
	return -1
}

// split lays members out by their page k (tables[s][k]); a member without one (k at its limit, or a
// page given back: −1) is in no bucket. It returns the number of buckets.
func (sp *sharedSplit) split(tables [][]int32, limits []int, members []int32, k int) int {
	if sp.bucket == nil {
		sp.bucket = map[int32]int32{}
	}
	clear(sp.bucket)
	sp.of = resized(sp.of, len(members))
	sp.starts = append(sp.starts[:0], 0)
	for j, s := range members {
		sp.of[j] = -1
		if k >= limits[s] || tables[s][k] < 0 {
			continue
		}
		i, ok := sp.bucket[tables[s][k]]
		if !ok {
			i = int32(len(sp.starts) - 1)
			sp.bucket[tables[s][k]] = i
			sp.starts = append(sp.starts, 0)
		}
		sp.of[j] = i
		sp.starts[i+1]++ // counts first, then their running sums
	}
	buckets := len(sp.starts) - 1
	for i := range buckets {
		sp.starts[i+1] += sp.starts[i]
	}
	sp.member = resized(sp.member, int(sp.starts[buckets]))
	sp.fill = append(sp.fill[:0], sp.starts[:buckets]...)
	for j, i := range sp.of {
		if i >= 0 {
			sp.member[sp.fill[i]] = members[j]
			sp.fill[i]++
		}
	}
	return buckets
}

// members returns bucket i's members.
func (sp *sharedSplit) members(i int) []int32 { return sp.member[sp.starts[i]:sp.starts[i+1]] }

// resized returns s with length n, reusing its array when it is large enough (the contents are the
// caller's to set).
func resized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// SharedLayout is the work of one shared-prefix decode step as plain arrays: what the prefix pass's
// virtual sequences hold and where each sequence's suffix starts. The GPU reads it from device buffers;
// the CPU twin from here.
type SharedLayout struct {
	// Batch is the number of decode sequences; Members the member slots of a virtual sequence, so that
	// a virtual sequence of the prefix pass has Members·G query heads per KV head.
	Batch, Members int
	// VirtualSeqs is [virtual sequences][Members]: the decode index of each member slot; a slot past
	// the virtual sequence's members repeats its first member (its rows are computed, never read).
	VirtualSeqs []int32
	// VirtualLens is [virtual sequences]: the shared tokens (pages · BlockSize) the prefix pass walks.
	VirtualLens []int32
	// SeqSlot is [Batch]: v·Members + slot of a sequence's member slot, or −1 for a sequence in no group.
	SeqSlot []int32
	// SuffixStart is [Batch]: the shared tokens of the sequence's group (0 in none), where its suffix
	// pass starts; SuffixLens the tokens from there to the end of its context.
	SuffixStart, SuffixLens []int32
}

// Virtual is the number of virtual sequences of the prefix pass.
func (l *SharedLayout) Virtual() int { return len(l.VirtualLens) }

// NewSharedLayout lays out the groups of a decode batch (sequence s of contextLens is decode index s;
// a group's Seqs are such indices): members at most members per virtual sequence. It panics on a group
// that does not fit its members' contexts or names a sequence twice (programmer errors).
func NewSharedLayout(contextLens []int32, groups []SharedGroup, blockSize, members int) *SharedLayout {
	if members < 1 || blockSize < 1 {
		panic(fmt.Sprintf("attention: NewSharedLayout: %d members, block size %d", members, blockSize))
	}
	b := len(contextLens)
	l := &SharedLayout{Batch: b, Members: members, SeqSlot: make([]int32, b), SuffixStart: make([]int32, b),
		SuffixLens: append([]int32(nil), contextLens...)}
	for s := range l.SeqSlot {
		l.SeqSlot[s] = -1
	}
	for gi, g := range groups {
		shared := g.Pages * blockSize
		if g.Pages < 1 || len(g.Seqs) == 0 {
			panic(fmt.Sprintf("attention: NewSharedLayout: group %d has %d sequences, %d pages", gi, len(g.Seqs), g.Pages))
		}
		for i := 0; i < len(g.Seqs); i += members {
			chunk := g.Seqs[i:min(len(g.Seqs), i+members)]
			v := l.Virtual()
			for slot := range members {
				s := chunk[0]
				if slot < len(chunk) {
					s = chunk[slot]
					if s < 0 || int(s) >= b || l.SeqSlot[s] >= 0 {
						panic(fmt.Sprintf("attention: NewSharedLayout: group %d: sequence %d out of range or in two groups", gi, s))
					}
					if int(contextLens[s]) <= shared {
						panic(fmt.Sprintf("attention: NewSharedLayout: group %d: sequence %d has context %d, shares %d tokens",
							gi, s, contextLens[s], shared))
					}
					l.SeqSlot[s] = int32(v*members + slot)
					l.SuffixStart[s] = int32(shared)
					l.SuffixLens[s] = contextLens[s] - int32(shared)
				}
				l.VirtualSeqs = append(l.VirtualSeqs, s)
			}
			l.VirtualLens = append(l.VirtualLens, int32(shared))
		}
	}
	return l
}

// Pad returns a copy of l laid out for batch sequences and virtual virtual sequences, at least l's:
// the arrays of a CUDA graph's bucket, whose sizes its launches take, with l's values first. A padding
// virtual sequence has no shared tokens (VirtualLens 0: the prefix pass does nothing for it) and its
// member slots name sequence 0; a padding sequence is in no group (SeqSlot −1) and has a suffix of one
// token from the start of its table (SuffixStart 0, SuffixLens 1: the padding rows' context of one
// token in page 0). It panics on a smaller batch or fewer virtual sequences (programmer errors).
func (l *SharedLayout) Pad(batch, virtual int) *SharedLayout {
	if batch < l.Batch || virtual < l.Virtual() {
		panic(fmt.Sprintf("attention: SharedLayout.Pad(%d, %d) of a layout of %d sequences and %d virtual sequences",
			batch, virtual, l.Batch, l.Virtual()))
	}
	pad := func(x []int32, n int, fill int32) []int32 {
		out := make([]int32, n)
		copy(out, x)
		for i := len(x); i < n; i++ {
			out[i] = fill
		}
		return out
	}
	return &SharedLayout{Batch: batch, Members: l.Members,
		VirtualSeqs: pad(l.VirtualSeqs, virtual*l.Members, 0),
		VirtualLens: pad(l.VirtualLens, virtual, 0),
		SeqSlot:     pad(l.SeqSlot, batch, -1),
		SuffixStart: pad(l.SuffixStart, batch, 0),
		SuffixLens:  pad(l.SuffixLens, batch, 1),
	}
}

// VirtualTables returns the prefix pass's block tables, [virtual sequences][maxBlocks]: each the first
// member's table (its shared pages, then whatever follows, never read); zeros for a virtual sequence
// without shared tokens (Pad's).
func (l *SharedLayout) VirtualTables(tables [][]int32, maxBlocks int) []int32 {
	out := make([]int32, l.Virtual()*maxBlocks)
	for v := range l.Virtual() {
		if l.VirtualLens[v] > 0 {
			copy(out[v*maxBlocks:(v+1)*maxBlocks], tables[l.VirtualSeqs[v*l.Members]])
		}
	}
	return out
}

// SuffixTables returns the suffix pass's block tables, [Batch][maxBlocks]: sequence s's table from the
// page its suffix starts on (SuffixStart is a whole number of pages); zeros for a sequence past tables
// (Pad's padding, whose token lies in page 0).
func (l *SharedLayout) SuffixTables(tables [][]int32, blockSize, maxBlocks int) []int32 {
	out := make([]int32, l.Batch*maxBlocks)
	for s := range min(l.Batch, len(tables)) {
		copy(out[s*maxBlocks:(s+1)*maxBlocks], tables[s][int(l.SuffixStart[s])/blockSize:])
	}
	return out
}

// SharedPlan is the partitioning of a shared-prefix decode step: the prefix pass's partitions of
// PrefixPartitionTokens, the suffix pass's of SuffixPartitionTokens (both positive multiples of the
// page size).
type SharedPlan struct {
	PrefixPartitionTokens, SuffixPartitionTokens int
	// PrefixPartitions and SuffixPartitions, when positive, fix the passes' partition counts (their
	// grids' third dimension and the partials' layout) instead of following the layout's longest
	// shared prefix and suffix: a CUDA graph's plan (SharedGraphKey), whose launches must not depend
	// on the lengths. Fixed counts must cover those lengths; partitions past a length do nothing, and
	// the merge does not read them.
	PrefixPartitions, SuffixPartitions int
}

// partitions returns the prefix and suffix pass's partition counts (their grids' third dimension).
func (p SharedPlan) partitions(l *SharedLayout) (prefix, suffix int) {
	prefix, suffix = ceilDiv(longestContext(l.VirtualLens), p.PrefixPartitionTokens),
		max(1, ceilDiv(longestContext(l.SuffixLens), p.SuffixPartitionTokens))
	if p.PrefixPartitions > 0 {
		prefix = p.PrefixPartitions
	}
	if p.SuffixPartitions > 0 {
		suffix = p.SuffixPartitions
	}
	return prefix, suffix
}

// check reports a plan whose partitions are not positive multiples of the page size, or whose fixed
// partition counts do not cover layout l's longest shared prefix or suffix.
func (p SharedPlan) check(l *SharedLayout, blockSize int) error {
	if p.PrefixPartitionTokens <= 0 || p.PrefixPartitionTokens%blockSize != 0 ||
		p.SuffixPartitionTokens <= 0 || p.SuffixPartitionTokens%blockSize != 0 {
		return fmt.Errorf("attention: shared-prefix plan %+v: partitions must be positive multiples of the page size %d", p, blockSize)
	}
	if p.PrefixPartitions < 0 || p.SuffixPartitions < 0 ||
		p.PrefixPartitions > 0 && p.PrefixPartitions*p.PrefixPartitionTokens < longestContext(l.VirtualLens) ||
		p.SuffixPartitions > 0 && p.SuffixPartitions*p.SuffixPartitionTokens < longestContext(l.SuffixLens) {
		return fmt.Errorf("attention: shared-prefix plan %+v: fixed partitions short of the longest prefix %d or suffix %d",
			p, longestContext(l.VirtualLens), longestContext(l.SuffixLens))
	}
	return nil
}

// mergeSegment is a run of count partial slots, first, first+stride, …, of one query head.
type mergeSegment struct{ first, stride, count int }

// mergePartials writes to o (HeadDim values) the log-sum-exp merge of the partial states in segs:
//
//	M = max_p m_p,  L = Σ_p l_p·e^(m_p−M),  o = Σ_p acc_p·e^(m_p−M) / L.
//
// It is the split-k reduce, and the shared-prefix merge of a prefix's and a suffix's partials.
func mergePartials(o, partM, partL, partAcc []float32, segs ...mergeSegment) {
	d := len(o)
	globalMax := float32(math.Inf(-1))
	for _, sg := range segs {
		for p := range sg.count {
			globalMax = max(globalMax, partM[sg.first+p*sg.stride])
		}
	}
	var sum float32
	clear(o)
	for _, sg := range segs {
		for p := range sg.count {
			i := sg.first + p*sg.stride
			weight := expf(partM[i] - globalMax)
			sum += partL[i] * weight
			axpy(o, weight, partAcc[i*d:(i+1)*d])
		}
	}
	inv := 1 / sum
	for k := range o {
		o[k] *= inv
	}
}

// sharedStep is the shared-prefix part of a step: its layout, plan and partial state. Prefix partials
// are [virtual][KV head][prefix partitions][Members·G], suffix partials follow them,
// [decode sequence][KV head][suffix partitions][G] (the split-k layout of each pass's call).
type sharedStep struct {
	layout                 *SharedLayout
	plan                   SharedPlan
	prefixParts, suffParts int
	suffixBase             int // first suffix slot
	partM, partL, partAcc  []float32
}

// prefixSlot is the (m, l) index of head 0 of member slot m of virtual sequence v, KV head h, partition p.
func (sh *sharedStep) prefixSlot(st *step, v, h, p, m int) int {
	rows := sh.layout.Members * st.group
	return ((v*st.c.NumKVHeads+h)*sh.prefixParts+p)*rows + m*st.group
}

// suffixSlot is the (m, l) index of head 0 of decode sequence s, KV head h, suffix partition p.
func (sh *sharedStep) suffixSlot(st *step, s, h, p int) int {
	return sh.suffixBase + ((s*st.c.NumKVHeads+h)*sh.suffParts+p)*st.group
}

// prefixUnit is the program (virtual sequence v, KV head h, partition p) of the prefix pass: it loads
// the G query heads of h of every member slot (Members·G vectors) and walks the partition's pages once.
func (st *step) prefixUnit(w *walker, v, h, p int) {
	sh := st.shared
	l := sh.layout
	d, g := st.c.HeadDim, st.group
	start := p * sh.plan.PrefixPartitionTokens
	end := min(start+sh.plan.PrefixPartitionTokens, int(l.VirtualLens[v]))
	if start >= end {
		return // an empty partition: the merge does not read it
	}
	for m := range l.Members {
		row := int(st.dec.rows[l.VirtualSeqs[v*l.Members+m]])
		w.loadQ(m*g, st.q[(row*st.numHeads+h*g)*d:], g, st.scale)
	}
	n := l.Members * g
	w.walk(st.c, h, st.dec.tables[l.VirtualSeqs[v*l.Members]], n, start, end, false)
	i := sh.prefixSlot(st, v, h, p, 0)
	copy(sh.partM[i:i+n], w.m[:n])
	copy(sh.partL[i:i+n], w.l[:n])
	copy(sh.partAcc[i*d:(i+n)*d], w.acc[:n*d])
}

// suffixUnit is the program (decode sequence s, KV head h, partition p) of the suffix pass.
func (st *step) suffixUnit(w *walker, s, h, p int) {
	sh := st.shared
	d, g := st.c.HeadDim, st.group
	start := int(sh.layout.SuffixStart[s]) + p*sh.plan.SuffixPartitionTokens
	end := min(start+sh.plan.SuffixPartitionTokens, int(st.dec.ctx[s]))
	if start >= end {
		return
	}
	row := int(st.dec.rows[s])
	w.loadQ(0, st.q[(row*st.numHeads+h*g)*d:], g, st.scale)
	w.walk(st.c, h, st.dec.tables[s], g, start, end, false)
	i := sh.suffixSlot(st, s, h, p)
	copy(sh.partM[i:i+g], w.m[:g])
	copy(sh.partL[i:i+g], w.l[:g])
	copy(sh.partAcc[i*d:(i+g)*d], w.acc[:g*d])
}

// sharedMergeUnit is the program (decode sequence s, KV head h) of the merge.
func (st *step) sharedMergeUnit(s, h int) {
	sh := st.shared
	l := sh.layout
	d, g := st.c.HeadDim, st.group
	row := int(st.dec.rows[s])
	suffix := mergeSegment{sh.suffixSlot(st, s, h, 0), g, ceilDiv(int(l.SuffixLens[s]), sh.plan.SuffixPartitionTokens)}
	for head := range g {
		o := st.out[(row*st.numHeads+h*g+head)*d:][:d]
		suffix := suffix
		suffix.first += head
		if slot := l.SeqSlot[s]; slot >= 0 {
			v, m := int(slot)/l.Members, int(slot)%l.Members
			prefix := mergeSegment{sh.prefixSlot(st, v, h, 0, m) + head, l.Members * g,
				ceilDiv(int(l.VirtualLens[v]), sh.plan.PrefixPartitionTokens)}
			mergePartials(o, sh.partM, sh.partL, sh.partAcc, prefix, suffix)
		} else {
			mergePartials(o, sh.partM, sh.partL, sh.partAcc, suffix)
		}
	}
}

// DecodeShared writes decode attention (one query row per sequence, shapes of DecodeGrouped) with the
// shared-prefix algorithm: the pages groups share are read once per (virtual sequence, KV head) by the
// prefix pass, every sequence's own pages by the suffix pass, and the two merged by log-sum-exp (see
// SharedLayout). members bounds a virtual sequence's member slots; plan's partitions must be positive
// multiples of the page size. It panics on inconsistent shapes (programmer errors).
func DecodeShared(out, q []float32, numHeads int, scale float32, c *Cache, blockTables [][]int32, contextLens []int32,
	groups []SharedGroup, members int, plan SharedPlan) {
	st := newDecodeStep(out, q, numHeads, scale, c, blockTables, contextLens, "DecodeShared")
	st.runShared(NewSharedLayout(contextLens, groups, c.BlockSize, members), plan, defaultWorkers())
}

// runShared executes a decode-only step (no prefill rows) with the shared-prefix algorithm: the prefix
// and suffix passes in one parallel phase, the merge in a second.
func (st *step) runShared(l *SharedLayout, plan SharedPlan, workers int) {
	bs := st.c.BlockSize
	if err := plan.check(l, bs); err != nil {
		panic(err.Error())
	}
	if len(st.pre) > 0 || st.window > 0 || l.Batch != len(st.dec.ctx) {
		panic("attention: shared-prefix decode of a step with prefill rows, a window or another batch")
	}
	hkv, g := st.c.NumKVHeads, st.group
	sh := &sharedStep{layout: l, plan: plan}
	sh.prefixParts, sh.suffParts = plan.partitions(l)
	prefixSlots := l.Virtual() * hkv * sh.prefixParts * l.Members * g
	sh.suffixBase = prefixSlots
	n := prefixSlots + l.Batch*hkv*sh.suffParts*g
	sh.partM, sh.partL, sh.partAcc = make([]float32, n), make([]float32, n), make([]float32, n*st.c.HeadDim)
	st.shared = sh

	var units []unit
	for v := range l.Virtual() {
		for h := range hkv {
			for p := range ceilDiv(int(l.VirtualLens[v]), plan.PrefixPartitionTokens) {
				units = append(units, unit{unitPrefix, int32(v), int32(h), int32(p)})
			}
		}
	}
	for s := range l.Batch {
		for h := range hkv {
			for p := range ceilDiv(int(l.SuffixLens[s]), plan.SuffixPartitionTokens) {
				units = append(units, unit{unitSuffix, int32(s), int32(h), int32(p)})
			}
		}
	}
	fanout.For(workers, len(units), func() *walker { return newWalker(l.Members*g, st.c.HeadDim, bs) },
		func(w *walker, i int) {
			u := units[i]
			if u.kind == unitPrefix {
				st.prefixUnit(w, int(u.seq), int(u.head), int(u.index))
			} else {
				st.suffixUnit(w, int(u.seq), int(u.head), int(u.index))
			}
		})
	fanout.For(workers, l.Batch*hkv, func() struct{} { return struct{}{} },
		func(_ struct{}, i int) { st.sharedMergeUnit(i/hkv, i%hkv) })
}

// fitMembers is the member slots of a virtual sequence: limit, or fewer when no group has that many
// members (a slot without a member costs its rows' partials).
func fitMembers(groups []SharedGroup, limit int) int {
	most := 1
	for _, g := range groups {
		most = max(most, len(g.Seqs))
	}
	return min(limit, most)
}

// sharedTileRows is the query rows (members × G) a virtual sequence of the prefix pass gives one unit:
// the largest head tile of the GPU's mma kernels (16·4 rows), so that one program serves them all from
// one read of each page.
const sharedTileRows = 64

// SharedMembers is the member slots of a virtual sequence for a group of g query heads per KV head:
// as many members as fill sharedTileRows rows, at least one.
func SharedMembers(g int) int { return max(1, sharedTileRows/max(1, g)) }

// The shared-prefix cost model's constants.
const (
	// sharedMargin is how much fewer bytes the shared-prefix algorithm must be predicted to move than
	// the plain kernels before it is chosen: it has a second pass and a merge to get wrong, and the
	// model is coarse.
	sharedMargin = 0.9
	// cpuMaxPrefixPartitions bounds the CPU prefix pass's partitions (each adds a partial to merge).
	cpuMaxPrefixPartitions = 64
)

// sharedBytes returns the bytes a decode of contexts ctx moves on the plain kernels (every context's
// K/V once per KV head) and with layout's shared-prefix algorithm: each virtual sequence's shared
// pages once, every suffix once, and each pass's partials written and read back (G·(HeadDim+2) float32
// per unit and head) and, with gather, the gathered queries; K/V elements of kvElem bytes, queries of
// qElem.
func sharedBytes(ctx []int32, l *SharedLayout, plan SharedPlan, hkv, g, headDim, kvElem, qElem int, gather bool) (plain, shared float64) {
	token := float64(hkv) * 2 * float64(headDim) * float64(kvElem)
	for _, n := range ctx {
		plain += float64(n) * token
	}
	for _, n := range l.VirtualLens {
		shared += float64(n) * token
	}
	for _, n := range l.SuffixLens {
		shared += float64(n) * token
	}
	prefixParts, suffixParts := plan.partitions(l)
	partial := 2 * 4 * float64(headDim+2) // one head's (m, l, acc), written and read
	shared += partial * float64(hkv*g) * float64(l.Virtual()*l.Members*prefixParts+l.Batch*suffixParts)
	if gather {
		shared += 2 * float64(l.Virtual()*l.Members*hkv*g*headDim*qElem) // the gathered queries
	}
	return plain, shared
}

// cpuSharedPlan is the CPU twin's partitioning: prefix partitions of DefaultMinPartitionTokens (rounded
// up to pages) or more, so that a long prefix spreads over the workers; each suffix in one partition.
func cpuSharedPlan(l *SharedLayout, blockSize int) SharedPlan {
	return SharedPlan{
		PrefixPartitionTokens: max(roundUp(DefaultMinPartitionTokens, blockSize),
			roundUp(ceilDiv(longestContext(l.VirtualLens), cpuMaxPrefixPartitions), blockSize)),
		SuffixPartitionTokens: roundUp(max(1, longestContext(l.SuffixLens)), blockSize),
	}
}

// The GPU shared-prefix dispatcher's constants.
const (
	// sharedExtraLaunches is the kernels the shared-prefix algorithm launches beyond the plain call's
	// one or two: the second pass and the merge, and the query gather before any prefix kernel but the
	// Hopper one (sharedGathers).
	sharedExtraLaunches = 2
	// sharedLaunchSeconds is what one more dependent kernel costs on a busy stream (its launch, its
	// ramp-up and its predecessor's drain), charged as the bytes the memory streams in that time.
	sharedLaunchSeconds = 2e-6
	// sharedEagerSeconds is what one layer of a decode step loses when the step runs op by op instead of
	// as its CUDA graph (DecodeCall.LosesGraph): some eight launches of a few microseconds each, where
	// the GPU would otherwise not wait for them.
	sharedEagerSeconds = 20e-6
	// sharedWavePrograms is how many programs per SM the prefix pass's partitions aim at on the
	// split-k kernel, so that the pass fills the GPU whatever the number of groups.
	sharedWavePrograms = 2
)

// SharedDecision is DecideShared's answer: whether a decode call runs the shared-prefix algorithm and
// with which layout and plan.
type SharedDecision struct {
	// Use is false where the plain call is expected to be as fast (little sharing), and where the
	// shared path cannot run (no group, a window, RoPE, a graph's call to DecideShared: then Layout is
	// nil too).
	Use bool
	// Layout and Plan are the shared path's wherever it can run, taken or not (tests and benchmarks
	// force it with them).
	Layout *SharedLayout
	Plan   SharedPlan
	// Graph is the CUDA graph bucket of a decision for a captured step (DecideSharedGraph; zero for
	// DecideShared's), and Padded Layout padded to it: the arrays and sizes the graph's launches take.
	// Plan is then the key's, valid for Layout too (an eager run of the same step).
	Graph  SharedGraphKey
	Padded *SharedLayout
}

// SharedPrefixVariant names one of shared.cu's GPU prefix kernels (CUDATuning.SharedPrefix). Both
// write the same partials of sharedPrefixRows rows a program; they differ in how the rows are split
// among warps and how deep the K/V pipeline is.
type SharedPrefixVariant int

const (
	// SharedPrefixR16: 8 warps of 16 rows, Q in registers, 4 stages, softmax steps of 64 keys, one
	// program an SM (the default).
	SharedPrefixR16 SharedPrefixVariant = iota
	// SharedPrefixW32: 4 warps of 32 rows (two m-tiles), Q from shared memory, 2 stages, two programs
	// an SM; it runs where a device's shared memory cannot hold a program of R16.
	SharedPrefixW32
	numSharedPrefixVariants
)

// sharedPrefixRows is the query rows of one program of either prefix kernel.
const sharedPrefixRows = 128

// kernel is the variant's entry point prefix (shared.cu) and block size.
func (v SharedPrefixVariant) kernel() (name string, threads int) {
	if v == SharedPrefixW32 {
		return "SharedPrefix", 128
	}
	return "SharedPrefixR16", 256
}

// programsPerSM is the variant's programs an SM on an H100 or H200 (its registers and shared memory).
func (v SharedPrefixVariant) programsPerSM() int {
	if v == SharedPrefixW32 {
		return 2
	}
	return 1
}

// String is the variant's name in benchmarks.
func (v SharedPrefixVariant) String() string {
	switch v {
	case SharedPrefixR16:
		return "R16"
	case SharedPrefixW32:
		return "W32"
	}
	return fmt.Sprintf("SharedPrefixVariant(%d)", int(v))
}

// sharedPrefixKernel reports whether shared.cu's prefix kernel covers dtype dt at head dimension d
// (bf16 and fp16 at 64 and 128, over pages of dt or FP8 pages); other calls run the prefix pass on the
// split-k partition kernel (never over FP8 pages: sharedCall).
func sharedPrefixKernel(dt DType, d int) bool {
	return (dt == BF16 || dt == FP16) && (d == 64 || d == 128)
}

// SharedPrefixFP8 reports whether the GPU's shared-prefix decode runs over FP8 pages with queries of dt
// at head dimension headDim: a prefix kernel reads them (bf16 and fp16 at 64 and 128). DecideShared
// never plans the other shapes over FP8 pages.
func SharedPrefixFP8(dt DType, headDim int) bool { return sharedPrefixKernel(dt, headDim) }

// sharedPrefixVariant is the prefix kernel call c runs: CUDATuning.SharedPrefix, but W32 over FP8 pages,
// the one variant with an FP8 entry point (SharedPrefix_<dtype>_e4m3_d<D>).
func (c *DecodeCall) sharedPrefixVariant() SharedPrefixVariant {
	if c.KVFP8 {
		return SharedPrefixW32
	}
	return c.Tuning.SharedPrefix
}

// sharedPrefixSM90Name is prefill_sm90.cu's Hopper prefix kernel (SharedPrefixSM90_<dtype>_d<D>, over FP8
// pages SharedPrefixSM90_<dtype>_e4m3_d<D>), in that file's type names; "" for a dtype it has none of
// (float32).
func sharedPrefixSM90Name(dt DType, d int, kvFP8 bool) string {
	tn, ok := map[DType]string{BF16: "bf16", FP16: "f16"}[dt]
	if !ok {
		return ""
	}
	if kvFP8 {
		tn += "_e4m3"
	}
	return fmt.Sprintf("SharedPrefixSM90_%s_d%d", tn, d)
}

// sharedPrefixSM90 reports whether call c's prefix pass runs the Hopper prefix kernel on dev, the one
// rule of it (CUDAKernels.sharedPrefixFor launches what it says): the kernel is loaded there (its
// occupancy is known), c.Tuning.NoSM90Prefix is unset, and its copies take c's pages (sm90Pages).
func (c *DecodeCall) sharedPrefixSM90(dev DecodeDevice) bool {
	return dev.ProgramsPerSM != nil && !c.Tuning.NoSM90Prefix && sm90Pages(c.BlockSize) &&
		dev.ProgramsPerSM(DecodeKernel{Name: sharedPrefixSM90Name(c.DType, c.HeadDim, c.KVFP8)}) > 0
}

// sharedGathers reports whether call c's queries are gathered by a launch of their own before its prefix
// pass on dev: for every prefix pass but the Hopper kernel's, which loads its rows from the call's
// queries itself (CUDAKernels.sharedStages).
func (c *DecodeCall) sharedGathers(dev DecodeDevice) bool { return !c.sharedPrefixSM90(dev) }

// sharedPrefixPerSM is the programs an SM of the prefix kernel call c's prefix pass runs on dev: the
// Hopper kernel's occupancy where it runs (sharedPrefixSM90), else its shared.cu variant's. A plan sized
// for another kernel's occupancy runs in two waves of half-length partitions (twice the partials to
// merge) or leaves half the SMs idle.
func (c *DecodeCall) sharedPrefixPerSM(dev DecodeDevice) int {
	if c.sharedPrefixSM90(dev) {
		return dev.ProgramsPerSM(DecodeKernel{Name: sharedPrefixSM90Name(c.DType, c.HeadDim, c.KVFP8)})
	}
	return c.sharedPrefixVariant().programsPerSM()
}

// SharedMembersFor is the member slots of a GPU prefix pass's virtual sequence for groups of g heads
// at head dimension headDim in dtype dt: as many as fill a prefix kernel's rows (sharedPrefixRows)
// where one covers the call, else the split-k mma kernels' largest head tile (64 rows; 8 at head_dim
// 256, where the mma kernels have the narrow tile alone).
func SharedMembersFor(dt DType, g, headDim int) int {
	switch {
	case sharedPrefixKernel(dt, headDim):
		return max(1, sharedPrefixRows/max(1, g))
	case headDim == wideHeadDim:
		return max(1, cudaNarrowRows/max(1, g))
	}
	return SharedMembers(g)
}

// sharedCall reports whether the shared-prefix algorithm can run call c over groups at all (some group,
// no window, no RoPE folded in, no forced plan; FP8 pages only where a prefix kernel reads them:
// sharedPrefixKernel's shapes), with c's query heads a KV head (DecodeCall.check).
func sharedCall(c *DecodeCall, groups []SharedGroup) (group int, ok bool) {
	if len(groups) == 0 || c.Window > 0 || c.RoPE != nil || c.Force != nil || c.KVFP8 && !sharedPrefixKernel(c.DType, c.HeadDim) {
		return 0, false
	}
	group, err := c.check()
	return group, err == nil
}

// DecideShared decides whether decode call c, whose sequences share pages as groups says (decode
// indices of c.ContextLens), runs the shared-prefix algorithm on device dev, and plans it.
//
// It runs when it moves at most sharedMargin of the plain call's bytes (sharedBytes: the shared pages
// once per virtual sequence instead of once per member, plus both passes' partials and the gathered
// queries where a launch gathers them: sharedGathers), its extra launches charged as the bytes the memory
// streams in their time (sharedExtraLaunches, and the gather, · sharedLaunchSeconds · bandwidth: about
// 19 MB on an H200 whose Hopper prefix kernel gathers its own rows, so 8 sequences need some 830 shared
// tokens of a Llama-3-8B layer and 64 sequences about 130; 29 MB, 1230 and 180 with the gather launch),
// and, where the call would otherwise be part of a CUDA graph (LosesGraph), the step's eager launches
// (sharedEagerSeconds: 96 MB more, some 4700 and 560 tokens). Never for a call with a window or RoPE, or a graph's call (c.Graph:
// DecideSharedGraph plans those, on a layout padded to a bucket whose launches do not follow the
// groups).
//
// The prefix pass is split so that its programs (virtual sequences × KV heads × partitions) make
// sharedWavePrograms per SM on the split-k kernel; on a prefix kernel, as many as fit one wave of its
// occupancy (DecodeCall.sharedPrefixPerSM: a program more would start a wave of its own, for the
// time of all the others, and partials cost bytes), in whole 64-token tiles of
// DefaultMinPartitionTokens or more, at most maxSplitPartitions of them; the suffix
// pass takes the split the plain planner gives the suffixes (one partition where it would not split).
func DecideShared(c DecodeCall, groups []SharedGroup, dev DecodeDevice) SharedDecision {
	group, ok := sharedCall(&c, groups)
	if !ok || c.Graph != nil {
		return SharedDecision{}
	}
	l := NewSharedLayout(c.ContextLens, groups, c.BlockSize, fitMembers(groups, SharedMembersFor(c.DType, group, c.HeadDim)))
	if l.Virtual() == 0 {
		return SharedDecision{}
	}
	tile := max(cudaTileTokens, c.BlockSize)
	plan := SharedPlan{PrefixPartitionTokens: sharedPrefixPartition(&c, dev, group, l.Virtual(), l.Members, longestContext(l.VirtualLens))}

	suffix := c
	suffix.ContextLens = l.SuffixLens
	suffix.Force = nil
	suffixPlan := DecodePlan{Kernel: Grouped}
	if d, err := Decide(suffix, dev); err == nil {
		suffixPlan = d.Plan
	}
	if suffixPlan.Kernel == SplitK {
		plan.SuffixPartitionTokens = suffixPlan.PartitionTokens
	} else {
		plan.SuffixPartitionTokens = roundUp(max(1, longestContext(l.SuffixLens)), tile)
	}
	overhead := 0.0
	if c.LosesGraph {
		overhead = sharedEagerSeconds * sharedBandwidth(dev)
	}
	return SharedDecision{Use: sharedPays(&c, l, plan, group, dev, overhead), Layout: l, Plan: plan}
}

// sharedPrefixPartition is the prefix pass's partition tokens for virtual virtual sequences of members
// member slots whose longest shared prefix is longest tokens (see DecideShared): whole tiles of
// DefaultMinPartitionTokens or more, as many partitions as make the pass's programs one wave of the
// prefix kernel (or sharedWavePrograms per SM of the split-k kernel), at most maxSplitPartitions.
func sharedPrefixPartition(c *DecodeCall, dev DecodeDevice, group, virtual, members, longest int) int {
	tile := max(cudaTileTokens, c.BlockSize)
	units := virtual * c.NumKVHeads
	parts := ceilDiv(sharedWavePrograms*max(1, dev.SMs), units)
	if sharedPrefixKernel(c.DType, c.HeadDim) {
		units *= ceilDiv(members*group, sharedPrefixRows) // the prefix kernel's row blocks
		parts = c.sharedPrefixPerSM(dev) * max(1, dev.SMs) / units
	}
	parts = min(maxSplitPartitions, max(1, parts))
	return max(roundUp(DefaultMinPartitionTokens, tile), roundUp(ceilDiv(longest, parts), tile))
}

// sharedBandwidth is the device's memory bandwidth the cost model charges time at.
func sharedBandwidth(dev DecodeDevice) float64 {
	if dev.PeakBandwidth <= 0 {
		return h100PeakBandwidth
	}
	return dev.PeakBandwidth
}

// sharedPays reports whether layout l with plan is predicted to move at most sharedMargin of call c's
// plain bytes (sharedBytes), its extra launches and overhead (bytes) charged.
func sharedPays(c *DecodeCall, l *SharedLayout, plan SharedPlan, group int, dev DecodeDevice, overhead float64) bool {
	gather := c.sharedGathers(dev)
	plain, shared := sharedBytes(c.ContextLens, l, plan, c.NumKVHeads, group, c.HeadDim, c.KVElementBytes(), c.DType.Size(), gather)
	launches := sharedExtraLaunches
	if gather {
		launches++
	}
	overhead += float64(launches) * sharedLaunchSeconds * sharedBandwidth(dev)
	return shared+overhead <= sharedMargin*plain
}

// SharedGraphKey is the bucket of a shared-prefix decode step captured into a CUDA graph: every size
// the step's shared-prefix launches take by value (grids, scalars, workspace regions and the lengths
// of its device arrays) follows from it and the call's shape alone. Steps of one key run the same
// launches over arrays of the same sizes (SharedLayout.Pad), whatever their groups, so the graph
// captured for one replays the others. The zero key names no shared-prefix graph.
type SharedGraphKey struct {
	// Virtual is the virtual sequences of the padded layout; Members their member slots.
	Virtual, Members int
	// The plan (Plan): both passes' partition tokens and fixed partition counts.
	PrefixPartitionTokens, PrefixPartitions int
	SuffixPartitionTokens, SuffixPartitions int
}

// Plan is the plan of the key's steps, partition counts fixed.
func (k SharedGraphKey) Plan() SharedPlan {
	return SharedPlan{PrefixPartitionTokens: k.PrefixPartitionTokens, SuffixPartitionTokens: k.SuffixPartitionTokens,
		PrefixPartitions: k.PrefixPartitions, SuffixPartitions: k.SuffixPartitions}
}

// sharedGatherMaxThreads is the largest block of the query gather (shared.cu's SharedGather).
const sharedGatherMaxThreads = 1024

// sharedMergeHeads is SHARED_MERGE_HEADS of shared.cu: the query heads of a merge block, a warp each
// (sharedMergeThreads threads).
const (
	sharedMergeHeads   = 4
	sharedMergeThreads = sharedMergeHeads * 32
)

// sharedMinSuffixCap is the smallest suffix bound of a shared-prefix graph (tokens, a power of two).
const sharedMinSuffixCap = 256

// DecideSharedGraph is DecideShared for a decode call captured into a CUDA graph (c.Graph set, its
// MinBatch the smallest batch the graph replays) of rows rows (the batch bucket, at least the call's
// sequences) whose contexts are at most contextCap tokens (at most the block tables' tokens). It
// buckets the step's shape into a SharedGraphKey, so that a graph serves every step of the key:
//
//   - members: the dispatcher's member slots (SharedMembersFor), or the power of two at or above the
//     largest group where that is fewer;
//   - virtual sequences: the power of two at or above the layout's, at most rows;
//   - the prefix pass planned as DecideShared plans it, on the padded virtual sequences and the longest
//     shared prefix rounded up to one of eight steps an octave and to a tile (at most contextCap): at
//     most an eighth of its wave idle, and shared prefixes do not grow from step to step;
//   - the suffix pass planned as Decide plans a graph of rows sequences at the longest suffix's power of
//     two (sharedMinSuffixCap or more, at most contextCap): one partition where that runs grouped.
//
// The plan is a function of the key alone; the decision (Use) weighs the padded layout's bytes against
// the plain call's, with no charge for a lost graph. Layout is the unpadded layout (what an eager run
// of the step takes), Padded the key's. It returns no layout where DecideShared would not, or for a
// call without c.Graph or of more sequences than rows.
func DecideSharedGraph(c DecodeCall, groups []SharedGroup, dev DecodeDevice, rows, contextCap int) SharedDecision {
	group, ok := sharedCall(&c, groups)
	if !ok || c.Graph == nil || rows < len(c.ContextLens) || contextCap > c.MaxBlocks*c.BlockSize ||
		longestContext(c.ContextLens) > contextCap {
		return SharedDecision{}
	}
	most := 1
	for _, g := range groups {
		most = max(most, len(g.Seqs))
	}
	l := NewSharedLayout(c.ContextLens, groups, c.BlockSize, min(SharedMembersFor(c.DType, group, c.HeadDim), nextPowerOfTwo(most)))
	if l.Virtual() == 0 {
		return SharedDecision{}
	}
	key := sharedGraphKey(&c, dev, group, rows, contextCap, l.Virtual(), l.Members,
		longestContext(l.VirtualLens), longestContext(l.SuffixLens))
	padded := l.Pad(rows, key.Virtual)
	plan := key.Plan()
	return SharedDecision{Use: sharedPays(&c, padded, plan, group, dev, 0), Layout: l, Plan: plan, Graph: key, Padded: padded}
}

// sharedGraphKey is DecideSharedGraph's key for a layout of virtual virtual sequences of members member
// slots whose longest shared prefix and suffix are longestShared and longestSuffix tokens: a function
// of the call's shape (not its lengths), rows, contextCap and the buckets of those four.
func sharedGraphKey(c *DecodeCall, dev DecodeDevice, group, rows, contextCap, virtual, members, longestShared, longestSuffix int) SharedGraphKey {
	tile := max(cudaTileTokens, c.BlockSize)
	k := SharedGraphKey{Virtual: min(rows, nextPowerOfTwo(virtual)), Members: members}
	sharedCap := min(contextCap, roundUp(octaveCeil(longestShared), tile))
	k.PrefixPartitionTokens = sharedPrefixPartition(c, dev, group, k.Virtual, members, sharedCap)
	k.PrefixPartitions = ceilDiv(sharedCap, k.PrefixPartitionTokens)

	suffixCap := min(contextCap, max(sharedMinSuffixCap, nextPowerOfTwo(longestSuffix)))
	suffix := *c
	suffix.ContextLens = make([]int32, rows)
	for i := range suffix.ContextLens {
		suffix.ContextLens[i] = int32(suffixCap)
	}
	suffix.Force = nil
	k.SuffixPartitionTokens = roundUp(suffixCap, tile)
	if d, err := Decide(suffix, dev); err == nil && d.Plan.Kernel == SplitK {
		k.SuffixPartitionTokens = d.Plan.PartitionTokens
	}
	k.SuffixPartitions = ceilDiv(suffixCap, k.SuffixPartitionTokens)
	return k
}

// octaveCeil rounds n up to one of eight steps an octave: a multiple of an eighth of the largest power
// of two at most n.
func octaveCeil(n int) int {
	if n <= 8 {
		return max(n, 0)
	}
	return roundUp(n, 1<<(bits.Len(uint(n))-4))
}

// nextPowerOfTwo is the smallest power of two at least n (1 for n ≤ 1).
func nextPowerOfTwo(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// sharedLaunch is every launch shape and by-value scalar of a shared-prefix call (CUDAKernels.
// DecodeShared): the gather's and the merge's grids, the prefix pass's (the prefix kernel's grid, or
// the split-k kernel's decision) and the suffix pass's decision, the host lengths they were decided on,
// and the workspace's regions. With a plan of fixed partition counts it is a function of the call's
// shape, the layout's sizes (Batch, Virtual, Members) and the plan alone, never of the layout's
// lengths: the passes are decided on lengths of the plan's partitions (at most the block tables'
// tokens), their partition counts the plan's. That is what lets a CUDA graph of one layout replay
// another of the same sizes.
type sharedLaunch struct {
	virtualHeads int
	gather       [3]int
	// gatherThreads is the gather's block: a 16-byte copy a thread, a member's query row a block.
	gatherThreads int
	// prefixKernel: the prefix pass runs a prefix kernel, over prefixGrid; else the split-k kernel of
	// prefix. prefix.Plan is the pass's partitioning either way.
	prefixKernel bool
	prefixGrid   [3]int
	prefix       DecodeDecision
	suffix       DecodeDecision
	merge        [3]int
	// prefixLens and suffixLens are the passes' host context lengths (Decide's, and the prefix kernel's
	// batch).
	prefixLens, suffixLens []int32
	// qBytes and preBytes are the gathered queries' and the prefix partials' regions of the workspace,
	// workspace its whole size.
	qBytes, preBytes, workspace int64
	// scalars are every other integer the launches take by value.
	scalars sharedScalars
}

// sharedScalars are the integers a shared-prefix call's kernels take by value (shared.cu's SharedParams
// and the prefix kernel's parameters) beside the grids: computed here, with the rest of the launch, so
// that what a CUDA graph bakes in is a function of its key (TestDecideSharedGraph compares them).
type sharedScalars struct {
	numHeads, numKVHeads, group, members, rowBytes int
	prefixPartitionTokens, prefixPartitions        int
	suffixPartitionTokens, suffixPartitions        int
	// preRows and sufRows are the passes' partial rows (virtual·virtualHeads·partitions, batch·heads·
	// partitions): where their m and l start in the workspace.
	preRows, sufRows int64
	// prefixRows is the prefix kernel's query rows a KV head of a virtual sequence, prefixBatch its
	// virtual sequences.
	prefixRows, prefixBatch int
}

// planSharedLaunch is the launch of a shared-prefix call c (its shape and tuning; its ContextLens one
// for each of l's sequences) with layout l and plan on device dev, the prefix pass on a prefix kernel
// where prefixKernel says so: the passes are forced split-k calls without dependent launch, the prefix
// pass's copies without evict_first, their partials merged by the shared merge (SplitKReduceKernel).
func planSharedLaunch(c DecodeCall, l *SharedLayout, plan SharedPlan, dev DecodeDevice, prefixKernel bool) (sharedLaunch, error) {
	if err := plan.check(l, c.BlockSize); err != nil {
		return sharedLaunch{}, err
	}
	if c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0 {
		return sharedLaunch{}, fmt.Errorf("attention: %d query heads for %d KV heads", c.NumHeads, c.NumKVHeads)
	}
	var sl sharedLaunch
	elem := c.DType.Size()
	sl.qBytes, sl.preBytes, sl.virtualHeads = sharedRegions(l, plan, c.NumHeads, c.NumKVHeads, c.HeadDim, elem)
	sl.workspace = SharedWorkspaceBytes(l, plan, c.NumHeads, c.NumKVHeads, c.HeadDim, elem)
	prefixParts, suffixParts := plan.partitions(l)
	g := c.NumHeads / c.NumKVHeads

	// A partition past the block table's tokens is one partition of every context, as the planner's
	// bound on partitions (MaxBlocks·BlockSize) wants it written.
	tableTokens := c.MaxBlocks * c.BlockSize
	prefixPart, suffixPart := min(plan.PrefixPartitionTokens, tableTokens), min(plan.SuffixPartitionTokens, tableTokens)
	filled := func(n, tokens int) []int32 {
		lens := make([]int32, n)
		for i := range lens {
			lens[i] = int32(min(tokens, tableTokens))
		}
		return lens
	}
	sl.prefixLens, sl.suffixLens = l.VirtualLens, l.SuffixLens
	if plan.PrefixPartitions > 0 {
		sl.prefixLens = filled(l.Virtual(), plan.PrefixPartitions*prefixPart)
	}
	if plan.SuffixPartitions > 0 {
		sl.suffixLens = filled(l.Batch, plan.SuffixPartitions*suffixPart)
	}
	c.Dependent, c.Path, c.Graph, c.Tuning.SplitKReduceKernel = false, PathAuto, nil, true

	sl.gather = [3]int{l.Virtual() * l.Members, 1, 1}
	sl.gatherThreads = min(sharedGatherMaxThreads, c.NumHeads*c.HeadDim*elem/16)
	sl.merge = [3]int{l.Batch, ceilDiv(c.NumHeads, sharedMergeHeads), 1}
	sl.prefixKernel = prefixKernel
	if prefixKernel {
		sl.prefix.Plan = DecodePlan{Kernel: SplitK, PartitionTokens: plan.PrefixPartitionTokens, NumPartitions: prefixParts}
		sl.prefixGrid = [3]int{l.Virtual() * ceilDiv(l.Members*g, sharedPrefixRows), c.NumKVHeads, prefixParts}
	} else {
		prefix := c
		prefix.ContextLens, prefix.NumHeads = sl.prefixLens, sl.virtualHeads
		prefix.Force = &ForcedPlan{Kernel: SplitK, PartitionTokens: prefixPart}
		prefix.Tuning.NoEvictFirst = true
		var err error
		if sl.prefix, err = Decide(prefix, dev); err != nil {
			return sharedLaunch{}, fmt.Errorf("attention: shared-prefix pass: %w", err)
		}
		sl.prefix.fixPartitions(prefixParts)
	}
	suffix := c
	suffix.ContextLens = sl.suffixLens
	suffix.Force = &ForcedPlan{Kernel: SplitK, PartitionTokens: suffixPart}
	var err error
	if sl.suffix, err = Decide(suffix, dev); err != nil {
		return sharedLaunch{}, fmt.Errorf("attention: shared-prefix suffix pass: %w", err)
	}
	if sl.suffix.fixPartitions(suffixParts) {
		sl.suffix.EvictFirst = suffix.evictFirst(dev, sl.suffix.Grid[0]*sl.suffix.Grid[1]*sl.suffix.Grid[2])
	}
	pd, sd := sl.prefix.Plan, sl.suffix.Plan
	sl.scalars = sharedScalars{numHeads: c.NumHeads, numKVHeads: c.NumKVHeads, group: g, members: l.Members,
		rowBytes:              c.HeadDim * elem,
		prefixPartitionTokens: pd.PartitionTokens, prefixPartitions: pd.NumPartitions,
		suffixPartitionTokens: sd.PartitionTokens, suffixPartitions: sd.NumPartitions,
		preRows:    int64(l.Virtual()) * int64(sl.virtualHeads) * int64(pd.NumPartitions),
		sufRows:    int64(l.Batch) * int64(c.NumHeads) * int64(sd.NumPartitions),
		prefixRows: sl.virtualHeads / c.NumKVHeads, prefixBatch: len(sl.prefixLens)}
	return sl, nil
}

// fixPartitions sets a split-k decision's partition count (and its grid's) to parts, the shared plan's
// (at least its own), and reports whether it changed.
func (d *DecodeDecision) fixPartitions(parts int) bool {
	if d.Plan.NumPartitions == parts {
		return false
	}
	d.Plan.NumPartitions, d.Grid[2] = parts, parts
	return true
}

// SharedWorkspaceBytes is the workspace a shared-prefix call of layout l and plan needs with numHeads
// query heads of headDim, elements of elemSize bytes: the gathered queries, then the prefix pass's and
// the suffix pass's split-k partials, each 16-byte aligned.
func SharedWorkspaceBytes(l *SharedLayout, plan SharedPlan, numHeads, numKVHeads, headDim, elemSize int) int64 {
	q, pre, _ := sharedRegions(l, plan, numHeads, numKVHeads, headDim, elemSize)
	_, suffixParts := plan.partitions(l)
	return q + pre + SplitKWorkspaceBytes(l.Batch, numHeads, headDim, suffixParts)
}

// sharedRegions returns the sizes of the workspace's gathered queries and prefix partials (16-byte
// aligned), and the virtual call's query heads.
func sharedRegions(l *SharedLayout, plan SharedPlan, numHeads, numKVHeads, headDim, elemSize int) (q, pre int64, virtualHeads int) {
	g := numHeads / numKVHeads
	virtualHeads = numKVHeads * l.Members * g
	prefixParts, _ := plan.partitions(l)
	q = int64(roundUp(l.Virtual()*virtualHeads*headDim*elemSize, 16))
	pre = int64(roundUp(int(SplitKWorkspaceBytes(l.Virtual(), virtualHeads, headDim, prefixParts)), 16))
	return q, pre, virtualHeads
}
