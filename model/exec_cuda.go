//go:build cuda

package model

import (
	"fmt"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/internal/cuda"
)

// The executor: it runs the recorded ops as planStep plans them (step_plan.go), one launch (or none) per
// op, and decides nothing. The products' launches are in gemv_cuda.go (the skinny product) and
// gemm_cuda.go (the skinny GEMM).

// facts is what the plan knows of this backend (stepFacts).
func (b *cudaBackend) facts() stepFacts {
	sh := &b.shape
	f := stepFacts{sms: b.dev.Info().NumSMs, hidden: sh.HiddenSize, headDim: sh.HeadDim,
		gemv:        b.gemv != nil && b.gemv.byTiles[0] != nil,
		gemm:        b.gemm != nil,
		gemmSwiGLU:  b.gemm != nil && b.gemm.swiglu,
		fp8Lt:       b.fp8.lt != nil,
		fp8LtScaled: b.fp8.lt != nil && b.fp8.ltScaled,
		fp8In16:     b.fp8.swiglu16.loop != nil,
		fp8MMA:      b.fp8.mma[0] != nil,
		fp8Gemm:     b.fp8.gemm[0] != nil,
		normFold:    b.dtype == cuda.BFloat16 && b.normSS != 0, normSlots: normSlots(b.shape),
		decodeKernels: b.decodeFits && b.decode != nil,
		numHeads:      sh.NumHeads, numKVHeads: sh.NumKVHeads, blockSize: sh.BlockSize,
		kvFP8: b.kvFP8,
		tune:  b.tune}
	if f.decodeKernels {
		f.attn, f.attnTuning = b.decode.Facts(), b.decode.Tuning
		f.attnDType = attention.BF16
		switch b.dtype {
		case cuda.Float16:
			f.attnDType = attention.FP16
		case cuda.Float32:
			f.attnDType = attention.FP32
		}
	}
	return f
}

// plan is the plan of the recorded ops at rows rows (0: each its own; see planStep).
func (b *cudaBackend) plan(rows int) []opPlan {
	f := b.facts()
	st := stepShape{decode: b.st.decode, graph: b.st.graphRun, contextLens: b.st.s.ContextLens, contextCap: b.st.contextCap,
		stride: b.st.stride, pdl: b.pdlNow(), shared: b.st.shared != nil, leadDecodes: b.st.leadDecodes}
	return planStep(b.ops, rows, &f, &st)
}

// runOp queues op i as p says.
func (b *cudaBackend) runOp(i int, p *opPlan) error {
	if p.err != nil {
		return p.err
	}
	if p.folded {
		b.stats.FoldedNorms++
	}
	if p.skip {
		return nil
	}
	op, a, rows := &b.ops[i], &b.args[i], p.rows
	switch op.kind {
	case opEmbed:
		return b.runEmbed(op, a, p)
	case opNorm:
		return b.runNorm(op, a, p)
	case opMatMul:
		return b.runMatMul(op, a, p)
	case opRoPE:
		return b.runRoPE(a, p)
	case opAttention:
		return b.runAttention(a, p)
	case opSwiGLU, opGeGLU:
		if p.fp8Out >= 0 {
			return b.runFusedE4M3(op, a, p)
		}
		n := int64(rows) * int64(op.out)
		params := struct {
			Dst, GateUp cuda.DevicePtr
			N           int64
			Inter       int32
		}{a.d.ptr, a.x.ptr, n, int32(op.out)}
		blocks := int(min((n+255)/256, 65535))
		if op.out%4 == 0 {
			blocks = int(min((n/4+255)/256, 65535))
		}
		fn := b.fn.swiglu
		if op.kind == opGeGLU {
			fn = b.fn.geglu
		}
		return launchDependent(b, fn, cuda.Dim3{X: blocks}, cuda.Dim3{X: 256}, 0, &params)
	case opQKNorm:
		sh := &b.shape
		params := struct {
			QKV, QW, KW                            cuda.DevicePtr
			Eps                                    float32
			NumHeads, NumKVHeads, HeadDim, QKVCols int32
		}{a.x.ptr, a.w.ptr, a.w2.ptr, a.eps, int32(sh.NumHeads), int32(sh.NumKVHeads), int32(sh.HeadDim), int32(sh.QKVCols())}
		groups := (sh.NumHeads + sh.NumKVHeads + qkNormHeads - 1) / qkNormHeads
		return launchDependent(b, b.fn.qkNorm, cuda.Dim3{X: rows, Y: groups}, cuda.Dim3{X: 32 * qkNormHeads}, 0, &params)
	case opSoftcap:
		n := int64(rows) * int64(op.in)
		params := struct {
			X   cuda.DevicePtr
			N   int64
			Cap float32
		}{a.x.ptr, n, a.eps}
		return launchDependent(b, b.fn.softcap, cuda.Dim3{X: int(min((n+255)/256, 65535))}, cuda.Dim3{X: 256}, 0, &params)
	case opGather:
		params := struct {
			Dst, Src, Rows cuda.DevicePtr
			Cols           int32
		}{a.d.ptr, a.x.ptr, b.metaPtr(a.off), int32(op.in)}
		return launchDependent(b, b.fn.gather, cuda.Dim3{X: rows}, cuda.Dim3{X: rowThreads(op.in)}, 0, &params)
	case opArgmax:
		return b.runArgmax(op, a, p)
	case opAllReduce:
		return b.cfg.coll.allReduceSum(b, a.d.ptr, rows*op.in)
	}
	return fmt.Errorf("cuda backend: op kind %v", op.kind)
}

func (b *cudaBackend) runEmbed(op *stepOp, a *opArgs, p *opPlan) error {
	params := struct {
		Dst, Table, Tokens, From, Picks, SSOut, SSZero, NormOut, NormW cuda.DevicePtr
		Hidden                                                         int32
		Scale                                                          float32
	}{Dst: a.d.ptr, Table: a.w.ptr, Tokens: b.metaPtr(b.st.offTokens), From: b.metaPtr(b.st.offFrom),
		Picks: b.idsAt(b.slot ^ 1), Hidden: int32(op.in), Scale: b.embedScale}
	if p.foldOut >= 0 {
		n := &b.args[p.foldOut]
		params.SSOut, params.SSZero, params.NormOut, params.NormW = b.normSlot(p.outSlot), b.normSlot(p.nextSlot), n.d.ptr, n.w.ptr
	}
	return cuda.Launch(b.fn.embed, cuda.Dim3{X: p.rows}, cuda.Dim3{X: rowThreads(op.in)}, 0, b.stream, &params)
}

// qkNormHeads is QKNORM_HEADS of kernels/qknorm.cu: the heads (warps) of one block.
const qkNormHeads = 8

func (b *cudaBackend) runNorm(op *stepOp, a *opArgs, p *opPlan) error {
	if p.fp8Out >= 0 {
		return b.runFusedE4M3(op, a, p)
	}
	if p.inPlace || p.preNorm >= 0 {
		return b.runNormAdd(op, a, p)
	}
	var add cuda.DevicePtr
	if a.a != nil {
		add = a.a.ptr
	}
	adds := 1
	switch p.add {
	case addPartials:
		add, adds = b.partials, p.addParts // the product left its partial products
	case addNone:
		add = 0 // the product added itself
	}
	cols := op.in
	params := struct {
		Dst, Residual, Add, Weight cuda.DevicePtr
		Eps                        float32
		Cols, Adds                 int32
		_                          int32
		AddStride                  int64
	}{Dst: a.d.ptr, Residual: a.r.ptr, Add: add, Weight: a.w.ptr, Eps: a.eps, Cols: int32(cols), Adds: int32(adds),
		AddStride: int64(p.rows) * int64(cols)}
	return launchDependent(b, b.fn.addRMSNorm, cuda.Dim3{X: p.rows}, cuda.Dim3{X: rowThreads(cols)}, 0, &params)
}

// runNormAdd launches NormAddRMSNorm: an in-place norm of a sublayer's output alone (p.inPlace), or that
// norm (op p.preNorm's) of the addend followed by op's norm, which adds it to the residual.
func (b *cudaBackend) runNormAdd(op *stepOp, a *opArgs, p *opPlan) error {
	params := struct {
		X, XW, Residual, Dst, Weight cuda.DevicePtr
		XEps, Eps                    float32
		Cols                         int32
	}{X: a.d.ptr, XW: a.w.ptr, XEps: a.eps, Cols: int32(op.in)}
	if p.preNorm >= 0 {
		pre := &b.args[p.preNorm]
		params.X, params.XW, params.XEps = a.a.ptr, pre.w.ptr, pre.eps
		params.Residual, params.Dst, params.Weight, params.Eps = a.r.ptr, a.d.ptr, a.w.ptr, a.eps
	}
	return launchDependent(b, b.fn.normAdd, cuda.Dim3{X: p.rows}, cuda.Dim3{X: rowThreads(op.in)}, 0, &params)
}

// normFold is a folded norm as the skinny product's launch needs it (see launchGemv).
func (b *cudaBackend) normFold(n, slot, next int) *normFold {
	a := &b.args[n]
	return &normFold{slot: slot, next: next, dst: a.d, w: a.w, eps: a.eps, cols: b.ops[n].in}
}

// normSlot is the address of fold slot i's sums of squares.
func (b *cudaBackend) normSlot(i int) cuda.DevicePtr {
	return b.normSS.Add(int64(8 * normMaxTokens * i))
}

func (b *cudaBackend) runMatMul(op *stepOp, a *opArgs, p *opPlan) error {
	if p.mm.path.fp8() {
		return b.runFP8(op, a, p)
	}
	if err := b.runProduct(op, a, p); err != nil || !p.bias {
		return err
	}
	n := int64(p.rows) * int64(op.out)
	params := struct {
		Y, Bias cuda.DevicePtr
		N       int64
		Cols    int32
	}{a.d.ptr, a.bias.ptr, n, int32(op.out)}
	return launchDependent(b, b.fn.bias, cuda.Dim3{X: int(min((n+255)/256, 65535))}, cuda.Dim3{X: 256}, 0, &params)
}

// runProduct queues the product of a MatMul op (its bias aside).
func (b *cudaBackend) runProduct(op *stepOp, a *opArgs, p *opPlan) error {
	mm, rows, out, in := &p.mm, p.rows, op.out, op.in
	d, x, w := a.d, a.x, a.w
	var next *opArgs // the op after the product: its epilogue's (SwiGLU, RoPE) or its norm's residual
	if p.next < len(b.args) {
		next = &b.args[p.next]
	}
	switch mm.path {
	case pathGemv:
		e, y := gemvEpilogue{mode: mm.mode, afterAttention: p.afterAttention}, d
		switch mm.mode {
		case gemvSwiGLU, gemvGeGLU:
			e.act = next.d
		case gemvRoPE:
			e.layer = next.layer
		}
		if mm.accumulate {
			e.accumulate, y = true, next.r
		}
		if p.foldOut >= 0 {
			e.normOut = b.normFold(p.foldOut, p.outSlot, p.nextSlot)
		}
		if p.foldIn >= 0 {
			e.normIn = b.normFold(p.foldIn, p.inSlot, 0)
		}
		return b.launchGemv(y, x, w, out, in, rows, &e)
	case pathGemm:
		switch {
		case mm.mode == gemvSwiGLU:
			return b.launchGemm(d, x, w, out, in, rows, false, next.d, false)
		case mm.accumulate:
			return b.launchGemm(next.r, x, w, out, in, rows, true, nil, false)
		}
		return b.launchGemm(d, x, w, out, in, rows, false, nil, mm.mode == gemvArgmax)
	}
	// Row-major Y[rows][out] = X[rows][in] · W[out][in]ᵀ is column-major Yᵀ = W · Xᵀ (see cuda.BLAS.GemmEx);
	// Y is stored as float32.
	y, beta := d.ptr, float32(0)
	if mm.accumulate {
		y, beta = next.r.ptr, 1
	}
	switch sp := mm.split; {
	case sp.parts > 1 && sp.rows: // part i: rows [i·n, (i+1)·n) of y
		b.stats.SplitProducts++
		n := out / sp.parts
		return b.blas.GemmStridedBatchedEx(cuda.Trans, cuda.NoTrans, n, rows, in, 1, w.ptr, b.dtype, in, int64(n)*int64(in),
			x.ptr, b.dtype, in, 0, beta, y, cuda.Float32, out, int64(n), sp.parts)
	case sp.parts > 1: // part i: k slice i into b.partials[i]
		b.stats.SplitProducts++
		ks := in / sp.parts
		return b.blas.GemmStridedBatchedEx(cuda.Trans, cuda.NoTrans, out, rows, ks, 1, w.ptr, b.dtype, in, int64(ks),
			x.ptr, b.dtype, in, int64(ks), 0, b.partials, cuda.Float32, out, int64(rows)*int64(out), sp.parts)
	}
	return b.blas.GemmEx(cuda.Trans, cuda.NoTrans, out, rows, in, 1, w.ptr, b.dtype, in, x.ptr, b.dtype, in,
		beta, y, cuda.Float32, out)
}

// ropeMaxHeads is ROPE_MAX_HEADS of kernels/rope.cu: the most heads one block of a row rotates or copies.
const ropeMaxHeads = 64

// ropeHeads is the heads a block of the RoPE kernel covers at rows rows: gemvTuning.RoPEHeads where
// set, else ropeFewHeads up to ropeManyRows rows (a decode step: blocks enough for the SMs) and
// ropeMaxHeads from there.
func (b *cudaBackend) ropeHeads(rows int) int {
	if h := b.tune.RoPEHeads; h > 0 {
		return min(h, ropeMaxHeads)
	}
	if rows <= ropeManyRows {
		return ropeFewHeads
	}
	return ropeMaxHeads
}

const (
	ropeFewHeads = 8
	ropeManyRows = 64
)

// layerKV returns layer l's page arrays of K and V (its LayerShape.KVSlot).
func (b *cudaBackend) layerKV(l int) (k, v cuda.DevicePtr) {
	slot := b.shape.Layer(l).KVSlot
	return b.kCache[slot], b.vCache[slot]
}

// layerInvFreq returns layer l's rotary table on the device.
func (b *cudaBackend) layerInvFreq(l int) cuda.DevicePtr {
	if b.shape.Layer(l).LocalRope {
		return b.localInvFreq
	}
	return b.invFreq
}

// layerSlots and layerTables return the device addresses of the K/V slots and the block tables of layer
// l's KV group in the step's metadata.
func (b *cudaBackend) layerSlots(l int) cuda.DevicePtr {
	return b.metaPtr(b.st.slotsOff(b.shape.Layer(l).KVGroup))
}

func (b *cudaBackend) layerTables(l int) cuda.DevicePtr {
	return b.metaPtr(b.st.tablesOff(b.shape.Layer(l).KVGroup))
}

// layerKVScales returns layer l's K and V scales of an FP8 KV cache (0, 0 without one).
func (b *cudaBackend) layerKVScales(l int) (k, v float32) {
	if !b.kvFP8 {
		return 0, 0
	}
	s := b.shape.KVScales[l]
	return s.K, s.V
}

func (b *cudaBackend) runRoPE(a *opArgs, p *opPlan) error {
	sh, rows := &b.shape, p.rows
	k, v := b.layerKV(a.layer)
	params := struct {
		QKV, QOut, KCache, VCache, Positions, Slots, InvFreq cuda.DevicePtr
		AttentionScaling                                     float32
		NumHeads, NumKVHeads, HeadDim, QKVCols               int32
		QNorm, KNorm                                         cuda.DevicePtr
		Eps                                                  float32
		KScale, VScale                                       float32
		InSX, InSW                                           cuda.DevicePtr
		HeadsPerBlock                                        int32
	}{QKV: a.x.ptr, QOut: a.x.qRot, KCache: k, VCache: v, Positions: b.metaPtr(b.st.offPos), Slots: b.layerSlots(a.layer),
		InvFreq: b.layerInvFreq(a.layer), AttentionScaling: sh.RopeAttentionScaling, NumHeads: int32(sh.NumHeads),
		NumKVHeads: int32(sh.NumKVHeads), HeadDim: int32(sh.HeadDim), QKVCols: int32(sh.QKVCols())}
	if p.qkNorm >= 0 { // the q/k norms of the QKNorm op before it
		n := &b.args[p.qkNorm]
		params.QNorm, params.KNorm, params.Eps = n.w.ptr, n.w2.ptr, n.eps
	}
	params.InSX, params.InSW = b.fp8InScales(p)
	hpb := b.ropeHeads(rows)
	params.HeadsPerBlock = int32(hpb)
	threads := min(256, max(32, (hpb*sh.HeadDim/8+31)/32*32)) // four of a head's D/2 pairs a thread
	groups := (sh.NumHeads + 2*sh.NumKVHeads + hpb - 1) / hpb
	fn := b.fn.rope
	if b.kvFP8 {
		fn = b.fn.ropeE4M3
		params.KScale, params.VScale = b.layerKVScales(a.layer)
	}
	return launchDependent(b, fn, cuda.Dim3{X: rows, Y: groups}, cuda.Dim3{X: threads}, 0, &params)
}

func (b *cudaBackend) runAttention(a *opArgs, p *opPlan) error {
	sh, st := &b.shape, &b.st
	d, q := a.d, a.x
	k, v := b.layerKV(a.layer)
	ks, vs := b.layerKVScales(a.layer)
	window := sh.Layer(a.layer).Window
	first, items := 0, st.items // the prefill kernel's items
	if p.decode || p.leadDecodes > 0 {
		args := attention.CUDADecodeArgs{
			Out: d.ptr, Q: q.qRot, KCache: k, VCache: v, KVFP8: b.kvFP8, KScale: ks, VScale: vs,
			BlockTables: b.layerTables(a.layer), ContextLens: b.metaPtr(st.offCtx),
			HostContextLens: b.attnLens(p.rows), MaxBlocks: st.stride,
			NumHeads: sh.NumHeads, NumKVHeads: sh.NumKVHeads, HeadDim: sh.HeadDim, BlockSize: sh.BlockSize,
			DType: b.dtype, Scale: sh.Scale(), Window: window, Dependent: b.pdlNow(),
		}
		switch {
		case p.leadDecodes > 0:
			// A mixed step's decodes are its first rows and sequences: the decode kernels take them, the
			// prefill kernel the items after theirs.
			args.HostContextLens = st.s.ContextLens[:p.leadDecodes]
			if err := b.decode.Run(b.stream, &args, p.attn, b.splitWS, splitWorkspaceBytes); err != nil {
				return err
			}
			b.stats.MixedDecodes++
			first = st.leadItems
		case p.shared: // counted when queued (countShared)
			return b.decode.DecodeShared(b.stream, &args, b.sharedArgs(), b.splitWS, splitWorkspaceBytes)
		default:
			if p.attn.RoPE {
				args.Q, args.RoPE = 0, &attention.CUDARoPE{QKV: q.ptr, QKVCols: sh.QKVCols(),
					Positions: b.metaPtr(st.offPos), Slots: b.layerSlots(a.layer),
					InvFreq: b.layerInvFreq(a.layer), AttentionScaling: sh.RopeAttentionScaling}
				if p.ropeBias >= 0 {
					args.RoPE.Bias = b.args[p.ropeBias].bias.ptr
				}
			}
			return b.decode.Run(b.stream, &args, p.attn, b.splitWS, splitWorkspaceBytes)
		}
	}
	if st.graphRun {
		items = st.paddedItems
	}
	return b.pre.Attend(b.stream, &attention.CUDAPrefillArgs{
		Out: d.ptr, Q: q.qRot, KCache: k, VCache: v, KVFP8: b.kvFP8, KScale: ks, VScale: vs,
		BlockTables: b.layerTables(a.layer), Positions: b.metaPtr(st.offPos),
		Items: b.metaPtr(st.offItems + 4*first), NumItems: items - first, MaxBlocks: st.stride,
		NumHeads: sh.NumHeads, NumKVHeads: sh.NumKVHeads, HeadDim: sh.HeadDim, BlockSize: sh.BlockSize,
		DType: b.dtype, Scale: sh.Scale(), Window: window, Kernel: b.preKernel,
	})
}

// attnLens returns the context lengths decode attention runs with at rows rows: every row at the
// context cap in a graph step (its plan stays the same for every step the graph serves: split-k
// partitions past a sequence's context do nothing), the sequences' own otherwise.
func (b *cudaBackend) attnLens(rows int) []int32 {
	if !b.st.graphRun {
		return b.st.s.ContextLens
	}
	for len(b.caps) < rows {
		b.caps = append(b.caps, 0)
	}
	caps := b.caps[:rows]
	for i := range caps {
		caps[i] = int32(b.st.contextCap)
	}
	return caps
}

func (b *cudaBackend) runArgmax(op *stepOp, a *opArgs, p *opPlan) error {
	cols, n := op.in, p.rows
	tiles := (cols + 15) / 16
	chunks := (cols + argmaxChunk - 1) / argmaxChunk
	parts := argmaxPartialsParams{Out: b.idsAt(b.slot), Values: b.argValues, Indices: b.argIndices, Tiles: int32(tiles)}
	switch p.argmax {
	case argmaxGemm: // a partial a block
		parts.Tiles = int32(b.gemmArgmaxBlocks(cols, b.ops[p.target].in))
		b.stats.GemmArgmaxes++
	case argmaxChunks:
		params := argmaxChunksParams{Values: b.argValues, Indices: b.argIndices, Logits: a.x.ptr, Cols: int32(cols),
			Chunks: int32(chunks), Ld: int32(cols)}
		if err := launchDependent(b, b.fn.argmaxChunks, cuda.Dim3{X: chunks, Y: n}, cuda.Dim3{X: 256}, 0, &params); err != nil {
			return err
		}
		parts.Tiles = int32(chunks)
	}
	return launchDependent(b, b.fn.argmaxPartials, cuda.Dim3{X: n}, cuda.Dim3{X: 1024}, 0, &parts)
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
