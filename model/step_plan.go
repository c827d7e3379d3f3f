package model

import (
	"math"

	"github.com/gollm/gollm/attention"
)

// The CUDA step's plan. The CUDA backend records a step's ops as data (stepOp: what each reads and
// writes, by identity), and planStep, a pure function of those ops, the rows they run at and the
// device's facts (stepFacts), decides every launch: which kernel serves each product (the skinny
// product, the skinny GEMM or cuBLAS, planMatMul; an FP8 weight's, fp8Path), what fuses into it (SwiGLU, RoPE and the argmax as
// its epilogue, the residual add as its accumulation, the RMSNorms folded into the products around
// them), how cuBLAS products are split, which ops then have nothing left to launch, and the decode
// attention's decision (attention.Decide, with the rotary embedding where it takes it). The executor
// (exec_cuda.go) runs the plan and decides nothing. It builds and is tested without CUDA
// (step_plan_test.go). A new kernel or op lands here as a path of planMatMul or a case of planOp, and
// in the executor as the launch of that case.
//
// The measurements behind the rules are in docs/bench/e2e-h100.md and docs/bench/gemm-h100.md.

// The plan's constants.
const (
	// gemvMaxTokens is the most token rows the skinny kernels serve (8 n-tiles of 8 tokens; the GEMM's
	// four 16-token tiles).
	gemvMaxTokens = 64
	// normMaxTokens bounds the steps whose norms fold (NORM_MAX_TOKENS of kernels/gemv.cu: the
	// one-token-tile kernel).
	normMaxTokens = 8
	// splitMaxParts bounds the parts of a product split by k (productSplit).
	splitMaxParts = 4
	// splitRowsMinOut is the fewest output rows of a product split by its output rows rather than by k:
	// halves of fewer rows leave cuBLAS too few blocks, and the k halves' sum costs the norm less there.
	splitRowsMinOut = 4096
	// maxGraphBatch is the largest decode batch run as a CUDA graph (graphBucket).
	maxGraphBatch = 256
	// minGraphContext is the smallest context cap of a graph (a power of two, in tokens).
	minGraphContext = 256
	// splitWorkspaceBytes holds the split-k decode partials; a plan that needs more runs grouped.
	splitWorkspaceBytes = 32 << 20
	// pdlMaxRows is the largest step (rows, a graph's bucket) launched with programmatic dependent
	// launch: it hides launch gaps where kernels are short, but from 16 rows on a kernel with more than
	// one wave of blocks lets its dependent's blocks take SM slots early and wait in them.
	pdlMaxRows = 8
	// mixedDecodeMin is the fewest leading decodes of a mixed step (decodes and prefill chunks) that
	// attention runs on the decode kernels rather than as prefill items: the prefill kernel gives each
	// decode a tile of query rows of which it fills one row a query head, so a decode's pages cost a
	// whole tile's arithmetic there, where the decode kernels read them at the copy bandwidth. Below it
	// the items, which need no launch of their own, are as fast or faster (docs/bench/prefill-h200.md).
	mixedDecodeMin = 64
)

// gemvMode mirrors GemvMode in kernels/gemv.cu: what a product does with a finished tile (its
// epilogue).
type gemvMode int32

const (
	gemvPlain  gemvMode = iota // y = x · wᵀ
	gemvSwiGLU                 // and act = silu(gate) · up, rows paired (i, I + i)
	gemvRoPE                   // rotate q and k, store q_out and the K/V cache, rows paired (i, i + D/2)
	gemvArgmax                 // and one (max, index) per token and tile of 16 rows
	gemvGeGLU                  // and act = gelu_tanh(gate) · up, rows paired (i, I + i)
)

// gemvTuning sets how the step's launches are chosen and shaped. RB and KS, when positive, force the
// skinny product's shape (planGemv; the benchmarks' sweeps). MaxTokens above zero is the largest step
// the skinny product serves (≤ gemvMaxTokens); zero turns it off (every product on cuBLAS). NoFuse keeps
// SwiGLU, RoPE and argmax as separate kernels. PDL launches the kernels of model/kernels that wait for
// their predecessor themselves (norm, skinny product, argmax) with programmatic dependent launch, on
// compute capability 9.0.
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
	// 2 at least two and no shrinking to one wave; MaxKS, when positive, replaces gemvMaxKS (its largest
	// k split).
	Plan  int
	MaxKS int
	// Gemm sends products of MaxTokens+1 … gemvMaxTokens rows to the skinny GEMM (kernels/gemm_sm90.cu)
	// instead of cuBLAS; GemmWarps (warpgroups) and GemmKS, when positive, force its launch shape
	// (planGemm), GemmStages its ring's most slots; GemmFlags is gemmParams.Flags (L2 policy, the
	// kernel's own diagnostic bits).
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
	// NoNormFold keeps the RMSNorm between two skinny products a kernel of its own (see planStep).
	NoNormFold bool
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
	// FP8LtRows is the fewest rows of an FP8 product on cuBLASLt (fp8Path): 0 the default, < 0 never.
	FP8LtRows int
	// FP8NoFuse keeps an FP8 product's input quantization a kernel of its own (QuantizeE4M3) instead of
	// fusing it into the norm or SwiGLU that produces the input (linkOps); FP8NoScaleFold keeps the
	// scaling of cuBLASLt's unscaled sums a pass of its own (ScaleE4M3) where the quantizing norm or
	// SwiGLU after the product could apply them (opPlan.fp8Unscaled).
	FP8NoFuse      bool
	FP8NoScaleFold bool
	// FP8NoOut16 keeps the unscaled gate/up sums float32 where cuBLASLt could write them in bfloat16
	// for the quantizing SwiGLU (opPlan.fp8Out16).
	FP8NoOut16 bool
	// RoPEHeads, when positive, is the heads a block of the RoPE kernel covers (at most ropeMaxHeads)
	// at every row count; 0 the default rule (ropeHeads).
	RoPEHeads int
	// FP8Staged picks the quantizing norm's and SwiGLU's form (fp8FusedForm): 0 the default rule (staged
	// only where no register shape holds the row, and for the SwiGLU over bfloat16 sums of more than
	// fp8StageIn16Rows rows), < 0 never staged, > 0 staged wherever it holds the row.
	FP8Staged int
	// FP8NoGemm keeps FP8 products off the skinny GEMM's e4m3 kernel (fp8Path): cuBLASLt then, as on
	// GPUs without it. FP8GemmRows, when positive, is the most rows it takes (fp8GemmMaxRows by default,
	// at most gemvMaxTokens).
	FP8NoGemm   bool
	FP8GemmRows int
	// MixedDecodeMin, when positive, replaces mixedDecodeMin (the fewest leading decodes of a mixed
	// step that run on the decode kernels); < 0 keeps them in the prefill kernel's items always.
	MixedDecodeMin int

	// diag holds the gollmdiag build's diagnostic switches (diag_on.go); nothing otherwise.
	diag stepDiag
}

// defaultGemvTuning is what a backend starts with: the skinny product up to 8 tokens (one token tile;
// from 16 tokens cuBLAS is as fast or faster at the large matrices), fused epilogues, programmatic
// dependent launch; from 9 to 64 tokens the skinny GEMM for the products of at least 128 MB of weights
// (the LM heads), where it is as fast as cuBLAS or faster, and for the gate/up products of at least 64
// MB, whose SwiGLU it fuses, cuBLAS for the others (Q/K/V, O, down), where it is slower
// (docs/bench/gemm-h100.md).
var defaultGemvTuning = gemvTuning{MaxTokens: 8, PDL: true, Gemm: true, GemmMinBytes: 128 << 20,
	GemmSwiGLUMinBytes: 64 << 20}

// opKind is what a recorded op does: one Backend op.
type opKind uint8

const (
	opEmbed opKind = iota
	opNorm
	opMatMul
	opRoPE
	opAttention
	opSwiGLU
	opGather
	opArgmax
	opQKNorm
	opGeGLU
	opSoftcap
	// opAllReduce sums its tensor over the ranks of a tensor-parallel model (a row-parallel product's
	// partial output, the sharded embedding), in place. It is a barrier to fusion: no link crosses it,
	// so the product before it neither accumulates into the residual nor folds the norm after it.
	opAllReduce
)

// String is the op's name in profiles ("matmul", "norm", …).
func (k opKind) String() string {
	return [...]string{"embed", "norm", "matmul", "rope", "attention", "swiglu", "gather", "argmax", "qknorm", "geglu",
		"softcap", "allreduce"}[k]
}

// tensorID names an activation buffer (its device address): the plan compares them and never reads
// them.
type tensorID uint64

// stepOp is one recorded op of a CUDA step as the plan sees it.
type stepOp struct {
	kind opKind
	// rows is its natural row count, capacity the smallest row capacity of its tensors; graphable: it can
	// run padded to a graph's bucket.
	rows, capacity int
	graphable      bool
	// dst is what it writes (Embed, Norm, MatMul, Attention, SwiGLU, Gather); src what it reads (MatMul's
	// x, RoPE's and Attention's Q/K/V, SwiGLU's gate/up, Gather's and Argmax's source); add and resid a
	// Norm's addend (0: none) and residual stream.
	dst, src, add, resid tensorID
	// MatMul: the weight's out × in; Norm: in is its width; SwiGLU, GeGLU: out is the intermediate size,
	// in the gate/up width; Argmax: in is the logits' width.
	out, in int
	// bias: a MatMul whose weight has a bias, which a kernel of its own adds after the product (the
	// product then takes no epilogue, no accumulation and no norm after it), or decode attention as it
	// rotates the product's output (opPlan.ropeBias).
	bias bool
	// fp8: a MatMul with an FP8 weight (UploadFP8), which runs the FP8 product (fp8Path): its input
	// quantized by the op that produces it or by a kernel of its own, its bias added by the product,
	// nothing else fused into it.
	fp8 bool
	// window: RoPE's and Attention's layer's sliding window (0: none).
	window int
}

// stepFacts is what the plan knows of the device and the model, fixed for a backend's life but for the
// tuning.
type stepFacts struct {
	sms int
	// hidden is the residual stream's width, headDim the attention heads' (a fused RoPE needs a
	// multiple of 16).
	hidden, headDim int
	// gemv: the skinny product exists for the compute dtype (16-bit); gemm: the skinny GEMM is loaded
	// (compute capability 9.0, 16-bit); gemmSwiGLU: the driver encodes the GEMM's SwiGLU weight map.
	gemv, gemm, gemmSwiGLU bool
	// fp8Lt: cuBLASLt's e4m3 GEMM is loaded (FP8 weights on compute capability 8.9 or newer);
	// fp8LtScaled: it applies the row and column scales itself (else ScaleE4M3 or the op after the
	// product does: opPlan.fp8Unscaled).
	fp8Lt, fp8LtScaled bool
	// fp8MMA: the FP8 kernel runs on Hopper's e4m3 mma (kernels/fp8_sm90.cu), which reads the input's
	// codes, not their f16 values.
	fp8MMA bool
	// fp8Gemm: the skinny GEMM's e4m3 kernel is loaded (Hopper: kernels/gemm_sm90.cu).
	fp8Gemm bool
	// fp8In16: the quantizing SwiGLU's bfloat16-input kernels are loaded (16-bit compute: opPlan.fp8Out16).
	fp8In16 bool
	// normFold: the fold kernels exist (bfloat16) and the fold slots are allocated; normSlots is how
	// many folds a step may have.
	normFold  bool
	normSlots int
	// decodeKernels: the decode-attention kernels cover the model's head size, page size and dtype;
	// attn is their device and attnTuning their switches; the attention call's shape is the rest.
	decodeKernels                   bool
	attn                            attention.DecodeDevice
	attnTuning                      attention.CUDATuning
	numHeads, numKVHeads, blockSize int
	attnDType                       attention.DType
	// kvFP8: the KV pages hold e4m3 codes (an FP8 KV cache): only the RoPE kernel writes them (no RoPE
	// epilogue of the Q/K/V product or of decode attention) and decode attention runs its _e4m3 kernels.
	kvFP8 bool
	tune  gemvTuning
}

// stepShape is what the plan knows of the step: whether it is a decode step (one query row a
// sequence), its context lengths (graph: its context cap, every row at it), its block tables' width,
// and whether its launches are dependent (programmatic dependent launch).
type stepShape struct {
	decode      bool
	graph       bool
	contextLens []int32
	contextCap  int
	stride      int
	pdl         bool
	// shared: the step's decode attention runs the shared-prefix algorithm (layers without a window),
	// which does not rotate: the RoPE kernel does.
	shared bool
	// leadDecodes: a step that is not a decode step begins with this many decodes (one query row a
	// sequence, at the end of its context), its first leadDecodes rows and sequences.
	leadDecodes int
}

// inPlace reports whether a Norm op normalises its residual in place, adding nothing (a sublayer's
// output norm: AddRMSNorm(x, x, none, w)).
func (op *stepOp) inPlace() bool { return op.kind == opNorm && op.dst == op.resid && op.add == 0 }

// mixedDecodeMin is the fewest leading decodes of a mixed step that attention runs on the decode
// kernels, at least one (gemvTuning.MixedDecodeMin; math.MaxInt: never).
func (f *stepFacts) mixedDecodeMin() int {
	switch m := f.tune.MixedDecodeMin; {
	case m < 0:
		return math.MaxInt
	case m > 0:
		return m
	}
	return mixedDecodeMin
}

// gemvServes reports whether the skinny product computes a product of rows token rows over in columns.
func (f *stepFacts) gemvServes(rows, in int) bool {
	return f.gemv && rows > 0 && rows <= min(f.tune.MaxTokens, gemvMaxTokens) && in%64 == 0
}

// gemmServes reports whether the skinny GEMM computes a product of rows token rows over in columns: more
// rows than the skinny product serves, at most gemvMaxTokens, in a multiple of gemmChunk, and the GEMM
// loaded and switched on.
func (f *stepFacts) gemmServes(rows, in int) bool {
	return f.gemm && f.tune.Gemm && rows > min(f.tune.MaxTokens, gemvMaxTokens) && rows <= gemvMaxTokens &&
		in%gemmChunk == 0
}

// gemmTakes reports whether the skinny GEMM computes the product of rows rows, out × in weights
// (gemmServes, and at least gemvTuning.GemmMinBytes of weights; GemmSwiGLUMinBytes for a gate/up product
// whose SwiGLU the GEMM's epilogue then does, saving a kernel, where the epilogue serves it: swigluFits,
// a driver that encodes its weight map, and blocks that fit one wave, past which cuBLAS's product and a
// SwiGLU kernel are the faster: Qwen2.5-7B's gate/up product, 296 blocks of two warpgroups). A plain
// product whose plan splits k needs a block for every SM: a narrow product (few output rows over a long
// k, Qwen2.5-7B's down product) cut into fewer blocks streams its weights slower than cuBLAS's split.
// Whole-k plans keep their fewer, wider blocks (planGemm).
func (f *stepFacts) gemmTakes(rows, out, in int, swiglu bool) bool {
	least := f.tune.GemmMinBytes
	if swiglu {
		least = f.tune.GemmSwiGLUMinBytes
	}
	if !f.gemmServes(rows, in) || 2*int64(out)*int64(in) < least {
		return false
	}
	if swiglu {
		return f.gemmSwiGLU && swigluFits(out) &&
			(f.gemmForced() || gemmBlocks(out, planSwiGLU(f.gemmPlan(out, in))) <= f.sms)
	}
	plan := f.gemmPlan(out, in)
	return f.gemmForced() || plan.ks == 1 || gemmBlocks(out, plan)*plan.ks >= f.sms
}

// gemmForced reports whether the tuning forces the GEMM's launch shape (benchmarks, tests).
func (f *stepFacts) gemmForced() bool { return f.tune.GemmWarps > 0 && f.tune.GemmKS > 0 }

// gemmPlan is the GEMM's launch shape of a plain out × in product: planGemm's, or the one the tuning
// forces.
func (f *stepFacts) gemmPlan(out, in int) gemmShape {
	if f.gemmForced() {
		return gemmShape{wg: f.tune.GemmWarps, ks: min(f.tune.GemmKS, in/gemmChunk)}
	}
	return planGemm(out, in/gemmChunk, f.sms)
}

// swigluFits reports whether the GEMM's SwiGLU epilogue serves a gate/up product of out rows: its groups
// of 8 gate rows pair with 8 up rows, so the intermediate size out/2 must be a multiple of 8.
func swigluFits(out int) bool { return out%16 == 0 }

// matmulPath is the kernel that computes a product.
type matmulPath uint8

const (
	pathGemv    matmulPath = iota // the skinny product (kernels/gemv.cu): up to MaxTokens rows, 16-bit weights
	pathGemm                      // the skinny GEMM (kernels/gemm_sm90.cu): up to gemvMaxTokens rows, large products
	pathCuBLAS                    // cuBLAS GemmEx: everything else
	pathFP8                       // an FP8 weight's product (kernels/fp8.cu)
	pathFP8Lt                     // an FP8 weight's product on cuBLASLt's e4m3 GEMM (fp8_cuda.go)
	pathFP8Gemm                   // an FP8 weight's product on the skinny GEMM's e4m3 kernel (kernels/gemm_sm90.cu)
)

// fp8 reports whether the path is an FP8 weight's (runFP8 runs it).
func (p matmulPath) fp8() bool { return p == pathFP8 || p == pathFP8Lt || p == pathFP8Gemm }

func (p matmulPath) String() string {
	return [...]string{"gemv", "gemm", "cublas", "fp8", "fp8-cublaslt", "fp8-gemm"}[p]
}

// fp8KernelMaxRows is the most token rows an FP8 product runs on the FP8 kernel by default (fp8Path).
// The kernel streams the weights once for all its rows, but each warp reads every one of its token rows
// again (and, off Hopper, converts them); past a handful of rows cuBLASLt's e4m3 GEMM is the faster of
// the two even with the scaling pass it needs, on Hopper's e4m3 mma too (docs/bench/fp8-h200.md).
const fp8KernelMaxRows = 8

// fp8TileRows is the token rows of one tile of the FP8 kernel (kernels/fp8.cu, MatMulE4M3_nt1): up to
// that many rows it runs one tile, whose input it reads as f16 values.
const fp8TileRows = 8

// fp8ReadsX16 reports whether an FP8 product on path at rows token rows reads its input as f16 values
// (the FP8 kernel's single token tile, kernels/fp8.cu) rather than as e4m3 codes.
func (f *stepFacts) fp8ReadsX16(path matmulPath, rows int) bool {
	return readsX16(path, rows, f.fp8MMA)
}

// readsX16 is fp8ReadsX16's rule, given whether the kernel runs on Hopper's e4m3 mma (which reads
// codes): the planner asks it through the step's facts, runFP8 with the backend's loaded kernels.
func readsX16(path matmulPath, rows int, mma bool) bool {
	return path == pathFP8 && rows <= fp8TileRows && !mma
}

// fp8GemmMaxRows is the most token rows an FP8 product runs on the skinny GEMM's e4m3 kernel (fp8Path):
// one tile of 16. At 16 rows it is faster than cuBLASLt with its scaling pass for each of Llama-3-8B's
// products; at 64 it is slower for all but gate/up: its blocks of 64 weight rows read as many bytes of
// activations as of weights there (BenchmarkCUDAFP8GemmShapes, docs/bench/fp8-h200.md).
const fp8GemmMaxRows = 16

// fp8Path is the path of an FP8 product of out rows at rows token rows: past fp8KernelMaxRows rows, the
// skinny GEMM's e4m3 kernel up to fp8GemmMaxRows rows where it is loaded (it streams the weights once
// through the copy engine and needs no scaling pass); cuBLASLt's GEMM where it is loaded, from
// FP8LtRows rows on (fp8KernelMaxRows+1 by default), and out a multiple of 4 (its output's rows
// 16-byte aligned); the FP8 kernel otherwise.
func (f *stepFacts) fp8Path(rows, out int) matmulPath {
	most := fp8GemmMaxRows
	if f.tune.FP8GemmRows > 0 {
		most = min(f.tune.FP8GemmRows, gemvMaxTokens)
	}
	if f.fp8Gemm && !f.tune.FP8NoGemm && rows > fp8KernelMaxRows && rows <= most {
		return pathFP8Gemm
	}
	least := f.tune.FP8LtRows
	if least == 0 {
		least = fp8KernelMaxRows + 1
	}
	if f.fp8Lt && least > 0 && rows >= least && out%4 == 0 {
		return pathFP8Lt
	}
	return pathFP8
}

// fp8GemmPlan is the skinny GEMM's launch shape of an FP8 product of out rows over kp columns (codes),
// and its ring's slots: planFP8Gemm's, or the one the tuning forces.
func (f *stepFacts) fp8GemmPlan(out, kp int) (gemmShape, int) {
	chunks := (kp + fp8GemmChunk - 1) / fp8GemmChunk
	stages := f.tune.GemmStages
	if stages <= 0 {
		stages = fp8GemmStages
	}
	if f.gemmForced() {
		return gemmShape{wg: f.tune.GemmWarps, ks: max(1, min(f.tune.GemmKS, chunks))}, stages
	}
	return planFP8Gemm(out, chunks, f.sms), stages
}

// productSplit is how a product on cuBLAS is split into parts computed by one strided-batched call.
type productSplit struct {
	parts int  // 1: whole
	rows  bool // the output rows dealt out (each part writes or accumulates into its own rows); else k
}

// matmulPlan is how a product runs.
type matmulPlan struct {
	path matmulPath
	// mode is the epilogue it runs: the one asked for where its kernel serves it, else plain (the op that
	// asked then launches its own kernel).
	mode gemvMode
	// accumulate: it adds its product into the residual stream (the norm after it adds nothing).
	accumulate bool
	// split is cuBLAS's split (parts 1 elsewhere).
	split productSplit
}

// planMatMul is how a product of out × in weights runs at rows token rows, asked for epilogue mode (the
// op after it fused into it) and, with residual, to accumulate into the residual stream of the norm
// after it (plain mode only): the skinny product where it serves the rows, with any epilogue; else the
// skinny GEMM where it takes the product (with SwiGLU where asked and it serves it, with the argmax where
// its plan keeps k whole, as the epilogue needs the same sums as the logits); else cuBLAS, split by
// splitOf.
func (f *stepFacts) planMatMul(rows, out, in int, mode gemvMode, residual bool) matmulPlan {
	acc := residual && mode == gemvPlain
	if f.gemvServes(rows, in) {
		return matmulPlan{path: pathGemv, mode: mode, accumulate: acc, split: productSplit{parts: 1}}
	}
	if f.gemmTakes(rows, out, in, mode == gemvSwiGLU) {
		p := matmulPlan{path: pathGemm, accumulate: acc, split: productSplit{parts: 1}}
		switch {
		case mode == gemvSwiGLU:
			p.mode = gemvSwiGLU
		case mode == gemvArgmax && f.gemmPlan(out, in).ks == 1:
			p.mode = gemvArgmax
		}
		return p
	}
	return matmulPlan{path: pathCuBLAS, accumulate: acc, split: f.splitOf(rows, out, in, acc)}
}

// splitOf is how a product on cuBLAS of out × in weights is split at rows rows. One that accumulates into
// the residual at gemvMaxTokens rows or fewer (the O and down products of a 9-64-row step) is computed in
// two parts: with at least splitRowsMinOut output rows, two halves of them, each accumulating into its
// rows of the residual; otherwise two halves of k, into the backend's partials, which the norm after it
// adds to the residual it reads anyway. cuBLAS streams either form's weights faster than the whole
// product's, whose k slices it sums itself at the product's end; the k halves' sum costs the norm two
// more reads, which the row halves do not (docs/bench/e2e-h100.md). gemvTuning.SplitK < 0 turns
// both off, > 0 forces k parts; gemvTuning.SplitRows forces row halves.
func (f *stepFacts) splitOf(rows, out, in int, accumulates bool) productSplit {
	whole := productSplit{parts: 1}
	if !accumulates || out != f.hidden || f.tune.SplitK < 0 || rows > gemvMaxTokens ||
		f.gemvServes(rows, in) || f.gemmTakes(rows, out, in, false) {
		return whole
	}
	if f.tune.SplitK == 0 && (f.tune.SplitRows || out >= splitRowsMinOut) && out%128 == 0 {
		return productSplit{parts: 2, rows: true}
	}
	for _, parts := range []int{f.tune.SplitK, 2} {
		if parts > 1 && parts <= splitMaxParts && in%(64*parts) == 0 {
			return productSplit{parts: parts}
		}
	}
	return whole
}

// normSlots is how many folds a step may have: every norm of the model (two a layer and the final one).
func normSlots(s Shape) int { return 2*s.NumLayers + 1 }

// opLinks is what fuses with what in a step, from the ops alone (linkOps): links are asked for at
// recording, kept only where the plan's rows serve them.
type opLinks struct {
	// MatMul: mode is the epilogue the op after it asked for, residual whether the norm after it asked it
	// to accumulate, afterAttention whether it reads decode attention's output (O).
	mode           gemvMode
	residual       bool
	afterAttention bool
	// MatMul: normOut and normIn are the norms folded after and before it (op indices, -1: none).
	// Embed: normOut is the first layer's input norm, folded after it.
	normOut, normIn int
	// RoPE, SwiGLU, Argmax: target is the product they fuse into; Attention: the product its RoPE fuses
	// into; Norm: the product it adds (producer) (-1: none).
	target int
	// Norm: the Embed before it (-1: none), and the product after it that folds it (-1: none), and its
	// fold's slot (the folds in recording order).
	embed, consumer, fold int
	// Norm: preNorm is the in-place norm of its addend just before it (a sublayer's output norm: Gemma's),
	// which it runs itself (NormAddRMSNorm), and intoNorm, on that in-place norm, the norm that does (-1:
	// none).
	preNorm, intoNorm int
	// RoPE: qkNorm is the QKNorm op just before it on the same Q/K/V rows, which the RoPE kernel runs
	// where it runs (-1: none); QKNorm: intoRoPE is that RoPE op.
	qkNorm, intoRoPE int
	// Norm, SwiGLU: fp8Into is the FP8 product after it whose input it writes quantized (-1: none);
	// MatMul: fp8From is that producer (-1: none), so the product quantizes nothing itself.
	fp8Into, fp8From int
	// MatMul (FP8, no bias): scaleInto is the op right after it that can apply the product's scales where
	// cuBLASLt leaves them out (opPlan.fp8Unscaled; scalesInto): the RoPE op, or the Norm or SwiGLU that
	// quantizes for the next FP8 product; Norm, SwiGLU, RoPE: scaleFrom is that product (-1: none).
	scaleInto, scaleFrom int
	// MatMul: biasRoPE is the RoPE op right after it on its output, at its rows, when the product has a
	// bias (16-bit weights): decode attention that rotates adds the bias too (opPlan.bias). RoPE,
	// Attention: biasFrom is that product (-1: none).
	biasRoPE, biasFrom int
}

// fuseTarget is the product op i fuses into, or -1: the op before it, a MatMul into the tensor op i
// reads at the same rows, with fusion on and the skinny product loaded (16-bit weights), and a shape the
// epilogue serves (RoPE: head_dim a multiple of 16; SwiGLU: an intermediate size of a multiple of 8, the
// product's rows gate and up; argmax: the product's rows the logits).
func fuseTarget(ops []stepOp, i int, f *stepFacts) int {
	op := &ops[i]
	if i == 0 || f.tune.NoFuse || !f.gemv {
		return -1
	}
	mm := &ops[i-1]
	if mm.kind != opMatMul || mm.dst != op.src || mm.rows != op.rows || mm.bias || mm.fp8 {
		return -1
	}
	switch op.kind {
	case opRoPE:
		if f.headDim%16 == 0 && !f.kvFP8 { // the epilogue stores compute-dtype pages
			return i - 1
		}
	case opSwiGLU, opGeGLU:
		if inter := op.out; inter%8 == 0 && mm.out == 2*inter && op.in == 2*inter {
			return i - 1
		}
	case opArgmax:
		if mm.out == op.in {
			return i - 1
		}
	}
	return -1
}

// linkOps links a step's ops: the epilogues, accumulations and norm folds they ask for (see opLinks).
// folds are the norms that fold (with a consumer), in recording order.
func linkOps(ops []stepOp, f *stepFacts) (links []opLinks, folds []int) {
	links = make([]opLinks, len(ops))
	attnOut := tensorID(0)
	ropeOf := map[tensorID]int{} // the product a RoPE op fused into, by the Q/K/V tensor
	biasOf := map[tensorID]int{} // the biased product right before a RoPE op, by the Q/K/V tensor
	for i := range ops {
		op, l := &ops[i], &links[i]
		*l = opLinks{normOut: -1, normIn: -1, target: -1, embed: -1, consumer: -1, fold: -1, preNorm: -1, intoNorm: -1,
			qkNorm: -1, intoRoPE: -1, fp8Into: -1, fp8From: -1, scaleInto: -1, scaleFrom: -1, biasRoPE: -1, biasFrom: -1}
		var prev *stepOp
		if i > 0 && ops[i-1].rows == op.rows && !f.tune.NoFuse {
			prev = &ops[i-1]
		}
		switch op.kind {
		case opNorm:
			// The product before it accumulates into the residual itself (it adds add); or the Embed
			// before it wrote the residual (the first layer's input norm).
			// Or the norm before it normalised the addend in place: it does that norm itself.
			switch {
			case prev != nil && op.add != 0 && prev.kind == opMatMul && prev.dst == op.add && prev.out == op.in && !prev.bias &&
				!prev.fp8:
				l.target = i - 1
				links[i-1].residual = true
			case prev != nil && op.add == 0 && prev.kind == opEmbed && prev.dst == op.resid:
				l.embed = i - 1
			case prev != nil && op.add != 0 && prev.kind == opNorm && prev.inPlace() && prev.dst == op.add && prev.in == op.in:
				l.preNorm = i - 1
				links[i-1].intoNorm = i
			}
		case opMatMul:
			l.afterAttention = op.src == attnOut
			// An FP8 product's input quantized by the plain norm or the SwiGLU (not fused into a
			// product) that writes it for this product alone.
			if op.fp8 && !f.tune.FP8NoFuse && prev != nil && prev.dst == op.src && links[i-1].target < 0 &&
				(prev.kind == opNorm && !prev.inPlace() && links[i-1].preNorm < 0 && links[i-1].intoNorm < 0 ||
					prev.kind == opSwiGLU) {
				links[i-1].fp8Into, l.fp8From = i, i-1
				if i >= 2 && scalesInto(ops, i-2, i-1) {
					links[i-2].scaleInto, links[i-1].scaleFrom = i-1, i-2
				}
			}
			if prev != nil && prev.kind == opNorm && prev.dst == op.src && prev.in == op.in && !op.fp8 {
				if n := &links[i-1]; n.target >= 0 || n.embed >= 0 {
					n.consumer, n.fold = i, len(folds)
					folds = append(folds, i-1)
					l.normIn = i - 1
					if n.target >= 0 {
						links[n.target].normOut = i - 1
					} else {
						links[n.embed].normOut = i - 1
					}
				}
			}
		case opRoPE:
			if prev != nil && scalesInto(ops, i-1, i) {
				links[i-1].scaleInto, l.scaleFrom = i, i-1
			}
			l.target = fuseTarget(ops, i, f)
			if l.target >= 0 {
				links[l.target].mode = gemvRoPE
			}
			ropeOf[op.src] = l.target
			delete(biasOf, op.src)
			if prev != nil && prev.kind == opMatMul && prev.dst == op.src && prev.bias && !prev.fp8 {
				l.biasFrom, links[i-1].biasRoPE = i-1, i
				biasOf[op.src] = i - 1
			}
			if prev != nil && prev.kind == opQKNorm && prev.dst == op.src {
				l.qkNorm = i - 1
				links[i-1].intoRoPE = i
			}
		case opAttention:
			l.target = -1
			if t, ok := ropeOf[op.src]; ok {
				l.target = t
			}
			if t, ok := biasOf[op.src]; ok {
				l.biasFrom = t
			}
			attnOut = op.dst
		case opSwiGLU:
			if l.target = fuseTarget(ops, i, f); l.target >= 0 {
				links[l.target].mode = gemvSwiGLU
			}
		case opGeGLU:
			if l.target = fuseTarget(ops, i, f); l.target >= 0 {
				links[l.target].mode = gemvGeGLU // the skinny product's alone (the GEMM's epilogue has no GELU)
			}
		case opArgmax:
			if l.target = fuseTarget(ops, i, f); l.target >= 0 {
				links[l.target].mode = gemvArgmax
			}
		}
	}
	return links, folds
}

// sharedPrefixOp reports whether op runs the shared-prefix algorithm in a step that takes it
// (stepShape.shared): an attention op of a layer without a window.
func sharedPrefixOp(op *stepOp) bool { return op.kind == opAttention && op.window == 0 }

// scalesInto reports whether FP8 product op mm may leave its output unscaled for op c right after it: the
// product has no bias (ScaleE4M3 adds it) and c reads its output at its rows, as the RoPE op (whose
// kernel writes what the attention after it reads, the rotated queries and the pages, from scaled
// values, and leaves the buffer unscaled: scaleFolds links the two only where that kernel runs, and the
// attention ops that read the buffer itself rotate it only where it does not), or as the quantizing
// Norm's addend or SwiGLU's gate/up, where no other op reads it before it is written again.
func scalesInto(ops []stepOp, mm, c int) bool {
	p, op := &ops[mm], &ops[c]
	if p.kind != opMatMul || !p.fp8 || p.bias || p.rows != op.rows {
		return false
	}
	switch {
	case op.kind == opRoPE && op.src == p.dst:
		return true
	case op.kind == opNorm && op.add == p.dst && op.resid != p.dst, op.kind == opSwiGLU && op.src == p.dst:
	default:
		return false
	}
	for j := mm + 1; j < len(ops); j++ {
		o := &ops[j]
		if j != c && (o.src == p.dst || o.add == p.dst || o.resid == p.dst) {
			return false
		}
		if o.dst == p.dst {
			break
		}
	}
	return true
}

// opPlan is how the executor runs one recorded op.
type opPlan struct {
	// rows is the rows it runs at.
	rows int
	// skip: nothing to launch (done in a product's epilogue, folded into the products around it, or done
	// by decode attention); folded marks a norm skipped for its fold.
	skip, folded bool
	// MatMul: its kernel, epilogue, accumulation and split; next is the op after it, whose epilogue
	// (SwiGLU's output, RoPE's layer) or residual (a norm's) it may need; afterAttention: it reads decode
	// attention's output (O: the skinny product's launch shape differs).
	mm             matmulPlan
	next           int
	afterAttention bool
	// Argmax: the product whose epilogue left its partial maxima (-1: none).
	target int
	// MatMul before a folded norm, Embed before the first one: the fold it writes (its norm's op index;
	// -1 none), into slot outSlot, clearing nextSlot for the fold after it; MatMul after one: the fold it
	// reads (-1 none), from slot inSlot (see normFold in exec_cuda.go).
	foldOut, foldIn           int
	outSlot, nextSlot, inSlot int
	// Norm: what it adds to the residual: addTensor its add operand, addPartials the k parts of the
	// product before it (addParts of them), addNone nothing (the product accumulated).
	add      normAdd
	addParts int
	// Attention: decode steps on the decode kernels run attn (with the rotation where attn.RoPE), others
	// the prefill kernel, but for their first leadDecodes rows (> 0: decodes, stepShape.leadDecodes),
	// which run attn. RoPE: skip where the product or attention does it.
	decode      bool
	leadDecodes int
	attn        attention.DecodeDecision
	// shared: the layer's decode runs the shared-prefix algorithm (stepShape.shared), not attn.
	shared bool
	// ropeBias: where attn.RoPE, the Q/K/V product whose bias the rotation adds (its own plan then adds
	// none); -1: none.
	ropeBias int
	// Argmax: where its partial maxima come from.
	argmax argmaxSource
	// MatMul: bias, a kernel adds the weight's bias after the product (an FP8 product adds its own).
	bias bool
	// Norm, SwiGLU: fp8Out, it writes its output as the FP8 product fp8Out's quantized input (NormE4M3,
	// SwiGLUE4M3) instead of in the compute dtype (-1: none). MatMul: fp8Quantized, its input is
	// quantized already.
	fp8Out       int
	fp8Quantized bool
	// MatMul on cuBLASLt without its own scaling: fp8Unscaled, it leaves its sums unscaled for the op
	// after it (opLinks.scaleInto), which applies the scales as it reads them; Norm, SwiGLU, RoPE:
	// fp8ScaleFrom is that product (-1: none). One read and write of the product's output less
	// (ScaleE4M3's).
	fp8Unscaled  bool
	fp8ScaleFrom int
	// MatMul with fp8Unscaled: fp8Out16, cuBLASLt writes the unscaled sums in bfloat16 (out16), for the
	// quantizing SwiGLU after it, which reads them with fp8In16 (its _in16 kernels): half the bytes of
	// gate/up's output written and read, each sum rounded once to bfloat16 before its scales (far
	// below the e4m3 rounding of the SwiGLU's output that follows). 16-bit compute only.
	fp8Out16, fp8In16 bool
	// Norm, SwiGLU with fp8Out: fp8X16, the product reads its input as f16 values (fp8ReadsX16), which
	// this op writes beside the codes.
	fp8X16 bool
	// Norm: inPlace, it normalises a sublayer's output in place (float, NormAddRMSNorm without a
	// residual); preNorm, it first normalises its addend in place as the in-place norm op preNorm would
	// have (NormAddRMSNorm; that op is skipped); -1 none.
	inPlace bool
	preNorm int
	// RoPE: the QKNorm op whose q/k norms the RoPE kernel runs first (that op is skipped); -1 none.
	qkNorm int
	// err is why the op cannot run (the executor returns it).
	err error
}

// normAdd is what a norm adds to the residual stream before normalizing it.
type normAdd uint8

const (
	addTensor   normAdd = iota // its add operand (none when it has none)
	addPartials                // the k parts of a split product
	addNone                    // nothing: the product accumulated into the residual
)

// argmaxSource is where a greedy pick's partial maxima come from.
type argmaxSource uint8

const (
	argmaxChunks argmaxSource = iota // ArgmaxChunks over the logits
	argmaxGemv                       // the skinny product's epilogue: one a token and tile of 16 logits
	argmaxGemm                       // the skinny GEMM's epilogue: one a token and block
)

// planStep plans the recorded ops of a step: each at rows rows (a graph's bucket), or at its own row
// count where rows is 0.
func planStep(ops []stepOp, rows int, f *stepFacts, st *stepShape) []opPlan {
	links, folds := linkOps(ops, f)
	p := stepPlanner{ops: ops, links: links, folds: folds, f: f, st: st, plans: make([]opPlan, len(ops)),
		foldMemo: map[int]bool{}, attnMemo: map[attnKey]attnMemo{}}
	for i := range ops {
		n := ops[i].rows
		if rows > 0 {
			n = rows
		}
		p.plans[i] = p.planOp(i, n)
	}
	return p.plans
}

// stepPlanner holds planStep's state: the links and the answers that hold for every op at a row count.
type stepPlanner struct {
	ops      []stepOp
	links    []opLinks
	folds    []int
	f        *stepFacts
	st       *stepShape
	plans    []opPlan
	foldMemo map[int]bool
	attnMemo map[attnKey]attnMemo
}

// attnKey and attnMemo cache decode attention's decisions of a step: every layer's call has the same
// shape but for its window.
type attnKey struct {
	rows   int
	rope   bool
	window int
}

type attnMemo struct {
	d   attention.DecodeDecision
	err error
}

// mm is the plan of product op i at rows rows.
func (p *stepPlanner) mm(i, rows int) matmulPlan {
	op, l := &p.ops[i], &p.links[i]
	if op.fp8 {
		return matmulPlan{path: p.f.fp8Path(rows, op.out), split: productSplit{parts: 1}}
	}
	return p.f.planMatMul(rows, op.out, op.in, l.mode, l.residual)
}

// fused reports whether product op i (-1: none) runs epilogue mode at rows rows, so that the op that
// asked for it has nothing left to do.
func (p *stepPlanner) fused(i int, mode gemvMode, rows int) bool {
	return i >= 0 && p.links[i].mode == mode && p.mm(i, rows).mode == mode
}

// normFolds reports whether norm op n (-1: none) folds into the products around it at rows rows (see
// normFold). A step's norms fold all or none: the ring of fold slots needs each fold of the step to
// run, in order. They do where the norms are at least two and at most the slots, the kernels exist,
// the step has at most normMaxTokens rows, and the products on both sides of every norm run the skinny
// product, the one before it accumulating (the first layer's input norm folds into the Embed instead).
func (p *stepPlanner) normFolds(n, rows int) bool {
	if n < 0 || p.links[n].consumer < 0 {
		return false
	}
	ok, seen := p.foldMemo[rows]
	if !seen {
		f := p.f
		ok = !f.tune.NoNormFold && len(p.folds) >= 2 && len(p.folds) <= f.normSlots && f.normFold && rows <= normMaxTokens
		for _, m := range p.folds {
			l := &p.links[m]
			ok = ok && f.gemvServes(rows, p.ops[l.consumer].in) &&
				(l.embed >= 0 || l.target >= 0 && p.links[l.target].residual && p.links[l.target].mode == gemvPlain &&
					f.gemvServes(rows, p.ops[l.target].in))
		}
		p.foldMemo[rows] = ok
	}
	return ok
}

// attention is decode attention's decision at rows rows, with the rotation or without, for a layer of
// sliding window window (0: none): the call at every row's context cap for a graph step (GraphCall: the
// bucket below it bounds the batches it replays), at the sequences' own contexts otherwise; a split-k
// plan that would not fit the split workspace runs grouped.
func (p *stepPlanner) attention(rows int, rope bool, window int) (attention.DecodeDecision, error) {
	key := attnKey{rows, rope, window}
	if m, ok := p.attnMemo[key]; ok {
		return m.d, m.err
	}
	f, st := p.f, p.st
	c := attention.DecodeCall{ContextLens: st.contextLens[:min(rows, len(st.contextLens))], MaxBlocks: st.stride, NumHeads: f.numHeads,
		NumKVHeads: f.numKVHeads, HeadDim: f.headDim, BlockSize: f.blockSize, DType: f.attnDType, KVFP8: f.kvFP8,
		Window: window, Dependent: st.pdl, WorkspaceBytes: splitWorkspaceBytes, Tuning: f.attnTuning}
	if st.graph {
		c.ContextLens = make([]int32, rows)
		for i := range c.ContextLens {
			c.ContextLens[i] = int32(st.contextCap)
		}
		c.Graph = &attention.GraphCall{MinBatch: graphBucketLow(rows), PartitionTokens: f.tune.AttnPartition}
	}
	if rope {
		c.RoPE = &attention.DecodeRoPE{QKVCols: (f.numHeads + 2*f.numKVHeads) * f.headDim}
	}
	d, err := attention.Decide(c, f.attn)
	p.attnMemo[key] = attnMemo{d, err}
	return d, err
}

// ropeInAttention reports whether decode attention does the step's rotary embedding and K/V write
// instead of the RoPE kernel, at rows rows, for a layer of sliding window window: a decode step on the
// decode kernels whose Q/K/V product (target, -1 if none) does not fuse it, and whose attention call
// will not run the persistent grouped kernel nor a kernel without a RoPE path (DecodeDecision.FoldsRoPE).
// The RoPE op and the attention op of a layer ask the same question at the same rows, so exactly one of
// the three does the work. (After a QKNorm the product fuses nothing: attention then rotates the
// normalised queries and key the QKNorm kernel left.)
func (p *stepPlanner) ropeInAttention(target, rows, window int) bool {
	f := p.f
	if !p.st.decode || !f.decodeKernels || f.tune.NoAttnRoPE || f.tune.NoFuse || p.fused(target, gemvRoPE, rows) ||
		p.st.shared && window == 0 {
		return false
	}
	d, err := p.attention(rows, false, window)
	return err == nil && d.FoldsRoPE
}

// planOp plans op i at rows rows.
func (p *stepPlanner) planOp(i, rows int) opPlan {
	op, l, f := &p.ops[i], &p.links[i], p.f
	plan := opPlan{rows: rows, foldOut: -1, foldIn: -1, next: i + 1, target: l.target, preNorm: -1, qkNorm: -1,
		fp8Out: l.fp8Into, fp8Quantized: l.fp8From >= 0, fp8ScaleFrom: -1, ropeBias: -1}
	if l.fp8Into >= 0 {
		plan.fp8X16 = f.fp8ReadsX16(p.mm(l.fp8Into, rows).path, rows)
	}
	if p.scaleFolds(l.scaleFrom, rows) {
		plan.fp8ScaleFrom = l.scaleFrom
	}
	plan.fp8Unscaled = l.scaleInto >= 0 && p.scaleFolds(i, rows)
	plan.fp8Out16 = plan.fp8Unscaled && p.out16(i, rows)
	plan.fp8In16 = plan.fp8ScaleFrom >= 0 && p.out16(l.scaleFrom, rows)
	switch op.kind {
	case opEmbed:
		if p.normFolds(l.normOut, rows) && !f.tune.diag.normFold(2) {
			plan.foldOut = l.normOut
		}
		p.slots(&plan)
	case opNorm:
		if p.normFolds(i, rows) && !f.tune.diag.normFold(4) {
			plan.skip, plan.folded = true, true
			break
		}
		plan.inPlace, plan.preNorm = op.inPlace(), l.preNorm
		if l.intoNorm >= 0 {
			plan.skip = true // the norm after it runs it
			break
		}
		if l.target >= 0 {
			switch mm := p.mm(l.target, rows); {
			case mm.split.parts > 1 && !mm.split.rows:
				plan.add, plan.addParts = addPartials, mm.split.parts
			case mm.accumulate:
				plan.add = addNone
			}
		}
	case opMatMul:
		plan.mm, plan.afterAttention, plan.bias = p.mm(i, rows), l.afterAttention, op.bias && !op.fp8
		if r := l.biasRoPE; plan.bias && r >= 0 && p.ropeInAttention(p.links[r].target, rows, p.ops[r].window) {
			plan.bias = false // decode attention adds it as it rotates
		}
		if plan.mm.path == pathGemv {
			if p.normFolds(l.normOut, rows) {
				plan.foldOut = l.normOut
			}
			if p.normFolds(l.normIn, rows) {
				plan.foldIn = l.normIn
			}
			p.slots(&plan)
		}
	case opRoPE:
		plan.skip = !p.ropeRuns(i, rows)
		if !plan.skip {
			plan.qkNorm = l.qkNorm
		}
	case opQKNorm:
		// Into the RoPE kernel after it where that runs (decode attention rotates what this leaves).
		if r := l.intoRoPE; r >= 0 {
			rl := &p.links[r]
			plan.skip = !p.fused(rl.target, gemvRoPE, rows) && !p.ropeInAttention(rl.target, rows, p.ops[r].window)
		}
	case opAttention:
		if p.st.decode && f.decodeKernels {
			plan.decode = true
			plan.attn, plan.err = p.attention(rows, p.ropeInAttention(l.target, rows, op.window), op.window)
			plan.shared = p.st.shared && sharedPrefixOp(op)
			if plan.attn.RoPE && !plan.shared {
				plan.ropeBias = l.biasFrom
			}
		} else if n := p.st.leadDecodes; n >= f.mixedDecodeMin() && f.decodeKernels {
			// A decision the kernels cannot take (none fits) leaves the decodes to the prefill kernel.
			if d, err := p.attention(n, false, op.window); err == nil {
				plan.leadDecodes, plan.attn = n, d
			}
		}
	case opSwiGLU:
		plan.skip = p.fused(l.target, gemvSwiGLU, rows)
	case opGeGLU:
		plan.skip = p.fused(l.target, gemvGeGLU, rows)
	case opArgmax:
		if p.fused(l.target, gemvArgmax, rows) {
			plan.argmax = argmaxGemv
			if p.mm(l.target, rows).path != pathGemv {
				plan.argmax = argmaxGemm
			}
		}
	}
	return plan
}

// scaleFolds reports whether FP8 product op i (-1: none), linked to the op after it (opLinks.scaleInto),
// leaves its scales to that op at rows rows: it runs on cuBLASLt, which does not apply them itself, and
// that op runs a kernel of its own (a RoPE op may be done by decode attention instead).
func (p *stepPlanner) scaleFolds(i, rows int) bool {
	f := p.f
	if i < 0 || f.tune.FP8NoScaleFold || f.fp8LtScaled || p.mm(i, rows).path != pathFP8Lt {
		return false
	}
	c := p.links[i].scaleInto
	return p.ops[c].kind != opRoPE || p.ropeRuns(c, rows)
}

// out16 reports whether FP8 product op i, which leaves its scales to the op after it at rows rows
// (scaleFolds), writes its unscaled sums in bfloat16 (opPlan.fp8Out16): that op is the quantizing SwiGLU
// and its bfloat16-input kernels are loaded.
func (p *stepPlanner) out16(i, rows int) bool {
	f := p.f
	if !f.fp8In16 || f.tune.FP8NoOut16 || !p.scaleFolds(i, rows) {
		return false
	}
	c := p.links[i].scaleInto
	return p.ops[c].kind == opSwiGLU && p.links[c].fp8Into >= 0
}

// ropeRuns reports whether RoPE op r runs the RoPE kernel at rows rows: neither the product before it
// (its epilogue) nor decode attention rotates.
func (p *stepPlanner) ropeRuns(r, rows int) bool {
	l := &p.links[r]
	return !p.fused(l.target, gemvRoPE, rows) && !p.ropeInAttention(l.target, rows, p.ops[r].window)
}

// slots sets plan's fold slots: a fold's own (its place among the step's folds, in recording order),
// and the next fold's, which its writer clears.
func (p *stepPlanner) slots(plan *opPlan) {
	if plan.foldOut >= 0 {
		plan.outSlot = p.links[plan.foldOut].fold
		plan.nextSlot = (plan.outSlot + 1) % len(p.folds)
	}
	if plan.foldIn >= 0 {
		plan.inSlot = p.links[plan.foldIn].fold
	}
}

// hash mixes the tuning into a graph signature: it picks the launches a graph holds. MixedDecodeMin
// is left out: it shapes only mixed steps, which never run as graphs.
func (t *gemvTuning) hash(h uint64) uint64 {
	for _, w := range []int{t.MaxTokens, t.RB, t.KS, t.Pipe, t.Plan, t.GemmWarps, t.GemmKS, t.GemmStages, t.GemmFlags,
		int(t.GemmMinBytes), int(t.GemmSwiGLUMinBytes), t.PDLRows, t.AttnPartition, t.SplitK, t.FP8LtRows, t.FP8GemmRows, t.FP8Staged, t.RoPEHeads} {
		h = fnvWord(h, uint64(w))
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{t.NoFuse, "nofuse"}, {t.PDL, "pdl-tuning"}, {t.Gemm, "gemm"}, {t.NoNormFold, "nonormfold"},
		{t.NoAttnRoPE, "noattnrope"}, {t.SplitRows, "splitrows"}, {t.FP8NoFuse, "fp8nofuse"}, {t.FP8NoGemm, "fp8nogemm"}, {t.FP8NoScaleFold, "fp8noscalefold"},
		{t.FP8NoOut16, "fp8noout16"}} {
		if f.on {
			h = fnvString(h, f.name)
		}
	}
	return t.diag.hash(h)
}

// hash mixes the op into a graph signature: everything the plan reads of it but its row count (a graph
// serves every batch of its bucket), and whether that count is the op before's (prevRows), which links
// read.
func (op *stepOp) hash(h uint64, prevRows int) uint64 {
	for _, w := range []uint64{uint64(op.kind), uint64(op.dst), uint64(op.src), uint64(op.add), uint64(op.resid),
		uint64(op.out), uint64(op.in), uint64(op.window)} {
		h = fnvWord(h, w)
	}
	if op.bias {
		h = fnvString(h, "bias")
	}
	if op.fp8 {
		h = fnvString(h, "fp8")
	}
	if op.graphable {
		h = fnvString(h, "graphable")
	}
	if op.rows == prevRows {
		h = fnvString(h, "rows as before")
	}
	return h
}

// FNV-1a, for the graph signature.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvWord mixes a whole word at once (FNV-1a's step on 64-bit symbols): cheaper than byte by byte on a
// step of hundreds of ops, and as good for telling buffers apart.
func fnvWord(h, w uint64) uint64 {
	h ^= w
	h *= fnvPrime
	return h ^ h>>29
}

func fnvString(h uint64, s string) uint64 {
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}
