//go:build cuda

package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
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

// TestCUDADecodeShared runs the shared-prefix kernels against the float64 reference and the CPU twin
// (DecodeShared over the same rounded values): bf16, fp16 and fp32, head_dim 64, 128 and 256, groups of
// 1 to 64 sequences, prefixes of 1 page, a page and a few tokens and long, ragged suffixes, several
// groups and sequences in no group, prefix and suffix partitions from one tile to longer than every
// context, output and workspace poisoned with NaN. Every prefix kernel (SharedPrefixVariant) at its
// tiling edges: virtual sequences whose rows (members·G) are not a multiple of a warp's 16 or 32 or of
// a program's 128 rows (G = 3, odd members, more members than one program's rows), prefixes and
// partitions that end inside a 64-token tile or a 32-key softmax step. The CPU twin is compared at the
// dispatcher's member count (SharedMembersFor).
func TestCUDADecodeShared(t *testing.T) {
	k := gpuKernels(t)
	for _, codec := range codecs {
		for _, sh := range []struct{ group, kvHeads, headDim, blockSize int }{
			{4, 2, 128, 16}, {1, 2, 64, 8}, {8, 1, 128, 32}, {4, 2, 64, 16}, {2, 2, 256, 16},
			{3, 2, 128, 16}, {5, 1, 64, 8},
		} {
			if sh.headDim == wideHeadDim && codec.typ == cuda.Float32 {
				continue
			}
			name := fmt.Sprintf("%s/g%d_kv%d_d%d_page%d", codec.name, sh.group, sh.kvHeads, sh.headDim, sh.blockSize)
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
						g := sh.group
						fit := SharedMembersFor(dtypeOf(codec.typ), g, sh.headDim)
						memberSets := []int{1, fit}
						// Each prefix kernel: shared.cu's (NoSM90Prefix), and the Hopper one where it is loaded.
						tunings := []CUDATuning{{SharedPrefix: SharedPrefixR16, NoSM90Prefix: true}}
						if sharedPrefixKernel(dtypeOf(codec.typ), sh.headDim) {
							memberSets = append(memberSets, 3, 2*fit+1) // odd rows; several row blocks
							tunings = nil
							for v := range numSharedPrefixVariants {
								tunings = append(tunings, CUDATuning{SharedPrefix: v, NoSM90Prefix: true})
							}
						}
						if k.kernels[sharedPrefixSM90Name(dtypeOf(codec.typ), sh.headDim)] != nil {
							tunings = append(tunings, CUDATuning{})
						}
						for _, plan := range []SharedPlan{{64, 64}, {roundUp(3*64, bs), 128}, {roundUp(80, bs), 64}, {1 << 16, 1 << 16}} {
							for _, members := range memberSets {
								l := NewSharedLayout(c.lens, groups, bs, members)
								args := c.sharedArgs(t, l, plan)
								bytes := SharedWorkspaceBytes(l, plan, c.numHeads, c.kvHeads, c.headDim, codec.size)
								ws := c.alloc(t, bytes)
								var twin []float32
								if members == fit {
									twin = make([]float32, len(c.q))
									DecodeShared(twin, c.q, c.numHeads, c.scale, c.cache, c.tables, c.lens, groups, members, plan)
								}
								for _, tu := range tunings {
									poison(t, c.dev, ws, bytes)
									c.poisonOut(t)
									if err := k.decodeShared(nil, c.args(), args, ws, bytes, tu); err != nil {
										t.Fatal(err)
									}
									got := c.output(t)
									what := fmt.Sprintf("prefix kernel %v (sm90 %v) members %d plan %+v", tu.SharedPrefix, !tu.NoSM90Prefix, members, plan)
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
