//go:build cuda

package model

import (
	"errors"
	"fmt"
	"math"
)

// The recording of a step: each Backend op appends what it does as data (stepOp, for the plan) and its
// buffers (opArgs, for the executor), and mixes both into the graph signature. Nothing is decided here:
// what fuses with what and which kernel runs are the plan's (step_plan.go).

// stepRecord is the step being recorded.
type stepRecord struct {
	st   cudaStep
	ops  []stepOp
	args []opArgs
	sig  uint64  // FNV-1a over the tunings and the recorded ops (graph_cuda.go's key)
	err  error   // the first error of the step's recording
	caps []int32 // graph steps: the context cap repeated, as decode attention's HostContextLens
}

// opArgs is what the executor needs of a recorded op beyond the plan's view of it: its buffers and
// constants.
type opArgs struct {
	// d is what the op writes, x what it reads, r and a a norm's residual and addend (nil: none).
	d, x, r, a *cudaTensor
	// w is the op's weight (QKNorm: the queries' gains, w2 the keys'); bias a MatMul's bias (nil: none).
	w, w2, bias *cudaWeight
	// eps is a norm's epsilon (Softcap: the cap).
	eps   float32
	layer int
	// off is a GatherRows' rows in the metadata arena.
	off int
}

// record appends an op; words name the buffers and constants the plan does not see, for the graph
// signature.
func (b *cudaBackend) record(op stepOp, args opArgs, words ...uint64) {
	prev := -1
	if n := len(b.ops); n > 0 {
		prev = b.ops[n-1].rows
	}
	b.sig = op.hash(b.sig, prev)
	for _, w := range words {
		b.sig = fnvWord(b.sig, w)
	}
	b.ops = append(b.ops, op)
	b.args = append(b.args, args)
}

// fail keeps the step's first recording error.
func (b *cudaBackend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func tensorOf(t Tensor) *cudaTensor {
	if t.Data == nil {
		return nil
	}
	return t.Data.(*cudaTensor)
}

// id is t's identity for the plan (0: none).
func id(t *cudaTensor) tensorID {
	if t == nil {
		return 0
	}
	return tensorID(t.ptr)
}

func (b *cudaBackend) Embed(dst Tensor, table Weight) {
	d, w := tensorOf(dst), table.Data.(*cudaWeight)
	b.record(stepOp{kind: opEmbed, rows: dst.Rows, capacity: d.rows, graphable: true, dst: id(d), in: table.Cols},
		opArgs{d: d, w: w}, uint64(w.ptr))
}

func (b *cudaBackend) AddRMSNorm(dst, residual, add Tensor, w Weight, eps float32) {
	d, r, a, g := tensorOf(dst), tensorOf(residual), tensorOf(add), w.Data.(*cudaWeight)
	capacity := min(d.rows, r.rows)
	if a != nil {
		capacity = min(capacity, a.rows)
	}
	b.record(stepOp{kind: opNorm, rows: residual.Rows, capacity: capacity, graphable: true, dst: id(d), add: id(a), resid: id(r),
		in: residual.Cols}, opArgs{d: d, r: r, a: a, w: g, eps: eps}, uint64(g.ptr), uint64(math.Float32bits(eps)))
}

func (b *cudaBackend) MatMul(dst, x Tensor, w Weight) {
	d, xt, wt := tensorOf(dst), tensorOf(x), w.Data.(*cudaWeight)
	if wt.vector || x.Cols != w.Cols || dst.Cols != w.Rows || w.Bias != nil && w.Bias.Cols != w.Rows {
		b.fail(fmt.Errorf("cuda backend: matmul [%d][%d] · [%d][%d]ᵀ into [%d][%d]", x.Rows, x.Cols, w.Rows, w.Cols,
			dst.Rows, dst.Cols))
		return
	}
	var bias *cudaWeight
	if w.Bias != nil {
		bias = w.Bias.Data.(*cudaWeight)
	}
	op := stepOp{kind: opMatMul, rows: x.Rows, capacity: min(d.rows, xt.rows), graphable: true, dst: id(d), src: id(xt),
		out: w.Rows, in: w.Cols, bias: bias != nil}
	if wt.fp8 != nil {
		b.recordFP8(op, opArgs{d: d, x: xt, w: wt, bias: bias})
		return
	}
	if bias != nil {
		b.record(op, opArgs{d: d, x: xt, w: wt, bias: bias}, uint64(wt.ptr), uint64(bias.ptr))
		return
	}
	b.record(op, opArgs{d: d, x: xt, w: wt}, uint64(wt.ptr))
}

// AllReduceSum sums t's rows over the ranks of the tensor-parallel group the backend was built into
// (cudaConfig.coll), in place. It runs in a CUDA graph where the group's collective can be captured
// (NCCL); otherwise the step runs eagerly.
func (b *cudaBackend) AllReduceSum(t Tensor) {
	d := tensorOf(t)
	if b.cfg.coll == nil {
		b.fail(errors.New("cuda backend: all-reduce in a backend of no tensor-parallel group"))
		return
	}
	b.record(stepOp{kind: opAllReduce, rows: t.Rows, capacity: d.rows, graphable: b.cfg.coll.capturable(t.Rows * t.Cols), dst: id(d),
		src: id(d), in: t.Cols}, opArgs{d: d})
}

func (b *cudaBackend) QKNorm(qkv Tensor, q, k Weight, eps float32) {
	t, qw, kw := tensorOf(qkv), q.Data.(*cudaWeight), k.Data.(*cudaWeight)
	sh := &b.shape
	if qkv.Cols != sh.QKVCols() || q.Cols != sh.HeadDim || k.Cols != sh.HeadDim {
		b.fail(fmt.Errorf("cuda backend: QKNorm on a [%d][%d] tensor with gains of %d and %d, want %d columns and %d",
			qkv.Rows, qkv.Cols, q.Cols, k.Cols, sh.QKVCols(), sh.HeadDim))
		return
	}
	b.record(stepOp{kind: opQKNorm, rows: qkv.Rows, capacity: t.rows, graphable: true, dst: id(t), src: id(t)},
		opArgs{x: t, w: qw, w2: kw, eps: eps}, uint64(qw.ptr), uint64(kw.ptr), uint64(math.Float32bits(eps)))
}

func (b *cudaBackend) GeGLU(dst, gateUp Tensor) {
	d, g := tensorOf(dst), tensorOf(gateUp)
	b.record(stepOp{kind: opGeGLU, rows: dst.Rows, capacity: min(d.rows, g.rows), graphable: true, dst: id(d), src: id(g),
		out: dst.Cols, in: gateUp.Cols}, opArgs{d: d, x: g})
}

func (b *cudaBackend) Softcap(x Tensor, c float32) {
	t := tensorOf(x)
	b.record(stepOp{kind: opSoftcap, rows: x.Rows, capacity: t.rows, graphable: true, dst: id(t), src: id(t), in: x.Cols},
		opArgs{x: t, eps: c}, uint64(math.Float32bits(c)))
}

func (b *cudaBackend) RoPEWriteKV(qkv Tensor, layer int) {
	t := tensorOf(qkv)
	sh := &b.shape
	if t.qRot == 0 || qkv.Cols != sh.QKVCols() {
		b.fail(fmt.Errorf("cuda backend: RoPEWriteKV on a [%d][%d] tensor, want %d columns", qkv.Rows, qkv.Cols,
			sh.QKVCols()))
		return
	}
	k, v := b.layerKV(layer)
	b.record(stepOp{kind: opRoPE, rows: qkv.Rows, capacity: t.rows, graphable: true, src: id(t), window: sh.Layer(layer).Window},
		opArgs{x: t, layer: layer}, uint64(t.qRot), uint64(k), uint64(v), uint64(b.layerInvFreq(layer)),
		uint64(sh.Layer(layer).KVGroup))
}

func (b *cudaBackend) Attention(dst, qkv Tensor, layer int) {
	d, q := tensorOf(dst), tensorOf(qkv)
	if q.qRot == 0 {
		b.fail(errors.New("cuda backend: Attention before RoPEWriteKV on a Q/K/V tensor"))
		return
	}
	k, v := b.layerKV(layer)
	ls := b.shape.Layer(layer)
	b.record(stepOp{kind: opAttention, rows: qkv.Rows, capacity: min(d.rows, q.rows), graphable: true, dst: id(d), src: id(q),
		window: ls.Window}, opArgs{d: d, x: q, layer: layer}, uint64(q.qRot), uint64(k), uint64(v),
		uint64(b.layerInvFreq(layer)), uint64(ls.KVGroup))
}

func (b *cudaBackend) SwiGLU(dst, gateUp Tensor) {
	d, g := tensorOf(dst), tensorOf(gateUp)
	b.record(stepOp{kind: opSwiGLU, rows: dst.Rows, capacity: min(d.rows, g.rows), graphable: true, dst: id(d), src: id(g),
		out: dst.Cols, in: gateUp.Cols}, opArgs{d: d, x: g})
}

func (b *cudaBackend) GatherRows(dst, src Tensor, rows []int32) {
	d, s := tensorOf(dst), tensorOf(src)
	off, graphable := b.st.offLogits, true
	if !equalInt32(rows, b.st.s.LogitRows) { // not the step's logits rows: give them their own section
		off, graphable = len(b.host), false
		b.host = append(b.host, rows...)
	}
	b.record(stepOp{kind: opGather, rows: len(rows), capacity: min(d.rows, s.rows), graphable: graphable, dst: id(d), src: id(s),
		in: src.Cols}, opArgs{d: d, x: s, off: off}, uint64(off))
}

func equalInt32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// recordArgmax records the argmax of the first rows rows of t into the slot's ids (idsAt). After the LM
// head's product it may fuse into it (the plan decides at the rows it runs at): the product's epilogue
// leaves one (max, index) per token and tile of 16 logits (the skinny product, which still writes the
// logits) or per token and block (the skinny GEMM, which then does not write them: nothing reads a
// greedy step's logits), and ArgmaxPartials reads those instead of the logits. The partial maxima's
// buffer grows here, before the step runs, for either.
func (b *cudaBackend) recordArgmax(rows int, t *cudaTensor) error {
	cols := t.cols
	graphable := b.st.s != nil && rows == len(b.st.s.LogitRows)
	op := stepOp{kind: opArgmax, rows: rows, capacity: min(t.rows, b.idsCap), graphable: graphable, src: id(t), in: cols}
	f := b.facts()
	if ops := append(b.ops, op); fuseTarget(ops, len(ops)-1, &f) >= 0 {
		if err := b.ensureArgmaxPartials(gemvMaxTokens * ((cols + 15) / 16)); err != nil {
			return err
		}
	}
	chunks := (cols + argmaxChunk - 1) / argmaxChunk
	if err := b.ensureArgmaxPartials(chunks * max(rows, b.st.rows)); err != nil {
		return err
	}
	b.record(op, opArgs{x: t}, uint64(b.argValues))
	return nil
}

// rowThreads is the block size of a one-block-per-row kernel over cols elements: about four elements a
// thread, a multiple of 32, at most 1024.
func rowThreads(cols int) int { return min(1024, max(32, (cols/4+31)/32*32)) }
