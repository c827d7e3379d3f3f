//go:build cuda

package attention

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
)

// newGPUSharedCase is newGPUDecodeCase over groups that share pages: every group's first pages are the
// same physical pages in its members' tables (specs as newSharedFixture's, decode members only), the
// rest of each table its own; pages scattered over the pool, table padding far out of range. It
// returns the case and the groups (FindSharedGroups's) of the batch.
func newGPUSharedCase(t *testing.T, k *CUDAKernels, rng *rand.Rand, codec elemCodec, group, kvHeads, headDim, blockSize int, specs []sharedSpec) (*gpuDecodeCase, []SharedGroup) {
	t.Helper()
	c := &gpuDecodeCase{codec: codec, numHeads: group * kvHeads, kvHeads: kvHeads, headDim: headDim,
		blockSize: blockSize, scale: float32(1 / math.Sqrt(float64(headDim))), dev: k.Device()}
	numBlocks := 5
	for _, g := range specs {
		numBlocks += g.pages
		for _, n := range g.suffix {
			numBlocks += ceilDiv(n, blockSize) + 1
		}
	}
	perm := rng.Perm(numBlocks)
	take := func() int32 { b := perm[0]; perm = perm[1:]; return int32(b) }
	for _, g := range specs {
		prefix := make([]int32, g.pages)
		for i := range prefix {
			prefix[i] = take()
		}
		for _, n := range g.suffix {
			ctx := g.pages*blockSize + n
			table := append([]int32(nil), prefix...)
			for len(table) < ceilDiv(ctx, blockSize) {
				table = append(table, take())
			}
			c.tables = append(c.tables, table)
			c.lens = append(c.lens, int32(ctx))
			c.maxBlocks = max(c.maxBlocks, len(table))
		}
	}
	c.maxBlocks += 3
	c.cache = NewCache(numBlocks, blockSize, kvHeads, headDim)
	for i := range c.cache.K {
		c.cache.K[i] = rng.Float32()*2 - 1
		c.cache.V[i] = rng.Float32()*2 - 1
	}
	kBytes, vBytes := codec.round(c.cache.K), codec.round(c.cache.V)
	c.q = make([]float32, len(c.lens)*c.numHeads*headDim)
	for i := range c.q {
		c.q[i] = (rng.Float32()*2 - 1) * 3
	}
	qBytes := codec.round(c.q)
	flat := make([]int32, len(c.lens)*c.maxBlocks)
	for s, table := range c.tables {
		row := flat[s*c.maxBlocks : (s+1)*c.maxBlocks]
		for j := range row {
			row[j] = math.MaxInt32 / 2
		}
		copy(row, table)
	}
	c.ref = denseDecodeReference(c.q, c.cache, c.numHeads, float64(c.scale), c.tables, c.lens, 0)
	c.dK, c.dV, c.dQ = c.upload(t, kBytes), c.upload(t, vBytes), c.upload(t, qBytes)
	c.dTab, c.dLn = c.upload(t, cuda.Bytes(flat)), c.upload(t, cuda.Bytes(c.lens))
	c.dOut = c.alloc(t, int64(len(qBytes)))
	b := &Batch{QueryStart: make([]int32, len(c.lens)+1), ContextLens: c.lens, BlockTables: c.tables}
	for i := range b.QueryStart {
		b.QueryStart[i] = int32(i)
	}
	return c, FindSharedGroups(b, blockSize)
}

// sharedArgs uploads layout l's arrays for case c.
func (c *gpuDecodeCase) sharedArgs(t *testing.T, l *SharedLayout, plan SharedPlan) *CUDASharedArgs {
	t.Helper()
	up := func(x []int32) cuda.DevicePtr {
		if len(x) == 0 {
			x = []int32{0}
		}
		return c.upload(t, cuda.Bytes(x))
	}
	return &CUDASharedArgs{Layout: l, Plan: plan,
		VirtualSeqs: up(l.VirtualSeqs), SeqSlot: up(l.SeqSlot), VirtualLens: up(l.VirtualLens), SuffixLens: up(l.SuffixLens),
		VirtualTables: up(l.VirtualTables(c.tables, c.maxBlocks)), SuffixTables: up(l.SuffixTables(c.tables, c.blockSize, c.maxBlocks)),
	}
}

// sharedPaddedCase is a gpuDecodeCase laid out as a CUDA graph's bucket: pad more sequences after the
// case's, of one token in page 0 and zero queries (a graph step's padding rows), with query and output
// buffers of their own for every row.
type sharedPaddedCase struct {
	c        *gpuDecodeCase
	rows     int
	lens     []int32
	dQ, dOut cuda.DevicePtr
}

// padded uploads case c's queries with pad rows of zeros after them, and an output of as many rows.
func (c *gpuDecodeCase) padded(t *testing.T, pad int) *sharedPaddedCase {
	t.Helper()
	p := &sharedPaddedCase{c: c, rows: len(c.lens) + pad, lens: slices.Clone(c.lens)}
	for range pad {
		p.lens = append(p.lens, 1)
	}
	q := append(slices.Clone(c.q), make([]float32, pad*c.numHeads*c.headDim)...)
	p.dQ = c.upload(t, c.codec.round(q))
	p.dOut = c.alloc(t, int64(len(q)*c.codec.size))
	return p
}

// args is the case's call at every row: the padded queries and output, the padding's contexts.
func (p *sharedPaddedCase) args() *CUDADecodeArgs {
	a := p.c.args()
	a.Q, a.Out, a.HostContextLens = p.dQ, p.dOut, p.lens
	return a
}

// output downloads the real sequences' rows of the output, as float32.
func (p *sharedPaddedCase) output(t *testing.T) []float32 {
	t.Helper()
	return p.c.download(t, p.dOut)
}

// poisonOut fills every row of the output with NaN.
func (p *sharedPaddedCase) poisonOut(t *testing.T) {
	poison(t, p.c.dev, p.dOut, int64(p.rows*p.c.numHeads*p.c.headDim*p.c.codec.size))
}

// writeSharedArgs copies layout l's arrays for case c over the device arrays of sh, which must be of
// the same sizes (a layout of the same SharedGraphKey), and makes sh l's.
func (c *gpuDecodeCase) writeSharedArgs(t *testing.T, sh *CUDASharedArgs, l *SharedLayout, plan SharedPlan) {
	t.Helper()
	old := sh.Layout
	if l.Batch != old.Batch || l.Virtual() != old.Virtual() || l.Members != old.Members {
		t.Fatalf("layout of %d sequences, %d×%d virtual over arrays of %d, %d×%d", l.Batch, l.Virtual(), l.Members,
			old.Batch, old.Virtual(), old.Members)
	}
	for _, w := range []struct {
		dst cuda.DevicePtr
		src []int32
	}{{sh.VirtualSeqs, l.VirtualSeqs}, {sh.SeqSlot, l.SeqSlot}, {sh.VirtualLens, l.VirtualLens}, {sh.SuffixLens, l.SuffixLens},
		{sh.VirtualTables, l.VirtualTables(c.tables, c.maxBlocks)}, {sh.SuffixTables, l.SuffixTables(c.tables, c.blockSize, c.maxBlocks)}} {
		if err := c.dev.CopyToDevice(w.dst, cuda.Bytes(w.src)); err != nil {
			t.Fatal(err)
		}
	}
	sh.Layout, sh.Plan = l, plan
}

// fixedPlan is plan with partition counts fixed, extra more than every layout of ls needs.
func fixedPlan(plan SharedPlan, extraPrefix, extraSuffix int, ls ...*SharedLayout) SharedPlan {
	for _, l := range ls {
		pre, suf := plan.partitions(l)
		plan.PrefixPartitions, plan.SuffixPartitions = max(plan.PrefixPartitions, pre), max(plan.SuffixPartitions, suf)
	}
	plan.PrefixPartitions += extraPrefix
	plan.SuffixPartitions += extraSuffix
	return plan
}

// regroup is other groups of the same batch, as a later step of a server finds them: the first group
// split in two (a fork leaves it and others join another), the last sharing a page less where it shares
// more than one.
func regroup(groups []SharedGroup) []SharedGroup {
	var out []SharedGroup
	for i, g := range groups {
		if i == 0 && len(g.Seqs) > 1 {
			half := len(g.Seqs) / 2
			out = append(out, SharedGroup{Seqs: slices.Clone(g.Seqs[:half]), Pages: g.Pages},
				SharedGroup{Seqs: slices.Clone(g.Seqs[half:]), Pages: g.Pages})
			continue
		}
		if i == len(groups)-1 && g.Pages > 1 {
			g.Pages--
		}
		out = append(out, g)
	}
	return out
}

// sameBits fails unless got and want hold the same bits.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: output[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestCUDADecodeShared runs the shared-prefix kernels against the float64 reference and the CPU twin
// (DecodeShared over the same rounded values): bf16, fp16 and fp32, head_dim 64, 128 and 256, groups of
// 1 to 64 sequences, prefixes of 1 page, a page and a few tokens and long, ragged suffixes, several
// groups and sequences in no group, prefix and suffix partitions from one tile to longer than every
// context, output and workspace poisoned with NaN. Every prefix kernel (SharedPrefixVariant) at its
// tiling edges: virtual sequences whose rows (members·G) are not a multiple of a warp's 16 or 32 or of
// a program's 128 rows (G = 3, odd members, more members than one program's rows), prefixes and
// partitions that end inside a 64-token tile or a 32-key softmax step. The CPU twin is compared at the
// dispatcher's member count (SharedMembersFor).
//
// What a CUDA graph of the shared path relies on: every run again padded as a graph's bucket (SharedLayout.Pad
// to 2V+1 virtual sequences and three more sequences, two more prefix partitions and one more suffix
// partition than needed, fixed), its workspace poisoned, must write the same bits; and a graph captured
// for one padded layout, replayed after another layout of the same sizes (other groups: regroup) is
// written over its arrays, must write what a direct run of the other writes.
//
// Over FP8 pages (the e4m3 cases, 16-bit queries, compute capability 8.9 and newer) the same runs take
// shared.cu's FP8 prefix kernel, the Hopper kernel's FP8 form where it is loaded, and the FP8 split-k
// kernels, against the float64 reference over the
// values the codes read back and the CPU twin over the FP8 cache (TestCUDADecodeFP8KV's scales and
// tolerances); head_dim 256, which no FP8 prefix kernel covers, is refused (ErrUnsupported, and
// DecideShared does not plan it).
func TestCUDADecodeShared(t *testing.T) {
	k := gpuKernels(t)
	info := k.dev.Info()
	for _, codec := range codecs {
		for _, sh := range []struct {
			group, kvHeads, headDim, blockSize int
			fp8                                bool
		}{
			{4, 2, 128, 16, false}, {1, 2, 64, 8, false}, {8, 1, 128, 32, false}, {4, 2, 64, 16, false}, {2, 2, 256, 16, false},
			{3, 2, 128, 16, false}, {5, 1, 64, 8, false},
			{4, 2, 128, 16, true}, {1, 2, 64, 8, true}, {8, 1, 128, 32, true}, {3, 2, 128, 16, true}, {2, 2, 256, 16, true},
		} {
			if sh.headDim == wideHeadDim && codec.typ == cuda.Float32 {
				continue
			}
			if sh.fp8 && (codec.typ == cuda.Float32 || info.Major*10+info.Minor < 89) {
				continue
			}
			name := fmt.Sprintf("%s/g%d_kv%d_d%d_page%d", codec.name, sh.group, sh.kvHeads, sh.headDim, sh.blockSize)
			if sh.fp8 {
				name += "_e4m3"
			}
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(sh.group*100+sh.headDim), uint64(codec.typ)))
				bs := sh.blockSize
				for _, tc := range []struct {
					name  string
					specs []sharedSpec
				}{
					{"two, one page", []sharedSpec{{pages: 1, suffix: []int{1, 1}}}},
					{"page and a few tokens", []sharedSpec{{pages: 1, suffix: []int{2, 5, bs - 1, bs, bs + 1}}}},
					{"64 members, long", []sharedSpec{{pages: 4096 / bs, suffix: suffixes(rng, 64, bs)}}},
					{"45 members, prefix inside a tile", []sharedSpec{{pages: 37, suffix: suffixes(rng, 45, bs)}}},
					{"groups and loners", []sharedSpec{
						{pages: 5, suffix: suffixes(rng, 9, bs)},
						{pages: 0, suffix: []int{7, 3 * bs}},
						{pages: 0, suffix: []int{1500}},
						{pages: 70, suffix: suffixes(rng, 17, bs)},
						{pages: 2, suffix: suffixes(rng, 33, bs)},
					}},
				} {
					t.Run(tc.name, func(t *testing.T) {
						c, groups := newGPUSharedCase(t, k, rng, codec, sh.group, sh.kvHeads, sh.headDim, bs, tc.specs)
						if len(groups) == 0 {
							t.Fatal("no shared groups found")
						}
						twinCache := c.cache
						if sh.fp8 {
							twinCache = c.toFP8(t, fp8TestKScale, fp8TestVScale)
							if !sharedPrefixKernel(dtypeOf(codec.typ), sh.headDim) {
								checkSharedFP8Refused(t, k, c, groups)
								return
							}
						}
						g := sh.group
						fit := SharedMembersFor(dtypeOf(codec.typ), g, sh.headDim)
						memberSets := []int{1, fit}
						// Each prefix kernel: shared.cu's (NoSM90Prefix), and the Hopper one where it is loaded;
						// over FP8 pages shared.cu's one FP8 prefix kernel (W32's, whatever the tuning asks)
						// and the Hopper one's FP8 form.
						tunings := []CUDATuning{{SharedPrefix: SharedPrefixR16, NoSM90Prefix: true}}
						if sharedPrefixKernel(dtypeOf(codec.typ), sh.headDim) {
							memberSets = append(memberSets, 3, 2*fit+1) // odd rows; several row blocks
							tunings = nil
							for v := range numSharedPrefixVariants {
								tunings = append(tunings, CUDATuning{SharedPrefix: v, NoSM90Prefix: true})
							}
						}
						if sh.fp8 {
							tunings = tunings[:1]
						}
						if k.kernels[sharedPrefixSM90Name(dtypeOf(codec.typ), sh.headDim, sh.fp8)] != nil {
							tunings = append(tunings, CUDATuning{})
						}
						// The default's passes forked onto the side stream, and serial.
						serial := tunings[len(tunings)-1]
						serial.SharedSerial = true
						tunings = append(tunings, serial)
						const pad = 3
						pc := c.padded(t, pad)
						for _, plan := range []SharedPlan{
							{PrefixPartitionTokens: 64, SuffixPartitionTokens: 64},
							{PrefixPartitionTokens: roundUp(3*64, bs), SuffixPartitionTokens: 128},
							{PrefixPartitionTokens: roundUp(80, bs), SuffixPartitionTokens: 64},
							{PrefixPartitionTokens: 1 << 16, SuffixPartitionTokens: 1 << 16},
						} {
							for _, members := range memberSets {
								l := NewSharedLayout(c.lens, groups, bs, members)
								args := c.sharedArgs(t, l, plan)
								bytes := SharedWorkspaceBytes(l, plan, c.numHeads, c.kvHeads, c.headDim, codec.size)
								ws := c.alloc(t, bytes)
								padded := l.Pad(pc.rows, 2*l.Virtual()+1)
								fixed := fixedPlan(plan, 2, 1, l)
								paddedArgs := c.sharedArgs(t, padded, fixed)
								paddedBytes := SharedWorkspaceBytes(padded, fixed, c.numHeads, c.kvHeads, c.headDim, codec.size)
								paddedWS := c.alloc(t, paddedBytes)
								var twin []float32
								if members == fit {
									twin = make([]float32, len(c.q))
									DecodeShared(twin, c.q, c.numHeads, c.scale, twinCache, c.tables, c.lens, groups, members, plan)
								}
								for _, tu := range tunings {
									poison(t, c.dev, ws, bytes)
									c.poisonOut(t)
									if err := k.decodeShared(nil, c.args(), args, ws, bytes, tu); err != nil {
										t.Fatal(err)
									}
									got := c.output(t)
									what := fmt.Sprintf("prefix kernel %v (sm90 %v, serial %v) members %d plan %+v", tu.SharedPrefix, !tu.NoSM90Prefix, tu.SharedSerial, members, plan)
									poison(t, c.dev, paddedWS, paddedBytes)
									pc.poisonOut(t)
									if err := k.decodeShared(nil, pc.args(), paddedArgs, paddedWS, paddedBytes, tu); err != nil {
										t.Fatalf("%s, padded: %v", what, err)
									}
									sameBits(t, what+", padded (plan "+fmt.Sprintf("%+v", fixed)+") against unpadded", pc.output(t), got)
									if e := relErr(got, c.ref); !(e < codec.tol) {
										t.Fatalf("%s: relative error %.3g against the reference, want < %g", what, e, codec.tol)
									}
									if twin == nil {
										continue // the twin's own layouts are TestDecodeShared's
									}
									if e := relErr(got, toFloat64(twin)); !(e < codec.tol) {
										t.Fatalf("%s: relative error %.3g against the CPU twin, want < %g", what, e, codec.tol)
									}
								}
							}
						}
						// A graph captured for one layout, replayed over another of the same sizes.
						for _, tu := range tunings {
							testSharedGraphReplay(t, k, c, pc, groups, fit, tu)
						}
						// The dispatcher's own plan, where it takes the shared path.
						if d := k.DecideShared(c.args(), groups); d.Use {
							bytes := SharedWorkspaceBytes(d.Layout, d.Plan, c.numHeads, c.kvHeads, c.headDim, codec.size)
							ws := c.alloc(t, bytes)
							c.poisonOut(t)
							if err := k.DecodeShared(nil, c.args(), c.sharedArgs(t, d.Layout, d.Plan), ws, bytes); err != nil {
								t.Fatal(err)
							}
							if e := relErr(c.output(t), c.ref); !(e < codec.tol) {
								t.Fatalf("DecideShared's plan %+v: relative error %.3g, want < %g", d.Plan, e, codec.tol)
							}
						}
					})
				}
			})
		}
	}
}

// checkSharedFP8Refused requires the shared-prefix call of case c (over FP8 pages of a shape no FP8
// prefix kernel covers) refused: DecideShared does not plan it, decodeShared returns ErrUnsupported.
func checkSharedFP8Refused(t *testing.T, k *CUDAKernels, c *gpuDecodeCase, groups []SharedGroup) {
	t.Helper()
	if d := k.DecideShared(c.args(), groups); d.Use || d.Layout != nil {
		t.Fatalf("FP8 pages at head_dim %d: DecideShared planned %+v", c.headDim, d.Plan)
	}
	l := NewSharedLayout(c.lens, groups, c.blockSize, 2)
	plan := SharedPlan{PrefixPartitionTokens: 64, SuffixPartitionTokens: 64}
	bytes := SharedWorkspaceBytes(l, plan, c.numHeads, c.kvHeads, c.headDim, c.codec.size)
	err := k.decodeShared(nil, c.args(), c.sharedArgs(t, l, plan), c.alloc(t, bytes), bytes, CUDATuning{})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("FP8 pages at head_dim %d: decodeShared returned %v, want ErrUnsupported", c.headDim, err)
	}
}

// testSharedGraphReplay captures, on a stream of its own, the shared-prefix call of case c (padded as
// pc) with layout A (groups, members slots) into a CUDA graph, writes layout B (regroup's groups,
// padded to A's sizes, the same fixed plan) over the device arrays, replays the graph and requires B's
// output: the bits of a direct run of B, and the reference. The graph's first replay, over A's own
// arrays, must give the reference too.
func testSharedGraphReplay(t *testing.T, k *CUDAKernels, c *gpuDecodeCase, pc *sharedPaddedCase, groups []SharedGroup, members int, tu CUDATuning) {
	t.Helper()
	bs := c.blockSize
	what := fmt.Sprintf("graph, prefix kernel %v (sm90 %v, serial %v)", tu.SharedPrefix, !tu.NoSM90Prefix, tu.SharedSerial)
	lA, lB := NewSharedLayout(c.lens, groups, bs, members), NewSharedLayout(c.lens, regroup(groups), bs, members)
	v := nextPowerOfTwo(max(lA.Virtual(), lB.Virtual()))
	pA, pB := lA.Pad(pc.rows, v), lB.Pad(pc.rows, v)
	plan := fixedPlan(SharedPlan{PrefixPartitionTokens: roundUp(3*64, bs), SuffixPartitionTokens: 128}, 0, 1, pA, pB)
	bytes := SharedWorkspaceBytes(pA, plan, c.numHeads, c.kvHeads, c.headDim, c.codec.size)
	if b := SharedWorkspaceBytes(pB, plan, c.numHeads, c.kvHeads, c.headDim, c.codec.size); b != bytes {
		t.Fatalf("%s: workspaces of %d and %d bytes for one key", what, bytes, b)
	}
	ws := c.alloc(t, bytes)
	args := c.sharedArgs(t, pB, plan)

	// B directly.
	poison(t, c.dev, ws, bytes)
	pc.poisonOut(t)
	if err := k.decodeShared(nil, pc.args(), args, ws, bytes, tu); err != nil {
		t.Fatalf("%s: B: %v", what, err)
	}
	wantB := pc.output(t)
	if e := relErr(wantB, c.ref); !(e < c.codec.tol) {
		t.Fatalf("%s: B directly: relative error %.3g, want < %g", what, e, c.codec.tol)
	}

	// A captured, then replayed over A's arrays and over B's.
	c.writeSharedArgs(t, args, pA, plan)
	s, err := c.dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	var exec *cuda.GraphExec
	err = c.dev.Do(func() error {
		if err := s.BeginCapture(); err != nil {
			return err
		}
		runErr := k.decodeShared(s, pc.args(), args, ws, bytes, tu)
		g, err := s.EndCapture()
		if err != nil || runErr != nil {
			return errors.Join(runErr, err)
		}
		defer g.Destroy()
		exec, err = g.Instantiate()
		return err
	})
	if err != nil {
		t.Fatalf("%s: capture: %v", what, err)
	}
	defer exec.Destroy()
	replay := func(which string) []float32 {
		t.Helper()
		poison(t, c.dev, ws, bytes)
		pc.poisonOut(t)
		if err := c.dev.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := exec.Launch(s); err != nil {
			t.Fatalf("%s: replay over %s: %v", what, which, err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		out := pc.output(t)
		if e := relErr(out, c.ref); !(e < c.codec.tol) {
			t.Fatalf("%s: replay over %s: relative error %.3g, want < %g", what, which, e, c.codec.tol)
		}
		return out
	}
	replay("A")
	c.writeSharedArgs(t, args, pB, plan)
	sameBits(t, what+": replay over B against B directly", replay("B"), wantB)
}
