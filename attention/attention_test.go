package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// seqSpec is one sequence of a test batch: qlen query rows this step, context length ctx after it.
type seqSpec struct{ qlen, ctx int }

// fixture is a random batch written into a paged cache through permuted block tables, with the logical
// K/V kept aside for the dense reference.
type fixture struct {
	numHeads, kvHeads, headDim, blockSize int
	scale                                 float32
	specs                                 []seqSpec
	cache                                 *Cache
	batch                                 *Batch
	q                                     []float32   // [T][numHeads][headDim]
	keys, values                          [][]float32 // per sequence [ctx][kvHeads][headDim], logical order
}

// newFixture builds the batch. Every cache slot is NaN before the write, so a kernel that reads a slot it
// should not (beyond a context, a wrong page) produces NaN; padding tokens written with slot -1 are NaN
// too, so a write that does not skip them is caught.
func newFixture(t *testing.T, rng *rand.Rand, group, kvHeads, headDim, blockSize int, scale float32, specs []seqSpec) *fixture {
	t.Helper()
	f := &fixture{
		numHeads: group * kvHeads, kvHeads: kvHeads, headDim: headDim, blockSize: blockSize,
		scale: scale, specs: specs,
	}
	numBlocks := 3 // spare pages that nobody owns
	for _, s := range specs {
		numBlocks += ceilDiv(s.ctx, blockSize)
	}
	f.cache = NewCache(numBlocks, blockSize, kvHeads, headDim)
	for i := range f.cache.K {
		f.cache.K[i] = float32(math.NaN())
		f.cache.V[i] = float32(math.NaN())
	}
	physical := rng.Perm(numBlocks)
	row := kvHeads * headDim
	b := &Batch{QueryStart: []int32{0}}
	for _, s := range specs {
		table := make([]int32, ceilDiv(s.ctx, blockSize))
		for i := range table {
			table[i] = int32(physical[0])
			physical = physical[1:]
		}
		keys, values := randomSlice(rng, s.ctx*row), randomSlice(rng, s.ctx*row)
		// Write the context in two steps (cached prefix, then this step's tokens) with padding tokens
		// between them, as the model does.
		var k, v []float32
		var slots []int32
		for pos := range s.ctx {
			if pos == s.ctx-s.qlen || pos == 0 {
				slots = append(slots, -1)
				k, v = append(k, nanSlice(row)...), append(v, nanSlice(row)...)
			}
			slots = append(slots, Slot(table, blockSize, pos))
			k = append(k, keys[pos*row:(pos+1)*row]...)
			v = append(v, values[pos*row:(pos+1)*row]...)
		}
		f.cache.Write(k, v, slots)
		f.keys, f.values = append(f.keys, keys), append(f.values, values)
		b.ContextLens = append(b.ContextLens, int32(s.ctx))
		b.BlockTables = append(b.BlockTables, table)
		b.QueryStart = append(b.QueryStart, b.QueryStart[len(b.QueryStart)-1]+int32(s.qlen))
	}
	f.batch = b
	f.q = randomSlice(rng, f.numRows()*f.numHeads*headDim)
	return f
}

func (f *fixture) numRows() int { return int(f.batch.QueryStart[len(f.specs)]) }

// reference is dense causal attention in float64 over the logical K/V, within f.batch.Window when set.
func (f *fixture) reference() []float64 {
	d, hq, g := f.headDim, f.numHeads, f.numHeads/f.kvHeads
	ref := make([]float64, f.numRows()*hq*d)
	for s, spec := range f.specs {
		keys, values := f.keys[s], f.values[s]
		for j := range spec.qlen {
			row := int(f.batch.QueryStart[s]) + j
			pos := spec.ctx - spec.qlen + j
			for h := range hq {
				q := f.q[(row*hq+h)*d : (row*hq+h+1)*d]
				kvh := h / g
				first := 0
				if w := f.batch.Window; w > 0 {
					first = max(0, pos-w+1)
				}
				scores := make([]float64, pos+1-first)
				mx := math.Inf(-1)
				for i := range scores {
					t := first + i
					k := keys[(t*f.kvHeads+kvh)*d:]
					var dot float64
					for i := range d {
						dot += float64(q[i]) * float64(k[i])
					}
					scores[i] = dot * float64(f.scale)
					mx = math.Max(mx, scores[i])
				}
				var sum float64
				for i := range scores {
					scores[i] = math.Exp(scores[i] - mx)
					sum += scores[i]
				}
				o := ref[(row*hq+h)*d : (row*hq+h+1)*d]
				for i, p := range scores {
					t := first + i
					v := values[(t*f.kvHeads+kvh)*d:]
					for i := range d {
						o[i] += p / sum * float64(v[i])
					}
				}
			}
		}
	}
	return ref
}

// poisonedOutput is an output buffer filled with NaN, so an element no kernel writes fails the check.
func (f *fixture) poisonedOutput() []float32 { return nanSlice(f.numRows() * f.numHeads * f.headDim) }

// checkClose fails unless ‖out−ref‖/‖ref‖ < 1e-5 and out has no NaN.
func checkClose(t *testing.T, what string, out []float32, ref []float64) {
	t.Helper()
	checkCloseTol(t, what, out, ref, 1e-5)
}

// checkCloseTol fails unless ‖out−ref‖/‖ref‖ < tol and out has no NaN or infinity.
func checkCloseTol(t *testing.T, what string, out []float32, ref []float64, tol float64) {
	t.Helper()
	var diff, norm float64
	for i, r := range ref {
		o := float64(out[i])
		if math.IsNaN(o) || math.IsInf(o, 0) {
			t.Fatalf("%s: out[%d] = %v", what, i, o)
		}
		diff += (o - r) * (o - r)
		norm += r * r
	}
	rel := math.Sqrt(diff / norm)
	if !(rel < tol) {
		t.Fatalf("%s: relative error %.3g, want < %g", what, rel, tol)
	}
	t.Logf("%s: relative error %.3g", what, rel)
}

func randomSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = rng.Float32()*2 - 1
	}
	return s
}

func nanSlice(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

// shapes is the grid of kernels.md: group sizes (MHA, GQA, MQA-like), head sizes and page sizes.
func shapes() []struct{ group, kvHeads, headDim, blockSize int } {
	var out []struct{ group, kvHeads, headDim, blockSize int }
	kvHeadsFor := map[int]int{1: 3, 2: 2, 4: 2, 6: 2, 8: 2, 16: 1, 32: 1}
	for _, group := range []int{1, 2, 4, 6, 8, 16, 32} {
		for _, headDim := range []int{64, 128} {
			for _, blockSize := range []int{8, 16, 32} {
				out = append(out, struct{ group, kvHeads, headDim, blockSize int }{group, kvHeadsFor[group], headDim, blockSize})
			}
		}
	}
	return out
}

// raggedDecode is a decode batch with the context lengths that break paged kernels: one token, a page
// minus one, a page, a page plus one, and long contexts of many pages.
func raggedDecode(rng *rand.Rand, blockSize int) []seqSpec {
	return []seqSpec{
		{1, 1}, {1, blockSize - 1}, {1, blockSize}, {1, blockSize + 1},
		{1, 300 + rng.IntN(100)}, {1, 2}, {1, 700 + rng.IntN(300)},
	}
}

func TestDecode(t *testing.T) {
	for _, sh := range shapes() {
		name := fmt.Sprintf("g%d_kv%d_d%d_page%d", sh.group, sh.kvHeads, sh.headDim, sh.blockSize)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.group*1000+sh.headDim), uint64(sh.blockSize)))
			for _, scale := range []float32{1 / float32(math.Sqrt(float64(sh.headDim))), 1} {
				f := newFixture(t, rng, sh.group, sh.kvHeads, sh.headDim, sh.blockSize, scale, raggedDecode(rng, sh.blockSize))
				ref := f.reference()
				b := f.batch

				out := f.poisonedOutput()
				DecodeGrouped(out, f.q, f.numHeads, scale, f.cache, b.BlockTables, b.ContextLens)
				checkClose(t, fmt.Sprintf("grouped scale %g", scale), out, ref)

				// One page, a few pages, the default minimum, and longer than every context.
				for _, part := range []int{sh.blockSize, 3 * sh.blockSize, roundUp(DefaultMinPartitionTokens, sh.blockSize), 4096} {
					out := f.poisonedOutput()
					DecodeSplitK(out, f.q, f.numHeads, scale, f.cache, b.BlockTables, b.ContextLens, part)
					checkClose(t, fmt.Sprintf("split-k partition %d scale %g", part, scale), out, ref)
				}

				out = f.poisonedOutput()
				Attend(out, f.q, f.numHeads, scale, f.cache, b)
				checkClose(t, fmt.Sprintf("Attend scale %g", scale), out, ref)
			}
		})
	}
}

// mixedBatch is a step of vLLM's varlen style: decodes with ragged contexts, a fresh prompt, a chunk that
// attends to its cached prefix, and two-row and page-sized chunks.
func mixedBatch(rng *rand.Rand, blockSize int) []seqSpec {
	return []seqSpec{
		{1, 1},
		{blockSize + 3, blockSize + 3},         // whole prompt at once
		{1, blockSize - 1},                     //
		{5 + rng.IntN(15), 300 + rng.IntN(60)}, // chunk after a cached prefix
		{1, 300 + rng.IntN(100)},
		{2, 2},
		{blockSize, 2 * blockSize}, // chunk of exactly a page, page-aligned prefix
		{1, blockSize + 1},
		{40, 41},
		{1, blockSize},
	}
}

func TestAttendMixed(t *testing.T) {
	for i, sh := range shapes() {
		name := fmt.Sprintf("g%d_kv%d_d%d_page%d", sh.group, sh.kvHeads, sh.headDim, sh.blockSize)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.group*1000+sh.headDim), uint64(sh.blockSize)+7))
			scale := float32(1) // sharp softmax on every other shape, the usual scale on the others
			if i%2 == 0 {
				scale = 1 / float32(math.Sqrt(float64(sh.headDim)))
			}
			f := newFixture(t, rng, sh.group, sh.kvHeads, sh.headDim, sh.blockSize, scale, mixedBatch(rng, sh.blockSize))
			ref := f.reference()
			out := f.poisonedOutput()
			Attend(out, f.q, f.numHeads, scale, f.cache, f.batch)
			checkClose(t, fmt.Sprintf("Attend scale %g", scale), out, ref)
		})
	}
}

// TestAttendRoutesThroughPlan checks that Attend's decode rows follow Plan: with many workers and one long
// MQA sequence the plan splits, with one worker it does not, and both match the reference.
func TestAttendRoutesThroughPlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	specs := []seqSpec{{1, 3000}, {4, 40}, {1, 17}}
	for _, tc := range []struct {
		name    string
		workers int
		want    Kernel
	}{
		{"one worker", 1, Grouped},
		{"64 workers", 64, SplitK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, rng, 8, 1, 64, 16, 0.125, specs)
			ref := f.reference()
			out := f.poisonedOutput()
			plan := attend(out, f.q, f.numHeads, f.scale, f.cache, f.batch, tc.workers, nil)
			if plan.Kernel != tc.want {
				t.Fatalf("plan %+v, want kernel %v", plan, tc.want)
			}
			checkClose(t, fmt.Sprintf("attend with %+v", plan), out, ref)
		})
	}
}

func TestCacheWrite(t *testing.T) {
	c := NewCache(4, 8, 2, 4)
	row := c.NumKVHeads * c.HeadDim
	k := []float32{}
	v := []float32{}
	for i := range 3 * row {
		k = append(k, float32(i+1))
		v = append(v, -float32(i+1))
	}
	c.Write(k, v, []int32{17, -1, 3})
	for slot := range c.NumSlots() {
		var want float32
		switch slot {
		case 17:
			want = 1
		case 3:
			want = float32(2*row + 1)
		}
		if got := c.K[slot*row]; got != want {
			t.Errorf("K at slot %d = %v, want %v", slot, got, want)
		}
		if got := c.V[slot*row+row-1]; want != 0 && got != -(want+float32(row-1)) {
			t.Errorf("V at slot %d ends with %v, want %v", slot, got, -(want + float32(row-1)))
		}
	}
	if got := Slot([]int32{3, 1}, 8, 9); got != 9 {
		t.Errorf("Slot = %d, want 9", got)
	}
	if got := Slot([]int32{3, 1}, 8, 7); got != 31 {
		t.Errorf("Slot = %d, want 31", got)
	}
}

func TestCacheWriteOutOfRangePanics(t *testing.T) {
	c := NewCache(2, 4, 1, 2)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for slot beyond the cache")
		}
	}()
	c.Write(make([]float32, 2), make([]float32, 2), []int32{8})
}

// TestLargeLogits uses scores spread over hundreds (scale 8 on unit-range inputs), where exp without
// the running max overflows float32: every algorithm must keep its exponents at or below zero. The
// tolerance is 1e-4 because a float32 dot product of magnitude ~100 carries an absolute error of ~1e-5,
// which the softmax turns into a relative error of the same size.
func TestLargeLogits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	f := newFixture(t, rng, 4, 2, 128, 16, 8, append(raggedDecode(rng, 16), seqSpec{40, 400}))
	ref := f.reference()
	b := f.batch
	decode := &Batch{QueryStart: b.QueryStart[:len(b.ContextLens)], ContextLens: b.ContextLens[:len(b.ContextLens)-1],
		BlockTables: b.BlockTables[:len(b.ContextLens)-1]}
	numDecode := len(decode.ContextLens)
	decodeRef := ref[:numDecode*f.numHeads*f.headDim]
	for _, tc := range []struct {
		name string
		run  func(out []float32)
		ref  []float64
	}{
		{"grouped", func(out []float32) {
			DecodeGrouped(out, f.q, f.numHeads, f.scale, f.cache, decode.BlockTables, decode.ContextLens)
		}, decodeRef},
		{"split-k", func(out []float32) {
			DecodeSplitK(out, f.q, f.numHeads, f.scale, f.cache, decode.BlockTables, decode.ContextLens, 32)
		}, decodeRef},
		{"Attend with a prefill chunk", func(out []float32) { Attend(out, f.q, f.numHeads, f.scale, f.cache, b) }, ref},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := f.poisonedOutput()
			tc.run(out)
			checkClose(t, tc.name, out[:len(tc.ref)], tc.ref)
		})
	}
}

// TestPrefillQueryTiles covers chunks longer than one prefill unit's query tile (64/G rows), so that
// later tiles start mid-chunk and mid-page, with and without a cached prefix.
func TestPrefillQueryTiles(t *testing.T) {
	for _, group := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("g%d", group), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(group), 9))
			specs := []seqSpec{{150, 150}, {1, 77}, {131, 181}}
			f := newFixture(t, rng, group, 2, 64, 16, 0.125, specs)
			ref := f.reference()
			out := f.poisonedOutput()
			Attend(out, f.q, f.numHeads, f.scale, f.cache, f.batch)
			checkClose(t, "Attend", out, ref)
		})
	}
}

// slide makes f's batch attend within a window of w positions, as a KV pool that gives back the pages
// behind every window would leave it: the K/V of every position before the first one the step's
// queries attend to become NaN, and the block table entries of pages holding only such positions −1,
// so a kernel that reads one of them fails (NaN output, or an index panic).
func (f *fixture) slide(w int) {
	f.batch.Window = w
	row := f.kvHeads * f.headDim
	for s, spec := range f.specs {
		first := max(0, spec.ctx-spec.qlen-w+1) // the step's first query's first key
		table := append([]int32(nil), f.batch.BlockTables[s]...)
		for pos := range first {
			slot := int(Slot(table, f.blockSize, pos))
			copy(f.cache.K[slot*row:(slot+1)*row], nanSlice(row))
			copy(f.cache.V[slot*row:(slot+1)*row], nanSlice(row))
		}
		for i := range first / f.blockSize {
			table[i] = -1
		}
		f.batch.BlockTables[s] = table
	}
}

// windowBatch mixes decodes and chunks around a window of w positions: contexts shorter than it, as long,
// one and many pages longer, chunks that start inside it or beyond it, and a fresh prompt longer than it.
func windowBatch(w, blockSize int) []seqSpec {
	return []seqSpec{
		{1, 1}, {1, w}, {1, w + 1}, {1, w + blockSize + 3}, {1, 5*w + 7},
		{3, w + 2}, {blockSize + 1, 4*w + blockSize}, {2 * w, 2 * w}, {w + 5, 3*w + 5},
		{1, max(1, w-1)},
	}
}

// TestAttendWindow checks sliding-window attention (each query sees its last W positions) for windows of
// one token, under a page, a page, over a page and many pages, on decodes and prefill chunks, through the
// grouped and split-k decode kernels (forced, with partitions of one and several pages) and the plan's
// own choice, against the dense reference; the pages behind every window are poisoned and unlisted.
func TestAttendWindow(t *testing.T) {
	for _, sh := range []struct{ group, kvHeads, headDim, blockSize int }{{1, 2, 64, 16}, {4, 2, 64, 8}, {8, 1, 128, 16}, {3, 2, 32, 32}} {
		for _, w := range []int{1, sh.blockSize - 1, sh.blockSize, sh.blockSize + 1, 3*sh.blockSize + 5, 100} {
			name := fmt.Sprintf("g%d_kv%d_d%d_page%d_window%d", sh.group, sh.kvHeads, sh.headDim, sh.blockSize, w)
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(sh.group*100+sh.blockSize)))
				f := newFixture(t, rng, sh.group, sh.kvHeads, sh.headDim, sh.blockSize, 0.3, windowBatch(w, sh.blockSize))
				f.slide(w)
				ref := f.reference()
				maxSpan := 5*w + 7 + sh.blockSize
				plans := []*DecodePlan{nil, {Kernel: Grouped, NumPartitions: 1}}
				for _, part := range []int{sh.blockSize, 3 * sh.blockSize} {
					plans = append(plans, &DecodePlan{Kernel: SplitK, PartitionTokens: part, NumPartitions: ceilDiv(maxSpan, part)})
				}
				for _, workers := range []int{1, 64} {
					for _, plan := range plans {
						out := f.poisonedOutput()
						got := attend(out, f.q, f.numHeads, f.scale, f.cache, f.batch, workers, plan)
						checkClose(t, fmt.Sprintf("%d workers, plan %+v", workers, got), out, ref)
					}
				}
			})
		}
	}
}

// TestPlanReadsTheWindow: a decode of a long context through a short window is planned as the pages it
// reads, not as its context: one 128k-token MQA sequence splits across many workers without a window and
// stays whole with a window of two pages.
func TestPlanReadsTheWindow(t *testing.T) {
	st := &step{c: &Cache{BlockSize: 16, NumKVHeads: 1, HeadDim: 64}, numHeads: 8, group: 8,
		dec: decodeSeqs{ctx: []int32{131072}}}
	if p := Plan(st.planInput(64)); p.Kernel != SplitK {
		t.Fatalf("no window: plan %+v, want split-k", p)
	}
	st.window = 32
	in := st.planInput(64)
	if got := in.ContextLens[0]; got != 32 {
		t.Errorf("window 32 at context 131072: plan input context %d, want the 32 tokens of its two pages", got)
	}
	if p := Plan(in); p.Kernel != Grouped {
		t.Errorf("window 32: plan %+v, want grouped", p)
	}
	st.window = 33 // three pages: 16 + 16 + the first key's page
	if got := st.planInput(64).ContextLens[0]; got != 48 {
		t.Errorf("window 33 at context 131072: plan input context %d, want 48", got)
	}
}
