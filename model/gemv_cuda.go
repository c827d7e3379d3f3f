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

// gemvMode mirrors GemvMode in kernels/gemv.cu: what the kernel does with a finished tile.
type gemvMode int32

const (
	gemvPlain  gemvMode = iota // y = x · wᵀ
	gemvSwiGLU                 // and act = silu(gate) · up, rows paired (i, I + i)
	gemvRoPE                   // rotate q and k, store q_out and the K/V cache, rows paired (i, i + D/2)
	gemvArgmax                 // and one (max, index) per token and tile of 16 rows
)

// gemvMaxTokens is the largest token count the kernel serves (8 n-tiles of 8 tokens).
const gemvMaxTokens = 64

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

// gemvTuning sets how the kernel's launches are shaped (see planGemv). RB and KS, when positive, force the
// shape (for the benchmarks' sweeps). MaxTokens above zero is the largest step it serves (≤
// gemvMaxTokens); zero turns the kernel off (every product on cuBLAS). NoFuse keeps SwiGLU, RoPE and
// argmax as separate kernels. PDL launches the kernels of model/kernels that wait for their predecessor
// themselves (norm, skinny product, argmax) with programmatic dependent launch, on compute capability 9.0.
//
// Pipe picks the one-token-tile kernel's loop (kernels/gemv.cu): 0 steps of two k-blocks in one register
// set, 1 steps of one k-block in two sets (the next step's loads before this step's mma), 2 steps of two
// in two sets.
type gemvTuning struct {
	MaxTokens int
	RB, KS    int
	NoFuse    bool
	PDL       bool
	Pipe      int
	// Plan picks planGemv's rule: 0 at least four k-blocks a warp, 1 at least two (each warp one step),
	// 2 at least two and no shrinking to one wave.
	Plan int
	// Skip, for diagnostics only (BenchmarkCUDADecode's skip variants), leaves the ops of these profile
	// names ("norm", "attention", …) out of the step: the results are wrong, the time is the step's
	// without them (a folded norm has no kernel to leave out).
	Skip []string
	// Gemm sends products of MaxTokens+1 … gemvMaxTokens rows to the skinny GEMM (kernels/gemm_sm90.cu)
	// instead of cuBLAS; GemmWarps (warpgroups) and GemmKS, when positive, force its launch shape
	// (planGemm), GemmStages its ring's most slots; GemmFlags is gemmParams.Flags (L2 policy, diagnostics).
	Gemm              bool
	GemmWarps, GemmKS int
	GemmStages        int
	GemmFlags         int
	// GemmMinBytes keeps products of fewer weight bytes on cuBLAS, GemmSwiGLUMinBytes gate/up products
	// (whose SwiGLU the GEMM would fuse); PDLRows, when positive, replaces pdlMaxRows (the largest step
	// launched with programmatic dependent launch).
	GemmMinBytes       int64
	GemmSwiGLUMinBytes int64
	PDLRows            int
	// NoNormFold keeps the RMSNorm between two skinny products a kernel of its own (see normOp).
	// NormFoldDiag, for diagnostics only (wrong results): bit 1 the product after a folded norm does not
	// read the sums of squares, bit 2 the product before it writes neither them nor the norm's input, bit
	// 4 the norm's kernel runs as well, bit 8 the product before it lets the next launch early.
	NoNormFold   bool
	NormFoldDiag int
	// AttnPartition, for experiments, overrides the plan of a graph step's decode attention: > 0 split-k
	// partitions of that many tokens, < 0 the grouped kernel.
	AttnPartition int
	// NoAttnRoPE keeps the RoPE kernel in decode steps whose Q/K/V product does not fuse it (9-64 rows):
	// by default decode attention rotates the queries and writes the newest K/V row itself
	// (attention.CUDARoPE).
	NoAttnRoPE bool
	// SplitK and SplitRows set splitOf: SplitK < 0 no product is split, > 0 the k parts, 0 the default
	// rule; SplitRows (with SplitK 0) the O and down products' output rows in halves whatever their size.
	SplitK    int
	SplitRows bool
}

// defaultGemvTuning is what a backend starts with: the skinny kernel up to 8 tokens (one token tile; from
// 16 tokens on cuBLAS is as fast or faster at the large matrices, BenchmarkCUDAGemv on the H100), fused
// epilogues, programmatic dependent launch; from 9 to 64 tokens the skinny GEMM for the products of at
// least 128 MB of weights (the LM heads), where it is as fast as cuBLAS or faster (BenchmarkCUDAGemm), and
// for the gate/up products of at least 64 MB, whose SwiGLU it fuses (Llama-3-8B's and Llama-3.2-1B's:
// BenchmarkCUDADecode), cuBLAS for the others (Q/K/V, O, down), where it is slower
// (docs/bench/gemm-h100.md).
var defaultGemvTuning = gemvTuning{MaxTokens: 8, PDL: true, Gemm: true, GemmMinBytes: 128 << 20,
	GemmSwiGLUMinBytes: 64 << 20}

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

// gemvTileIndex maps a token count to the kernel variant: 0 for ≤ 8 tokens, 1 for ≤ 16, 2 for ≤ 32, 3
// for ≤ 64.
func gemvTileIndex(rows int) int {
	switch {
	case rows <= 8:
		return 0
	case rows <= 16:
		return 1
	case rows <= 32:
		return 2
	}
	return 3
}

// gemvShape is the launch shape of one product: rb row tiles per block, ks warps per tile along k.
type gemvShape struct{ rb, ks int }

// gemvWaveWarps is how many of the kernel's warps one SM holds at once (80 registers a thread for one
// token tile: 25 warps; a little less for the larger tiles).
const gemvWaveWarps = 24

// planGemv shapes a launch over tiles row tiles and kBlocks blocks of 64 along k on sms SMs, at most
// maxWarps warps a block: one row tile a block (rb = 1), split along k over ks warps, ks a power of two
// up to 16 that leaves each warp at least 4 k-blocks. When that grid is between one and four waves of
// the GPU, ks shrinks until it fits in one (a second, partial wave costs more than the shorter k-loops
// win); beyond four waves the tail is small. Measured on the H100 (BenchmarkCUDAGemv, 2026-11-22): within
// 2% of the best shape of the sweep at one to eight tokens for every decode product of Llama-3.2-1B and
// Llama-3-8B.
func planGemv(tiles, kBlocks, sms, maxWarps int, t gemvTuning) gemvShape {
	if t.RB > 0 && t.KS > 0 && t.RB*t.KS <= maxWarps {
		return gemvShape{rb: t.RB, ks: min(t.KS, max(1, kBlocks))}
	}
	perWarp := 4
	if t.Plan > 0 {
		perWarp = 2
	}
	ks := 1
	for ks < 16 && ks*2 <= maxWarps && ks*2*perWarp <= kBlocks {
		ks *= 2
	}
	wave := sms * gemvWaveWarps
	if t.Plan < 2 && tiles*ks > wave && tiles*ks < 4*wave {
		for ks > 1 && tiles*ks > wave {
			ks /= 2
		}
	}
	return gemvShape{rb: 1, ks: ks}
}

// gemvEpilogue is what a product fuses after it (the zero value: nothing), and where it stands in the
// layer when that shapes its launch (afterAttention).
type gemvEpilogue struct {
	mode gemvMode
	act  *cudaTensor // gemvSwiGLU: the SwiGLU output
	// gemvRoPE: the layer whose cache pages get k and v.
	layer int
	// afterAttention: the product reads the output of decode attention (O).
	afterAttention bool
	// accumulate: y is the residual stream, which the product adds into (plain mode).
	accumulate bool
	// normOut: the product is the one before a folded RMSNorm (plain mode, accumulating): it also writes
	// the norm's input to the next product and its sums of squares (kernels/gemv.cu, "Folded norm").
	// normIn: the product is the one after it and scales its output by each token's 1/rms.
	normOut, normIn *normOp
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
	if e.normOut != nil && b.tune.NormFoldDiag&2 == 0 {
		fold = foldOut
	}
	if e.normIn != nil && b.tune.NormFoldDiag&1 == 0 {
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
	case gemvSwiGLU:
		inter := out / 2
		tiles = inter / 8
		p.Aux0, p.GroupTiles, p.GroupStride, p.PairOffset = e.act.ptr, int32(tiles), 0, int32(inter)
	case gemvRoPE:
		d := sh.HeadDim
		p.Aux0, p.Aux1, p.Aux2 = y.qRot, b.kCache[e.layer], b.vCache[e.layer]
		p.Positions, p.Slots, p.InvFreq = b.metaPtr(b.st.offPos), b.metaPtr(b.st.offSlots), b.invFreq
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
		p.SSOut, p.SSZero, p.NormOut, p.NormW = b.normSlot(n.index), b.normSlot((n.index+1)%len(b.norms)), n.dst.ptr, n.w.ptr
	}
	if e.normOut != nil && b.tune.NormFoldDiag&8 == 0 {
		p.LateTrigger = 1
	}
	if n := e.normIn; fold == foldIn {
		p.SSIn, p.NormCols, p.Eps = b.normSlot(n.index), int32(n.cols), n.eps
	}
	t := b.tune
	if e.afterAttention && t.Plan == 0 {
		// The product after decode attention (O) is queued while attention runs, which takes a few µs
		// and leaves the memory system idle: with one step a warp, every weight load goes out before
		// its PDL wait (Llama-3.2-1B decode step at batch 1 on the H100: 1.119 → 1.097 ms; Llama-3-8B's
		// O keeps its shape, one step a warp would not fit in one wave).
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

// launchDependent queues f on the backend's stream, with programmatic dependent launch when the backend
// uses it: only for the kernels of model/kernels that call pdl_wait before touching their predecessor's
// data (all but Embed, the first of a step, which follows the metadata copy).
func launchDependent[P any](b *cudaBackend, f *cuda.Function, grid, block cuda.Dim3, shared int, p *P) error {
	if b.pdlNow() {
		return cuda.LaunchPDL(f, grid, block, shared, b.stream, p)
	}
	return cuda.Launch(f, grid, block, shared, b.stream, p)
}

// pdlMaxRows is the largest step (rows, a graph's bucket) launched with programmatic dependent launch.
const pdlMaxRows = 8

// pdlNow reports whether this step's launches through launchDependent (and package attention's decode
// kernels, through CUDADecodeArgs.Dependent) use programmatic dependent launch.
func (b *cudaBackend) pdlNow() bool { return b.pdlStep && b.usePDL() }

// usePDL reports whether the backend may use programmatic dependent launch: asked for, on compute
// capability 9.0 (whose SASS in the fat binary waits; PTX JIT-compiled for another GPU would not), and not
// switched off after a graph capture with it failed.
func (b *cudaBackend) usePDL() bool {
	info := b.dev.Info()
	return b.tune.PDL && !b.pdlOff && info.Major == 9 && info.Minor == 0
}

// gemvServes reports whether the skinny kernel computes a product of rows token rows over in columns.
func (b *cudaBackend) gemvServes(rows, in int) bool {
	return b.gemv.byTiles[0] != nil && rows > 0 && rows <= min(b.tune.MaxTokens, gemvMaxTokens) && in%64 == 0
}
