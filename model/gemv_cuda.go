//go:build cuda

package model

import (
	"fmt"

	"github.com/gollm/gollm/internal/cuda"
)

// The skinny matrix product of kernels/gemv.cu: MatMul for decode-sized steps (up to gemvMaxTokens token
// rows) with 16-bit weights, bound by reading the weights once, with the fused epilogues that let a
// decode layer skip the separate SwiGLU and RoPE kernels and the argmax read the logits only as partial
// maxima. Larger steps, float32 weights and shapes it does not cover go to cuBLAS.

// gemvParams mirrors GemvParams in kernels/gemv.cu field for field.
type gemvParams struct {
	Y, X, W, Aux0, Aux1, Aux2, Positions, Slots, InvFreq cuda.DevicePtr
	AttentionScaling                                     float32
	M, N, K                                              int32
	Tiles                                                int32
	Mode                                                 int32
	GroupTiles, GroupStride, PairOffset                  int32
	RB, KS                                               int32
	NumHeads, NumKVHeads, HeadDim                        int32
	SSOut, SSZero, NormOut, NormW, SSIn                  cuda.DevicePtr
	NormCols                                             int32
	Eps                                                  float32
	Accumulate                                           int32
	LateTrigger                                          int32
}

// gemvFold mirrors GemvFold in kernels/gemv.cu: which side of a folded RMSNorm a one-token-tile kernel
// is compiled for.
type gemvFold int

const (
	foldNone gemvFold = iota // no folded norm
	foldOut                  // the product before the norm (writes its input and sums of squares)
	foldIn                   // the product after it (scales by 1/rms)
)

// gemvKernels are the kernel's entry points for one compute dtype, by token tiles (1, 2, 4, 8).
type gemvKernels struct {
	byTiles  [4]*cuda.Function
	maxWarps [4]int // the most warps a block of each may have (registers)
	// pipes are the one-token-tile variants by gemvTuning.Pipe and gemvFold (pipes[0][0] is byTiles[0]);
	// the fold's (bf16 only) are nil for f16.
	pipes        [3][3]*cuda.Function
	pipeMaxWarps [3][3]int
	spin         *cuda.Function
}

// gemvFunction looks up kernel name and readies it for warps·tiles partial tiles of shared memory a
// block, returning it with the most warps a block of it may have (registers).
func gemvFunction(mod *cuda.Module, name string, tiles int) (*cuda.Function, int, error) {
	f, err := mod.Function(name)
	if err != nil {
		return nil, 0, err
	}
	attrs, err := f.Attributes()
	if err != nil {
		return nil, 0, err
	}
	warps := min(16, attrs.MaxThreads/32)
	if err := f.SetMaxDynamicShared(warps * tiles * gemvReduceBytesPerTile); err != nil {
		return nil, 0, err
	}
	return f, warps, nil
}

// loadGemvKernels looks up the kernels for dtype name tn ("bf16" or "f16"; nil kernels for float32, which
// always takes cuBLAS).
func loadGemvKernels(mod *cuda.Module, tn string) (*gemvKernels, error) {
	k := &gemvKernels{}
	var err error
	if k.spin, err = mod.Function("Spin"); err != nil {
		return nil, err
	}
	if tn != "bf16" && tn != "f16" {
		return k, nil
	}
	for i, nt := range []int{1, 2, 4, 8} {
		if k.byTiles[i], k.maxWarps[i], err = gemvFunction(mod, fmt.Sprintf("Gemv_%s_nt%d", tn, nt), nt); err != nil {
			return nil, err
		}
	}
	for fold, suffix := range []string{"", "_fo", "_fi"} {
		if suffix != "" && tn != "bf16" {
			break
		}
		for pipe, ps := range []string{"", "_p1", "_p2"} {
			name := fmt.Sprintf("Gemv_%s_nt1%s%s", tn, ps, suffix)
			if k.pipes[pipe][fold], k.pipeMaxWarps[pipe][fold], err = gemvFunction(mod, name, 1); err != nil {
				return nil, err
			}
		}
	}
	return k, nil
}

// pick returns the kernel for token-tile index ti and fold side f under tuning t, and the most warps a
// block of it may have; nil when this dtype has no such kernel.
func (k *gemvKernels) pick(ti int, f gemvFold, t gemvTuning) (*cuda.Function, int) {
	if ti == 0 {
		pipe := 0
		if t.Pipe > 0 && t.Pipe < len(k.pipes) {
			pipe = t.Pipe
		}
		return k.pipes[pipe][f], k.pipeMaxWarps[pipe][f]
	}
	if f != foldNone {
		return nil, 0
	}
	return k.byTiles[ti], k.maxWarps[ti]
}

// gemvReduceBytesPerTile is the shared memory one warp's partial tile of 16 rows × 8 tokens takes.
const gemvReduceBytesPerTile = 16 * 8 * 4

// gemvEpilogue is what a product fuses after it (the zero value: nothing), and where it stands in the
// layer when that shapes its launch (afterAttention).
type gemvEpilogue struct {
	mode gemvMode
	act  *cudaTensor // gemvSwiGLU, gemvGeGLU: the activation's output
	// gemvRoPE: the layer whose cache pages get k and v.
	layer int
	// afterAttention: the product reads the output of decode attention (O).
	afterAttention bool
	// accumulate: y is the residual stream, which the product adds into (plain mode).
	accumulate bool
	// normOut: the product is the one before a folded RMSNorm (plain mode, accumulating): it also writes
	// the norm's input to the next product and its sums of squares (kernels/gemv.cu, "Folded norm").
	// normIn: the product is the one after it and scales its output by each token's 1/rms.
	normOut, normIn *normFold
}

// normFold is a folded RMSNorm as the products around it need it: the slot of its sums of squares, the
// next fold's slot (which the product before it clears: every slot is then written whole or cleared
// earlier in the same step before it is added into, so that a step that stopped part way leaves nothing
// the next step reads), and the norm's output, gain, epsilon and width.
type normFold struct {
	slot, next int
	dst        *cudaTensor
	w          *cudaWeight
	eps        float32
	cols       int
}

// launchGemv queues the skinny product y[rows][out] = x · wᵀ with epilogue e.
func (b *cudaBackend) launchGemv(y, x *cudaTensor, w *cudaWeight, out, in, rows int, e *gemvEpilogue) error {
	// The kernel trusts these (kernels/gemv.cu, "Folded norm"): one token tile, one side of one fold,
	// and the product before the norm plain and accumulating.
	if (e.normOut != nil || e.normIn != nil) && rows > normMaxTokens || e.normOut != nil && e.normIn != nil ||
		e.normOut != nil && (!e.accumulate || e.mode != gemvPlain) {
		return fmt.Errorf("cuda backend: folded norm at %d rows (at most %d), accumulate %v, mode %d", rows,
			normMaxTokens, e.accumulate, e.mode)
	}
	fold := foldNone
	if e.normOut != nil && !b.tune.diag.normFold(2) {
		fold = foldOut
	}
	if e.normIn != nil && !b.tune.diag.normFold(1) {
		fold = foldIn
	}
	ti := gemvTileIndex(rows)
	fn, maxWarps := b.gemv.pick(ti, fold, b.tune)
	if fn == nil {
		return fmt.Errorf("cuda backend: no skinny product kernel for %d rows with fold %d", rows, fold)
	}
	sh := &b.shape
	p := gemvParams{
		Y: y.ptr, X: x.ptr, W: w.ptr, M: int32(rows), N: int32(out), K: int32(in), Mode: int32(e.mode),
		GroupTiles: 1, GroupStride: 16, PairOffset: 8,
	}
	tiles := (out + 15) / 16
	switch e.mode {
	case gemvSwiGLU, gemvGeGLU:
		inter := out / 2
		tiles = inter / 8
		p.Aux0, p.GroupTiles, p.GroupStride, p.PairOffset = e.act.ptr, int32(tiles), 0, int32(inter)
	case gemvRoPE:
		if b.kvFP8 { // the plan never fuses it (fuseTarget): the epilogue stores compute-dtype pages
			return fmt.Errorf("cuda backend: RoPE epilogue over FP8 KV pages")
		}
		d := sh.HeadDim
		k, v := b.layerKV(e.layer)
		p.Aux0, p.Aux1, p.Aux2 = y.qRot, k, v
		p.Positions, p.Slots, p.InvFreq = b.metaPtr(b.st.offPos), b.layerSlots(e.layer), b.layerInvFreq(e.layer)
		p.AttentionScaling = sh.RopeAttentionScaling
		p.GroupTiles, p.GroupStride, p.PairOffset = int32(d/16), int32(d), int32(d/2)
		p.NumHeads, p.NumKVHeads, p.HeadDim = int32(sh.NumHeads), int32(sh.NumKVHeads), int32(d)
	case gemvArgmax:
		p.Aux0, p.Aux1 = b.argValues, b.argIndices
	}
	p.Tiles = int32(tiles)
	if e.accumulate {
		p.Accumulate = 1
	}
	if n := e.normOut; fold == foldOut {
		p.SSOut, p.SSZero, p.NormOut, p.NormW = b.normSlot(n.slot), b.normSlot(n.next), n.dst.ptr, n.w.ptr
	}
	if e.normOut != nil && !b.tune.diag.normFold(8) {
		p.LateTrigger = 1
	}
	if n := e.normIn; fold == foldIn {
		p.SSIn, p.NormCols, p.Eps = b.normSlot(n.slot), int32(n.cols), n.eps
	}
	t := b.tune
	if e.afterAttention && t.Plan == 0 {
		// The product after decode attention (O) is queued while attention runs, which leaves the
		// memory system idle: with one step a warp, every weight load goes out before its PDL wait
		// (docs/bench/e2e-h100.md; a larger O, one step a warp past one wave, keeps its shape).
		t.Plan = 1
	}
	plan := planGemv(tiles, in/64, b.dev.Info().NumSMs, maxWarps, t)
	p.RB, p.KS = int32(plan.rb), int32(plan.ks)
	warps := plan.rb * plan.ks
	shared := 0
	if plan.ks > 1 {
		shared = warps * (1 << ti) * gemvReduceBytesPerTile
	}

	grid := (tiles + plan.rb - 1) / plan.rb
	return launchDependent(b, fn, cuda.Dim3{X: grid}, cuda.Dim3{X: 32 * warps}, shared, &p)
}
