package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sharedSpec is a group of a shared-prefix test batch: members sequences that share pages full pages and
// then have suffixes of their own (suffix[i] tokens, at least 1; a prefill member has qlen > 1 rows).
type sharedSpec struct {
	pages  int
	suffix []int
	qlen   int // query rows of every member; 0 means 1 (decode)
}

// newSharedFixture builds a batch whose groups share physical pages: every group's prefix K/V is written
// once to its own pages, and each member's table lists those pages, then pages of its own (all pages
// permuted in the pool, NaN where nothing is written). It returns the fixture, whose reference is dense
// attention over each sequence's logical K/V (prefix then suffix), and the groups of decode members with
// pages > 0 as FindSharedGroups should find them.
func newSharedFixture(t *testing.T, rng *rand.Rand, group, kvHeads, headDim, blockSize int, specs []sharedSpec) (*fixture, []SharedGroup) {
	t.Helper()
	f := &fixture{numHeads: group * kvHeads, kvHeads: kvHeads, headDim: headDim, blockSize: blockSize,
		scale: 1 / float32(math.Sqrt(float64(headDim)))}
	numBlocks := 5
	for _, g := range specs {
		numBlocks += g.pages
		for _, n := range g.suffix {
			numBlocks += ceilDiv(n, blockSize) + 1
		}
	}
	c := NewCache(numBlocks, blockSize, kvHeads, headDim)
	for i := range c.K {
		c.K[i], c.V[i] = float32(math.NaN()), float32(math.NaN())
	}
	f.cache = c
	physical := rng.Perm(numBlocks)
	take := func() int32 { b := physical[0]; physical = physical[1:]; return int32(b) }
	row := kvHeads * headDim
	b := &Batch{QueryStart: []int32{0}}
	var want []SharedGroup
	for _, g := range specs {
		prefix := make([]int32, g.pages)
		for i := range prefix {
			prefix[i] = take()
		}
		pk, pv := randomSlice(rng, g.pages*blockSize*row), randomSlice(rng, g.pages*blockSize*row)
		slots := make([]int32, g.pages*blockSize)
		for pos := range slots {
			slots[pos] = Slot(prefix, blockSize, pos)
		}
		c.Write(pk, pv, slots)
		var members []int32
		qlen := max(1, g.qlen)
		for _, n := range g.suffix {
			ctx := g.pages*blockSize + n
			table := append([]int32(nil), prefix...)
			for len(table) < ceilDiv(ctx, blockSize) {
				table = append(table, take())
			}
			sk, sv := randomSlice(rng, n*row), randomSlice(rng, n*row)
			slots := make([]int32, n)
			for i := range slots {
				slots[i] = Slot(table, blockSize, g.pages*blockSize+i)
			}
			c.Write(sk, sv, slots)
			s := len(b.ContextLens)
			if qlen == 1 {
				members = append(members, int32(s))
			}
			f.specs = append(f.specs, seqSpec{qlen, ctx})
			f.keys = append(f.keys, append(slices.Clone(pk), sk...))
			f.values = append(f.values, append(slices.Clone(pv), sv...))
			b.ContextLens = append(b.ContextLens, int32(ctx))
			b.BlockTables = append(b.BlockTables, table)
			b.QueryStart = append(b.QueryStart, b.QueryStart[s]+int32(qlen))
		}
		if g.pages > 0 && len(members) > 1 {
			want = append(want, SharedGroup{Seqs: members, Pages: g.pages})
		}
	}
	f.batch = b
	f.q = randomSlice(rng, f.numRows()*f.numHeads*headDim)
	return f, want
}

// suffixes returns n ragged suffix lengths from 1 to a few pages.
func suffixes(rng *rand.Rand, n, blockSize int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1 + rng.IntN(3*blockSize)
	}
	return out
}

// TestDecodeShared checks the shared-prefix algorithm against the float64 reference and the grouped
// kernel: groups of 1 to 64 sequences, prefixes of 1 page, a page and a few tokens, and long, ragged
// suffixes, several groups and sequences in no group (a prefix of 0 pages) in one batch, permuted pages,
// and prefix and suffix partitions from one page to longer than every context. Over an FP8 copy of the
// cache (K and V scales of 1/600 and 1/64: saturated and subnormal codes) it must give the grouped
// kernel's output over that copy.
func TestDecodeShared(t *testing.T) {
	for _, sh := range []struct{ group, kvHeads, headDim, blockSize int }{
		{1, 2, 64, 16}, {4, 2, 128, 8}, {4, 1, 64, 16}, {8, 2, 64, 32}, {32, 1, 64, 8},
	} {
		name := fmt.Sprintf("g%d_kv%d_d%d_page%d", sh.group, sh.kvHeads, sh.headDim, sh.blockSize)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.group), uint64(sh.headDim+sh.blockSize)))
			bs := sh.blockSize
			cases := []struct {
				name  string
				specs []sharedSpec
			}{
				{"one sequence", []sharedSpec{{pages: 2, suffix: []int{3}}}},
				{"two, one page", []sharedSpec{{pages: 1, suffix: []int{1, 1}}}},
				{"page and a few tokens", []sharedSpec{{pages: 1, suffix: []int{2, 5, bs - 1, bs}}}},
				{"17 members", []sharedSpec{{pages: 3, suffix: suffixes(rng, 17, bs)}}},
				{"64 members, long", []sharedSpec{{pages: 40, suffix: suffixes(rng, 64, bs)}}},
				{"groups and loners", []sharedSpec{
					{pages: 5, suffix: suffixes(rng, 9, bs)},
					{pages: 0, suffix: []int{7, 3 * bs}},
					{pages: 12, suffix: suffixes(rng, 3, bs)},
					{pages: 1, suffix: []int{1}},
					{pages: 2, suffix: suffixes(rng, 20, bs)},
				}},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					f, groups := newSharedFixture(t, rng, sh.group, sh.kvHeads, sh.headDim, bs, tc.specs)
					if len(groups) == 0 { // a group of one: name it, FindSharedGroups would not
						groups = []SharedGroup{{Seqs: []int32{0}, Pages: tc.specs[0].pages}}
					}
					b := f.batch
					ref := f.reference()
					grouped := f.poisonedOutput()
					DecodeGrouped(grouped, f.q, f.numHeads, f.scale, f.cache, b.BlockTables, b.ContextLens)
					checkClose(t, "grouped", grouped, ref)
					for _, members := range []int{1, 3, SharedMembers(sh.group)} {
						for _, plan := range []SharedPlan{
							{PrefixPartitionTokens: bs, SuffixPartitionTokens: bs},
							{PrefixPartitionTokens: 3 * bs, SuffixPartitionTokens: 2 * bs},
							{PrefixPartitionTokens: roundUp(DefaultMinPartitionTokens, bs), SuffixPartitionTokens: roundUp(DefaultMinPartitionTokens, bs)},
							{PrefixPartitionTokens: 1 << 14, SuffixPartitionTokens: 1 << 14},
						} {
							out := f.poisonedOutput()
							DecodeShared(out, f.q, f.numHeads, f.scale, f.cache, b.BlockTables, b.ContextLens, groups, members, plan)
							what := fmt.Sprintf("shared members %d plan %+v", members, plan)
							checkClose(t, what, out, ref)
							checkCloseTol(t, what+" vs grouped", out, toFloat64(grouped), 1e-5)
						}
					}
					f8, _, fq := fp8Twins(f, 1.0/600, 1.0/64)
					ref8 := fq.reference()
					grouped8 := f.poisonedOutput()
					DecodeGrouped(grouped8, f.q, f.numHeads, f.scale, f8, b.BlockTables, b.ContextLens)
					for _, members := range []int{1, SharedMembers(sh.group)} {
						plan := SharedPlan{PrefixPartitionTokens: 3 * bs, SuffixPartitionTokens: 2 * bs}
						out := f.poisonedOutput()
						DecodeShared(out, f.q, f.numHeads, f.scale, f8, b.BlockTables, b.ContextLens, groups, members, plan)
						what := fmt.Sprintf("FP8 pages, shared members %d", members)
						checkClose(t, what, out, ref8)
						checkCloseTol(t, what+" vs grouped", out, toFloat64(grouped8), 1e-5)
					}
				})
			}
		})
	}
}

func toFloat64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestAttendShared runs Attend with the groups FindSharedGroups finds, in a step that mixes them with
// prefill chunks (one of them behind a shared prefix) and sequences in no group, on one worker and
// several, over a float32 and an FP8 cache (against the same step over the dequantized float32 cache).
func TestAttendShared(t *testing.T) {
	for _, sh := range []struct{ group, kvHeads, headDim, blockSize int }{{4, 2, 128, 16}, {1, 3, 64, 8}, {8, 1, 64, 32}} {
		t.Run(fmt.Sprintf("g%d_kv%d_d%d_page%d", sh.group, sh.kvHeads, sh.headDim, sh.blockSize), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.group*7), uint64(sh.blockSize)))
			bs := sh.blockSize
			specs := []sharedSpec{
				{pages: 30, suffix: suffixes(rng, 24, bs)},
				{pages: 0, suffix: []int{5, 40}},
				{pages: 30, suffix: []int{9, 2 * bs}, qlen: 4}, // prefill chunks: no group
				{pages: 8, suffix: suffixes(rng, 5, bs)},
			}
			f, want := newSharedFixture(t, rng, sh.group, sh.kvHeads, sh.headDim, bs, specs)
			got := FindSharedGroups(f.batch, bs)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("FindSharedGroups = %v, want %v", got, want)
			}
			ref := f.reference()
			b := *f.batch
			b.Shared = got
			for _, workers := range []int{1, 3} {
				out := f.poisonedOutput()
				attend(out, f.q, f.numHeads, f.scale, f.cache, &b, workers, nil)
				checkClose(t, fmt.Sprintf("Attend shared, %d workers", workers), out, ref)
			}

			fp8, deq, fq := fp8Twins(f, 0.05, 0.02)
			refQ := fq.reference()
			plain, shared := f.poisonedOutput(), f.poisonedOutput()
			Attend(plain, f.q, f.numHeads, f.scale, deq, f.batch)
			Attend(shared, f.q, f.numHeads, f.scale, fp8, &b)
			checkClose(t, "FP8 shared", shared, refQ)
			checkCloseTol(t, "FP8 shared vs dequantized plain", shared, toFloat64(plain), 1e-5)
		})
	}
}

// TestFindSharedGroups checks the grouping on hand-made block tables: the longest common run of full
// pages before the newest token, buckets that part at a page, prefill rows and windows left out.
func TestFindSharedGroups(t *testing.T) {
	const bs = 4
	decode := func(n int) []int32 {
		q := make([]int32, n+1)
		for i := range q {
			q[i] = int32(i)
		}
		return q
	}
	cases := []struct {
		name   string
		batch  Batch
		want   string
		window int
	}{
		{"none shared", Batch{QueryStart: decode(3), ContextLens: []int32{9, 9, 9},
			BlockTables: [][]int32{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}}, "[]", 0},
		{"two pages", Batch{QueryStart: decode(3), ContextLens: []int32{12, 10, 9},
			BlockTables: [][]int32{{1, 2, 3}, {1, 2, 5}, {1, 2, 6}}}, "[{[0 1 2] 2}]", 0},
		// Context 8 holds 2 full pages, but the newest token (position 7) is on the second: one page.
		{"newest token's page", Batch{QueryStart: decode(2), ContextLens: []int32{8, 13},
			BlockTables: [][]int32{{1, 2}, {1, 2, 3, 4}}}, "[{[0 1] 1}]", 0},
		{"context of one page", Batch{QueryStart: decode(2), ContextLens: []int32{4, 13},
			BlockTables: [][]int32{{1}, {1, 2, 3, 4}}}, "[]", 0},
		{"parting buckets", Batch{QueryStart: decode(6), ContextLens: []int32{20, 20, 20, 20, 20, 20},
			BlockTables: [][]int32{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 6}, {1, 2, 7, 8, 9}, {1, 2, 7, 8, 10}, {1, 2, 11, 1, 1}, {1, 2, 3, 12, 13}}},
			"[{[0 1] 4} {[2 3] 4} {[4 5] 2}]", 0},
		{"prefill left out", Batch{QueryStart: []int32{0, 1, 3, 4}, ContextLens: []int32{9, 9, 9},
			BlockTables: [][]int32{{1, 2, 3}, {1, 2, 3}, {1, 2, 4}}}, "[{[0 2] 2}]", 0},
		{"window", Batch{QueryStart: decode(2), ContextLens: []int32{9, 9},
			BlockTables: [][]int32{{1, 2, 3}, {1, 2, 4}}}, "[]", 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.batch
			b.Window = tc.window
			if got := fmt.Sprint(FindSharedGroups(&b, bs)); got != tc.want {
				t.Fatalf("FindSharedGroups = %s, want %s", got, tc.want)
			}
		})
	}
}

// randomSharingBatch is a batch of up to 40 sequences whose tables draw their first pages from a few
// prefixes that part at random pages: decode and prefill rows, contexts that end on or inside a page,
// tables whose first page was given back (−1).
func randomSharingBatch(rng *rand.Rand, blockSize int) Batch {
	n := 1 + rng.IntN(40)
	prefixes := make([][]int32, 1+rng.IntN(4))
	next := int32(0)
	for i := range prefixes {
		for range 1 + rng.IntN(6) {
			prefixes[i] = append(prefixes[i], next)
			next++
		}
	}
	b := Batch{QueryStart: []int32{0}}
	for range n {
		prefix := prefixes[rng.IntN(len(prefixes))]
		table := slices.Clone(prefix[:1+rng.IntN(len(prefix))])
		for range rng.IntN(4) {
			if rng.IntN(2) == 0 {
				table = append(table, int32(rng.IntN(3))) // pages that other tables may hold at this index
			} else {
				table = append(table, next)
				next++
			}
		}
		if rng.IntN(10) == 0 {
			table[0] = -1
		}
		ctx := (len(table)-1)*blockSize + 1 + rng.IntN(blockSize)
		rows := int32(1)
		if rng.IntN(6) == 0 {
			rows = 2
		}
		b.QueryStart = append(b.QueryStart, b.QueryStart[len(b.QueryStart)-1]+rows)
		b.ContextLens = append(b.ContextLens, int32(ctx))
		b.BlockTables = append(b.BlockTables, table)
	}
	return b
}

// TestSharedGrouper: one SharedGrouper reused over batches of growing and shrinking size finds what
// FindSharedGroups finds afresh, leaves the groups of its earlier calls as they were, and allocates
// nothing for a batch in which no two sequences share a page.
func TestSharedGrouper(t *testing.T) {
	const bs = 4
	rng := rand.New(rand.NewPCG(3, 5))
	var g SharedGrouper
	var earlier [][]SharedGroup
	var earlierText []string
	found := 0
	for i := range 500 {
		b := randomSharingBatch(rng, bs)
		got := g.Find(&b, bs)
		if want := FindSharedGroups(&b, bs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("batch %d: SharedGrouper.Find = %v, FindSharedGroups = %v", i, got, want)
		}
		found += len(got)
		earlier, earlierText = append(earlier, got), append(earlierText, fmt.Sprint(got))
	}
	if found == 0 {
		t.Fatal("no batch had a group")
	}
	for i, groups := range earlier {
		if fmt.Sprint(groups) != earlierText[i] {
			t.Fatalf("batch %d's groups changed from %s to %v", i, earlierText[i], groups)
		}
	}
	lone := Batch{QueryStart: []int32{0, 1, 2, 3}, ContextLens: []int32{9, 9, 9}, BlockTables: [][]int32{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}}
	if allocs := testing.AllocsPerRun(100, func() { g.Find(&lone, bs) }); allocs != 0 {
		t.Errorf("%v allocations a batch that shares nothing, want 0", allocs)
	}
}

// TestDecideShared checks the GPU dispatcher's choice on an H200 at Llama-3-8B's heads (32 query heads, 8
// KV heads, head_dim 128, bf16, pages of 16): the shared path for 64 sequences behind 4k, 16k and 64k
// tokens and for 8 behind 1k and 2k, with its prefix pass filling the SMs; the plain path for 8 sequences
// behind 256 tokens, behind 1k where shared.cu's prefix kernel needs the gather launch the Hopper kernel
// does without, two behind a page, a batch without groups, a window, RoPE and a graph's call.
func TestDecideShared(t *testing.T) {
	dev := dispatchDevice("h200")
	call := func(members, shared, suffix, loners int) (DecodeCall, []SharedGroup) {
		c := DecodeCall{NumHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16, DType: BF16}
		var g SharedGroup
		for i := range members {
			c.ContextLens = append(c.ContextLens, int32(shared+suffix+i%7))
			g.Seqs = append(g.Seqs, int32(i))
		}
		for range loners {
			c.ContextLens = append(c.ContextLens, int32(shared+suffix))
		}
		g.Pages = shared / 16
		c.MaxBlocks = ceilDiv(int(longestContext(c.ContextLens)), 16)
		return c, []SharedGroup{g}
	}
	for _, tc := range []struct {
		name                            string
		members, shared, suffix, loners int
		edit                            func(*DecodeCall, *[]SharedGroup)
		want                            bool
	}{
		{"64 behind 4k", 64, 4096, 128, 0, nil, true},
		{"64 behind 16k", 64, 16384, 128, 0, nil, true},
		{"64 behind 64k", 64, 65536, 128, 0, nil, true},
		{"64 behind 16k, W32 prefix kernel", 64, 16384, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) {
			c.Tuning.SharedPrefix = SharedPrefixW32
		}, true},
		{"64 behind 16k, FP8 pages", 64, 16384, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) { c.KVFP8 = true }, true},
		{"64 behind 16k, FP8 pages, W32 prefix kernel", 64, 16384, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) {
			c.KVFP8, c.Tuning.NoSM90Prefix = true, true
		}, true},
		{"64 behind 16k, FP8 pages at head_dim 256", 64, 16384, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) {
			c.KVFP8, c.HeadDim = true, 256
		}, false},
		{"8 behind 2k and loners", 8, 2048, 128, 8, nil, true},
		{"8 behind 1k", 8, 1024, 128, 0, nil, true},
		{"8 behind 1k, shared.cu's prefix kernel and its gather launch", 8, 1024, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) {
			c.Tuning.NoSM90Prefix = true
		}, false},
		{"8 behind 256", 8, 256, 128, 0, nil, false},
		{"2 behind a page", 2, 16, 300, 0, nil, false},
		{"no groups", 64, 4096, 128, 0, func(_ *DecodeCall, g *[]SharedGroup) { *g = nil }, false},
		{"window", 64, 4096, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) { c.Window = 1024 }, false},
		{"rope", 64, 4096, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) { c.RoPE = &DecodeRoPE{QKVCols: 48 * 128} }, false},
		{"graph", 64, 4096, 128, 0, func(c *DecodeCall, _ *[]SharedGroup) { c.Graph = &GraphCall{MinBatch: 33} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, groups := call(tc.members, tc.shared, tc.suffix, tc.loners)
			if tc.edit != nil {
				tc.edit(&c, &groups)
			}
			d := DecideShared(c, groups, dev)
			if d.Use != tc.want {
				t.Fatalf("Use = %v, want %v", d.Use, tc.want)
			}
			if !d.Use {
				return
			}
			p := d.Plan
			if p.PrefixPartitionTokens%64 != 0 || p.SuffixPartitionTokens%16 != 0 || p.SuffixPartitionTokens <= 0 {
				t.Fatalf("plan %+v: partitions not whole tiles and pages", p)
			}
			prefixParts, _ := p.partitions(d.Layout)
			// The prefix kernel's programs make one wave of its programs an SM: no more, and at least half
			// of it where more partitions could be had.
			programs := d.Layout.Virtual() * 8 * prefixParts
			slots := c.sharedPrefixPerSM(dev) * dev.SMs
			if c.KVFP8 {
				want := dev.SMs // the Hopper kernel's one program an SM
				if c.Tuning.NoSM90Prefix {
					want *= 2 // W32's two
				}
				if slots != want {
					t.Fatalf("%d prefix program slots over FP8 pages, want %d", slots, want)
				}
			}
			if programs > slots && prefixParts > 1 {
				t.Fatalf("plan %+v: %d prefix programs for %d program slots", p, programs, slots)
			}
			if 2*programs <= slots && prefixParts < maxSplitPartitions && p.PrefixPartitionTokens > DefaultMinPartitionTokens {
				t.Fatalf("plan %+v: %d prefix programs for %d program slots", p, programs, slots)
			}
			if want := min(sharedPrefixRows/4, tc.members); d.Layout.Members != want {
				t.Fatalf("%d members a virtual sequence, want %d (at most the prefix kernel's %d rows at G = 4)", d.Layout.Members, want, sharedPrefixRows)
			}
			t.Logf("plan %+v, %d virtual sequences, %d prefix partitions", p, d.Layout.Virtual(), prefixParts)
		})
	}
}

// TestDecideSharedLosesGraph: a call whose step would lose its CUDA graph needs more sharing to take the
// shared path (64 sequences behind 256 tokens: eager costs more than the bytes saved; behind 4096: not);
// a step that keeps its graph on the shared path (DecideSharedGraph) pays no such charge, and takes it
// behind 256 tokens too.
func TestDecideSharedLosesGraph(t *testing.T) {
	dev := dispatchDevice("h200")
	for _, tc := range []struct {
		shared              int
		losesGraph, graphed bool
		want                bool
	}{{256, false, false, true}, {256, true, false, false}, {4096, true, false, true}, {256, false, true, true}, {4096, false, true, true}} {
		c := DecodeCall{NumHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16, DType: BF16, LosesGraph: tc.losesGraph}
		g := SharedGroup{Pages: tc.shared / 16}
		for i := range 64 {
			c.ContextLens = append(c.ContextLens, int32(tc.shared+128))
			g.Seqs = append(g.Seqs, int32(i))
		}
		c.MaxBlocks = ceilDiv(tc.shared+128, 16)
		var d SharedDecision
		if tc.graphed {
			contextCap := max(256, nextPowerOfTwo(tc.shared+128))
			c.MaxBlocks, c.Graph = contextCap/16, &GraphCall{MinBatch: 33}
			d = DecideSharedGraph(c, []SharedGroup{g}, dev, 64, contextCap)
			if d.Padded == nil || d.Graph == (SharedGraphKey{}) {
				t.Fatalf("64 behind %d tokens, graphed: no padded layout or key", tc.shared)
			}
		} else {
			d = DecideShared(c, []SharedGroup{g}, dev)
		}
		if d.Use != tc.want {
			t.Errorf("64 behind %d tokens, losing the graph %v, graphed %v: Use = %v, want %v", tc.shared, tc.losesGraph, tc.graphed, d.Use, tc.want)
		}
	}
}

// BenchmarkDecodeShared compares the CPU twin's plain decode (Attend without groups) with the
// shared-prefix one (Attend with FindSharedGroups' groups) for 16 sequences behind a prefix of 2048
// tokens with 64 of their own, Llama-3-8B heads scaled down to 8 query and 2 KV heads of 128, pages of 16.
func BenchmarkDecodeShared(b *testing.B) {
	const batch, prefix, suffix, bs, hq, hkv, d = 16, 2048, 64, 16, 8, 2, 128
	rng := rand.New(rand.NewPCG(1, 2))
	prefixPages, suffixPages := prefix/bs, suffix/bs+1
	c := NewCache(prefixPages+batch*suffixPages, bs, hkv, d)
	for i := range c.K {
		c.K[i], c.V[i] = rng.Float32()*2-1, rng.Float32()*2-1
	}
	batchMeta := &Batch{QueryStart: []int32{0}}
	for s := range batch {
		table := make([]int32, 0, prefixPages+suffixPages)
		for i := range prefixPages {
			table = append(table, int32(i))
		}
		for i := range suffixPages {
			table = append(table, int32(prefixPages+s*suffixPages+i))
		}
		batchMeta.BlockTables = append(batchMeta.BlockTables, table)
		batchMeta.ContextLens = append(batchMeta.ContextLens, prefix+suffix)
		batchMeta.QueryStart = append(batchMeta.QueryStart, int32(s+1))
	}
	q, out := randomSlice(rng, batch*hq*d), make([]float32, batch*hq*d)
	shared := *batchMeta
	shared.Shared = FindSharedGroups(&shared, bs)
	for _, tc := range []struct {
		name  string
		batch *Batch
	}{{"plain", batchMeta}, {"shared", &shared}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(2 * batch * (prefix + suffix) * hkv * d * 4)) // the plain kernels' K/V bytes
			for b.Loop() {
				Attend(out, q, hq, 0.088, c, tc.batch)
			}
		})
	}
}

// TestSharedLayout checks the arrays the GPU reads from a hand-made step: a group of three members at
// two member slots a virtual sequence (the second padded with its first member), a group of two, and a
// sequence in no group; the virtual and suffix block tables; and the panics on a group that names a
// sequence twice or shares its newest token's page.
func TestSharedLayout(t *testing.T) {
	const bs, maxBlocks = 4, 5
	ctx := []int32{13, 10, 9, 17, 20, 6}
	tables := [][]int32{{1, 2, 3, 4}, {1, 2, 5}, {1, 2, 6}, {7, 8, 9, 10, 11}, {7, 8, 9, 12, 13}, {14, 15}}
	groups := []SharedGroup{{Seqs: []int32{0, 1, 2}, Pages: 2}, {Seqs: []int32{3, 4}, Pages: 3}}
	l := NewSharedLayout(ctx, groups, bs, 2)
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"VirtualSeqs", l.VirtualSeqs, []int32{0, 1, 2, 2, 3, 4}},
		{"VirtualLens", l.VirtualLens, []int32{8, 8, 12}},
		{"SeqSlot", l.SeqSlot, []int32{0, 1, 2, 4, 5, -1}},
		{"SuffixStart", l.SuffixStart, []int32{8, 8, 8, 12, 12, 0}},
		{"SuffixLens", l.SuffixLens, []int32{5, 2, 1, 5, 8, 6}},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Each virtual sequence's row is its first member's table (0, 2 and 3), its rest never read.
	if got, want := fmt.Sprint(l.VirtualTables(tables, maxBlocks)), fmt.Sprint([]int32{1, 2, 3, 4, 0, 1, 2, 6, 0, 0, 7, 8, 9, 10, 11}); got != want {
		t.Errorf("VirtualTables = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(l.SuffixTables(tables, bs, maxBlocks)), fmt.Sprint([]int32{
		3, 4, 0, 0, 0, 5, 0, 0, 0, 0, 6, 0, 0, 0, 0, 10, 11, 0, 0, 0, 12, 13, 0, 0, 0, 14, 15, 0, 0, 0}); got != want {
		t.Errorf("SuffixTables = %s, want %s", got, want)
	}
	for _, bad := range [][]SharedGroup{
		{{Seqs: []int32{0, 1}, Pages: 1}, {Seqs: []int32{1, 2}, Pages: 1}}, // sequence 1 twice
		{{Seqs: []int32{1, 2}, Pages: 3}},                                  // 12 tokens of a context of 9
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewSharedLayout(%v) did not panic", bad)
				}
			}()
			NewSharedLayout(ctx, bad, bs, 2)
		}()
	}
}

// TestSharedLayoutPadded checks SharedLayout.Pad and the plan of fixed partitions a CUDA graph runs: the
// padded tails (virtual sequences of no shared tokens whose slots name sequence 0 and whose tables are
// zeros, sequences in no group with a one-token suffix from a zero table), and, on the CPU twin, that
// the padded layout run with more partitions than its lengths need (padding sequences of one token in
// page 0, as a graph's padding rows are) writes every real sequence's output bit for bit as the
// unpadded run does: the same units, partials and merge order, only laid out further apart.
func TestSharedLayoutPadded(t *testing.T) {
	t.Run("tails", func(t *testing.T) {
		const bs, maxBlocks = 4, 5
		ctx := []int32{13, 10, 9, 17, 20, 6}
		tables := [][]int32{{1, 2, 3, 4}, {1, 2, 5}, {1, 2, 6}, {7, 8, 9, 10, 11}, {7, 8, 9, 12, 13}, {14, 15}}
		l := NewSharedLayout(ctx, []SharedGroup{{Seqs: []int32{0, 1, 2}, Pages: 2}, {Seqs: []int32{3, 4}, Pages: 3}}, bs, 2)
		p := l.Pad(l.Batch+3, 2*l.Virtual())
		for _, c := range []struct {
			name      string
			got, want any
		}{
			{"Batch, Members", [2]int{p.Batch, p.Members}, [2]int{9, 2}},
			{"VirtualSeqs", p.VirtualSeqs, []int32{0, 1, 2, 2, 3, 4, 0, 0, 0, 0, 0, 0}},
			{"VirtualLens", p.VirtualLens, []int32{8, 8, 12, 0, 0, 0}},
			{"SeqSlot", p.SeqSlot, []int32{0, 1, 2, 4, 5, -1, -1, -1, -1}},
			{"SuffixStart", p.SuffixStart, []int32{8, 8, 8, 12, 12, 0, 0, 0, 0}},
			{"SuffixLens", p.SuffixLens, []int32{5, 2, 1, 5, 8, 6, 1, 1, 1}},
			{"VirtualTables", p.VirtualTables(tables, maxBlocks), append(l.VirtualTables(tables, maxBlocks), make([]int32, 3*maxBlocks)...)},
			{"SuffixTables", p.SuffixTables(tables, bs, maxBlocks), append(l.SuffixTables(tables, bs, maxBlocks), make([]int32, 3*maxBlocks)...)},
		} {
			if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		}
		if fmt.Sprint(l.SeqSlot) != fmt.Sprint([]int32{0, 1, 2, 4, 5, -1}) {
			t.Errorf("Pad changed its layout: SeqSlot %v", l.SeqSlot)
		}
		// Other groups of the batch (one virtual sequence fewer), padded to the same sizes with the same
		// fixed plan, need the same workspace; without the fixed counts, the partitions follow the lengths.
		other := NewSharedLayout(ctx, []SharedGroup{{Seqs: []int32{0, 1}, Pages: 1}}, bs, 2).Pad(p.Batch, p.Virtual())
		plan := SharedPlan{PrefixPartitionTokens: bs, SuffixPartitionTokens: bs, PrefixPartitions: 3, SuffixPartitions: 5}
		if a, b := SharedWorkspaceBytes(p, plan, 8, 2, 64, 2), SharedWorkspaceBytes(other, plan, 8, 2, 64, 2); a != b {
			t.Errorf("workspace of %d and %d bytes for layouts of one key", a, b)
		}
		plan.PrefixPartitions, plan.SuffixPartitions = 0, 0
		if a, b := SharedWorkspaceBytes(p, plan, 8, 2, 64, 2), SharedWorkspaceBytes(other, plan, 8, 2, 64, 2); a == b {
			t.Errorf("workspace of %d bytes for both layouts without fixed partitions", a)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Pad to fewer virtual sequences did not panic")
				}
			}()
			l.Pad(l.Batch, l.Virtual()-1)
		}()
	})
	for _, sh := range []struct{ group, kvHeads, headDim, blockSize int }{{4, 2, 64, 16}, {1, 2, 64, 8}, {8, 1, 128, 32}} {
		t.Run(fmt.Sprintf("g%d_kv%d_d%d_page%d", sh.group, sh.kvHeads, sh.headDim, sh.blockSize), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.group), 44))
			bs := sh.blockSize
			for _, specs := range [][]sharedSpec{
				{{pages: 1, suffix: []int{1, 1}}},
				{{pages: 40, suffix: suffixes(rng, 19, bs)}},
				{{pages: 5, suffix: suffixes(rng, 9, bs)}, {pages: 0, suffix: []int{7, 3 * bs}}, {pages: 12, suffix: suffixes(rng, 3, bs)}},
			} {
				f, groups := newSharedFixture(t, rng, sh.group, sh.kvHeads, sh.headDim, bs, specs)
				b := f.batch
				batch := len(b.ContextLens)
				for _, members := range []int{2, SharedMembers(sh.group)} {
					for _, plan := range []SharedPlan{
						{PrefixPartitionTokens: bs, SuffixPartitionTokens: bs},
						{PrefixPartitionTokens: 3 * bs, SuffixPartitionTokens: 2 * bs},
						{PrefixPartitionTokens: 1 << 14, SuffixPartitionTokens: 1 << 14},
					} {
						want := f.poisonedOutput()
						DecodeShared(want, f.q, f.numHeads, f.scale, f.cache, b.BlockTables, b.ContextLens, groups, members, plan)

						l := NewSharedLayout(b.ContextLens, groups, bs, members)
						padded := l.Pad(batch+3, 2*l.Virtual()+1)
						fixed := plan
						fixed.PrefixPartitions, fixed.SuffixPartitions = plan.partitions(l)
						fixed.PrefixPartitions += 2
						fixed.SuffixPartitions++
						tables, lens := slices.Clone(b.BlockTables), slices.Clone(b.ContextLens)
						for range 3 {
							tables, lens = append(tables, []int32{0}), append(lens, 1)
						}
						d := f.headDim * f.numHeads
						q := append(slices.Clone(f.q), make([]float32, 3*d)...)
						out := nanSlice(len(q))
						newDecodeStep(out, q, f.numHeads, f.scale, f.cache, tables, lens, "test").runShared(padded, fixed, defaultWorkers())
						for i := range batch * d {
							if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
								t.Fatalf("members %d plan %+v: padded output[%d] = %v, unpadded %v", members, fixed, i, out[i], want[i])
							}
						}
					}
				}
			}
		})
	}
}

// TestDecideSharedGraph checks the bucketing of shared-prefix graph steps: for random steps of 33 to 64
// decodes (one graph bucket) in groups that change from step to step, every step that maps to one
// SharedGraphKey launches the same grids and by-value scalars (planSharedLaunch, the launch of
// CUDAKernels.DecodeShared), over device arrays of the same sizes and a workspace of the same bytes;
// the key's plan covers every step's layout, padded or not; the keys are few.
func TestDecideSharedGraph(t *testing.T) {
	dev := dispatchDevice("h200")
	const rows, minBatch, bs, contextCap = 64, 33, 16, 8192
	prefixBuckets := []int{100, 128, 400} // pages of the steps' shared prefixes
	for _, sh := range []struct {
		name    string
		dt      DType
		headDim int
	}{{"bf16_d128 prefix kernel", BF16, 128}, {"fp32_d128 split-k prefix", FP32, 128}, {"bf16_d256 split-k prefix", BF16, 256}} {
		t.Run(sh.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.headDim), uint64(sh.dt)))
			type seen struct {
				launch string
				sizes  [5]int
				steps  int
			}
			keys := map[SharedGraphKey]*seen{}
			caps := make([]int32, rows)
			for i := range caps {
				caps[i] = contextCap
			}
			for trial := range 400 {
				c := DecodeCall{NumHeads: 32, NumKVHeads: 8, HeadDim: sh.headDim, BlockSize: bs, DType: sh.dt, MaxBlocks: contextCap / bs,
					Graph: &GraphCall{MinBatch: minBatch}}
				n := minBatch + rng.IntN(rows-minBatch+1)
				var groups []SharedGroup
				// A few prompts, each of a fixed prefix (a shape a server would see for many steps), with
				// members joining and leaving; the rest alone.
				prefixes := prefixBuckets
				for s := 0; s < n; {
					size := min(n-s, 1+rng.IntN(24))
					pages := prefixes[rng.IntN(len(prefixes))]
					g := SharedGroup{Pages: pages}
					for range size {
						c.ContextLens = append(c.ContextLens, int32(pages*bs+1+rng.IntN(200)))
						g.Seqs = append(g.Seqs, int32(s))
						s++
					}
					if size > 1 && rng.IntN(4) > 0 {
						groups = append(groups, g)
					} else {
						for i := s - size; i < s; i++ { // loners, of a context of their own
							c.ContextLens[i] = int32(1 + rng.IntN(3000))
						}
					}
				}
				if len(groups) == 0 {
					continue
				}
				d := DecideSharedGraph(c, groups, dev, rows, contextCap)
				if d.Layout == nil || d.Padded == nil {
					t.Fatalf("trial %d: no layout", trial)
				}
				k, l, p := d.Graph, d.Layout, d.Padded
				if d.Plan != k.Plan() || p.Virtual() != k.Virtual || p.Members != k.Members || l.Members != k.Members || p.Batch != rows {
					t.Fatalf("trial %d: plan %+v, padded layout %d×%d of %d rows, for key %+v", trial, d.Plan, p.Virtual(), p.Members, p.Batch, k)
				}
				for _, x := range []*SharedLayout{l, p} {
					if err := d.Plan.check(x, bs); err != nil {
						t.Fatalf("trial %d: %v", trial, err)
					}
				}
				call := c
				call.ContextLens, call.Graph = caps, nil // what the graph's step passes (its rows at the cap)
				sl, err := planSharedLaunch(call, p, d.Plan, dev, sharedPrefixKernel(sh.dt, sh.headDim))
				if err != nil {
					t.Fatalf("trial %d: %v", trial, err)
				}
				// The by-value integers follow the key too (launch, below, holds them).
				if sc := sl.scalars; sc.members != k.Members || sc.prefixBatch != k.Virtual || sc.prefixPartitions != k.PrefixPartitions ||
					sc.suffixPartitions != k.SuffixPartitions || sc.prefixPartitionTokens != k.PrefixPartitionTokens ||
					sc.suffixPartitionTokens != k.SuffixPartitionTokens || sc.prefixRows != k.Members*4 && sharedPrefixKernel(sh.dt, sh.headDim) {
					t.Fatalf("trial %d: launch scalars %+v for key %+v", trial, sc, k)
				}
				launch := fmt.Sprintf("%+v", sl)
				sizes := [5]int{len(p.VirtualSeqs), len(p.SeqSlot), len(p.VirtualLens), len(p.SuffixLens),
					int(SharedWorkspaceBytes(p, d.Plan, c.NumHeads, c.NumKVHeads, c.HeadDim, c.DType.Size()))}
				if sl.workspace != int64(sizes[4]) {
					t.Fatalf("trial %d: launch workspace %d, SharedWorkspaceBytes %d", trial, sl.workspace, sizes[4])
				}
				if prev := keys[k]; prev == nil {
					keys[k] = &seen{launch, sizes, 1}
				} else {
					if prev.launch != launch {
						t.Fatalf("key %+v: launch\n%s\nwant the key's first\n%s", k, launch, prev.launch)
					}
					if prev.sizes != sizes {
						t.Fatalf("key %+v: array and workspace sizes %v, want %v", k, sizes, prev.sizes)
					}
					prev.steps++
				}
			}
			// The plan follows the buckets: a power of two of virtual sequences, a power of two of member
			// slots or the dispatcher's, and for each of those pairs one plan per pair of a shared-prefix
			// bucket (the steps' longest prefixes are one of three) and a suffix bucket (the loners'
			// contexts of up to 3000 tokens: a power of two from 256 to 4096).
			shared := 0
			plans := map[[2]int]map[SharedPlan]bool{}
			for k, s := range keys {
				if s.steps > 1 {
					shared++
				}
				limit := SharedMembersFor(sh.dt, 4, sh.headDim)
				if k.Virtual&(k.Virtual-1) != 0 && k.Virtual != rows || k.Members&(k.Members-1) != 0 && k.Members != limit {
					t.Errorf("key %+v: virtual sequences or members not a power of two (nor the bound %d or %d)", k, rows, limit)
				}
				vm := [2]int{k.Virtual, k.Members}
				if plans[vm] == nil {
					plans[vm] = map[SharedPlan]bool{}
				}
				plans[vm][k.Plan()] = true
			}
			for vm, p := range plans {
				if len(p) > len(prefixBuckets)*5 {
					t.Errorf("%d virtual sequences of %d members: %d plans, want at most %d", vm[0], vm[1], len(p), len(prefixBuckets)*5)
				}
			}
			if shared == 0 {
				t.Fatalf("%d keys, none of more than one step", len(keys))
			}
			// No graph plan for a call DecideShared refuses, nor for one without its graph, of more
			// sequences than the bucket, or of contexts past the cap.
			c := DecodeCall{NumHeads: 32, NumKVHeads: 8, HeadDim: sh.headDim, BlockSize: bs, DType: sh.dt, MaxBlocks: contextCap / bs,
				Graph: &GraphCall{MinBatch: minBatch}}
			g := SharedGroup{Pages: 128}
			for i := range 40 {
				c.ContextLens = append(c.ContextLens, int32(128*bs+1+i))
				g.Seqs = append(g.Seqs, int32(i))
			}
			if d := DecideSharedGraph(c, []SharedGroup{g}, dev, rows, contextCap); d.Padded == nil {
				t.Fatal("the refusals' case has no graph plan")
			}
			for _, bad := range []struct {
				name           string
				edit           func(*DecodeCall)
				rows, capacity int
			}{
				{"no graph", func(c *DecodeCall) { c.Graph = nil }, rows, contextCap},
				{"window", func(c *DecodeCall) { c.Window = 1024 }, rows, contextCap},
				{"rope", func(c *DecodeCall) { c.RoPE = &DecodeRoPE{QKVCols: 48 * sh.headDim} }, rows, contextCap},
				{"batch past the bucket", nil, 32, contextCap},
				{"contexts past the cap", nil, rows, 1024},
				{"cap past the tables", nil, rows, 2 * contextCap},
			} {
				bc := c
				if bad.edit != nil {
					bad.edit(&bc)
				}
				if d := DecideSharedGraph(bc, []SharedGroup{g}, dev, bad.rows, bad.capacity); d.Layout != nil || d.Padded != nil || d.Use {
					t.Errorf("%s: a graph plan (Use %v)", bad.name, d.Use)
				}
			}
			t.Logf("%d keys, %d of them of more than one step", len(keys), shared)
		})
	}
}
