package attention

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDecideFP8KV checks the dispatcher's rules for FP8 KV pages (DecodeCall.KVFP8): on the auto path
// the narrow mma tile's _e4m3 kernels at head_dim 64 and 128 and the FMA path's at 256 (where the mma
// path is ErrUnsupported), never the persistent kernel, ErrUnsupported with RoPE, no RoPE folded into
// attention (FoldsRoPE false where the same call over bf16 pages folds it), and a plan sized by one
// byte an element: for every shape of a sweep the plan is the planner's on one-byte elements, and for
// some shapes that differs from the plan over two-byte elements (else the test could not tell).
func TestDecideFP8KV(t *testing.T) {
	dev := dispatchDevice("h200")
	differs := 0
	for _, d := range []int{64, 128, 256} {
		for _, batch := range []int{1, 2, 4, 8, 32, 64, 256} {
			for _, ctx := range []int{100, 1024, 2048, 4096, 8192, 16384, 32768} {
				name := fmt.Sprintf("d%d_b%d_ctx%d", d, batch, ctx)
				lens := make([]int32, batch)
				for i := range lens {
					lens[i] = int32(ctx - i%5)
				}
				c := DecodeCall{ContextLens: lens, MaxBlocks: ceilDiv(ctx, 16), NumHeads: 32, NumKVHeads: 8, HeadDim: d, BlockSize: 16,
					DType: BF16, KVFP8: true}
				got, err := Decide(c, dev)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				k := got.Kernel
				path := PathMMA
				if d == wideHeadDim {
					path = PathFMA
				}
				if !k.KVFP8 || k.Path != path || k.Persistent || !strings.Contains(k.Name, "_bf16_e4m3_d") {
					t.Errorf("%s: kernel %+v, want an %v _e4m3 kernel", name, k, path)
				}
				if got.FoldsRoPE || got.RoPE {
					t.Errorf("%s: folds RoPE", name)
				}
				// The plan on one-byte elements, on the auto path's kernels (the mma tile's 64 tokens hide
				// the element size from every plan of this sweep; the FMA kernels', with NoNarrow, do not).
				for _, noNarrow := range []bool{false, true} {
					call := c
					call.Tuning.NoNarrow = noNarrow
					d2, err := Decide(call, dev)
					if err != nil {
						t.Fatalf("%s: NoNarrow %v: %v", name, noNarrow, err)
					}
					if noNarrow && d2.Kernel.Path != PathFMA {
						t.Errorf("%s: NoNarrow: kernel %s, want the FMA path", name, d2.Kernel.Name)
					}
					grouped, split, _ := call.tile(PathAuto, 4)
					g := gpuSize{sms: dev.SMs, groupedPerSM: dev.ProgramsPerSM(grouped), splitPerSM: dev.ProgramsPerSM(split),
						bw: bandwidthScale(dev.PeakBandwidth)}
					want := gpuPlan(gpuPlanInput(lens, 32, 8, d, 1, 16, g), g)
					if want.Kernel == SplitK {
						want.NumPartitions = ceilDiv(int(longestContext(lens)), want.PartitionTokens)
					}
					if d2.Plan != want {
						t.Errorf("%s: NoNarrow %v: plan %+v, want %+v (one byte an element)", name, noNarrow, d2.Plan, want)
					}
					if gpuPlan(gpuPlanInput(lens, 32, 8, d, 2, 16, g), g).PartitionTokens != want.PartitionTokens {
						differs++
					}
				}

				mma := c
				mma.Path = PathMMA
				if _, err := Decide(mma, dev); d == wideHeadDim && !errors.Is(err, ErrUnsupported) || d != wideHeadDim && err != nil {
					t.Errorf("%s: mma path: %v", name, err)
				}
				if d != wideHeadDim {
					rope := c
					rope.RoPE = &DecodeRoPE{QKVCols: 48 * d}
					if _, err := Decide(rope, dev); !errors.Is(err, ErrUnsupported) {
						t.Errorf("%s: RoPE: %v, want ErrUnsupported", name, err)
					}
				}
			}
		}
	}
	if differs == 0 {
		t.Error("no shape's plan depends on the element size: the sweep cannot tell one byte from two")
	}
	// A call that folds RoPE over bf16 pages does not over FP8 ones.
	c := DecodeCall{ContextLens: []int32{4000}, MaxBlocks: 256, NumHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16, DType: BF16}
	plain, err := Decide(c, dev)
	if err != nil || !plain.FoldsRoPE {
		t.Fatalf("bf16 pages: FoldsRoPE %v, %v; the case needs a call that folds it", plain.FoldsRoPE, err)
	}
	c.KVFP8 = true
	if d, err := Decide(c, dev); err != nil || d.FoldsRoPE {
		t.Errorf("FP8 pages: FoldsRoPE %v, %v", d.FoldsRoPE, err)
	}
}

// TestDecideSharedFP8KV: over FP8 pages the shared-prefix path runs the Hopper prefix kernel's FP8 form
// where it is loaded, else shared.cu's one FP8 prefix kernel (W32's program), so a call over FP8 pages
// takes it where the same call over bf16 pages does, eagerly and graphed, planned as the bf16 call is on
// the same program (the Hopper kernel's one an SM, or W32's two); at head_dim 256, which no prefix
// kernel covers, never.
func TestDecideSharedFP8KV(t *testing.T) {
	dev := dispatchDevice("h200")
	c := DecodeCall{NumHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16, DType: BF16}
	g := SharedGroup{Pages: 4096 / 16}
	for i := range 64 {
		c.ContextLens = append(c.ContextLens, int32(4096+128+i%7))
		g.Seqs = append(g.Seqs, int32(i))
	}
	c.MaxBlocks = ceilDiv(4096+128+7, 16)
	graph := c
	graph.MaxBlocks, graph.Graph = 8192/16, &GraphCall{MinBatch: 33}
	for _, tu := range []CUDATuning{{}, {SharedPrefix: SharedPrefixW32, NoSM90Prefix: true}} {
		c.Tuning, graph.Tuning = tu, tu
		c.KVFP8, graph.KVFP8 = false, false
		want, wantGraph := DecideShared(c, []SharedGroup{g}, dev), DecideSharedGraph(graph, []SharedGroup{g}, dev, 64, 8192)
		if !want.Use || !wantGraph.Use {
			t.Fatalf("bf16 pages (%+v): Use %v, graphed %v; the case needs a call that takes the shared path", tu, want.Use, wantGraph.Use)
		}
		c.KVFP8, graph.KVFP8 = true, true
		if d := DecideShared(c, []SharedGroup{g}, dev); !d.Use || d.Plan != want.Plan || d.Layout.Members != want.Layout.Members {
			t.Errorf("FP8 pages (%+v): Use %v, plan %+v, want bf16's %+v", tu, d.Use, d.Plan, want.Plan)
		}
		if d := DecideSharedGraph(graph, []SharedGroup{g}, dev, 64, 8192); !d.Use || d.Graph != wantGraph.Graph {
			t.Errorf("FP8 pages (%+v), graphed: Use %v, key %+v, want bf16's %+v", tu, d.Use, d.Graph, wantGraph.Graph)
		}
	}
	// The W32 program's partitions are half the Hopper kernel's: two programs an SM.
	hopper, w32 := c, c
	hopper.Tuning, w32.Tuning = CUDATuning{}, CUDATuning{NoSM90Prefix: true}
	if a, b := DecideShared(hopper, []SharedGroup{g}, dev), DecideShared(w32, []SharedGroup{g}, dev); a.Plan.PrefixPartitionTokens != 2*b.Plan.PrefixPartitionTokens {
		t.Errorf("FP8 pages: prefix partitions of %d tokens on the Hopper kernel, %d on W32's; want twice", a.Plan.PrefixPartitionTokens, b.Plan.PrefixPartitionTokens)
	}
	c.HeadDim, graph.HeadDim = wideHeadDim, wideHeadDim
	if d := DecideShared(c, []SharedGroup{g}, dev); d.Use || d.Layout != nil {
		t.Errorf("FP8 pages at head_dim 256: Use %v, layout %v", d.Use, d.Layout != nil)
	}
	if d := DecideSharedGraph(graph, []SharedGroup{g}, dev, 64, 8192); d.Use || d.Layout != nil || d.Padded != nil {
		t.Errorf("FP8 pages at head_dim 256, graphed: Use %v, layout %v", d.Use, d.Layout != nil)
	}
}
