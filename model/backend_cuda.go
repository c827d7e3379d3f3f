//go:build cuda

package model

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"unsafe"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/model/kernels"
	"github.com/gollm/gollm/weights"
)

// cudaBackend runs the forward pass on an NVIDIA GPU: cuBLAS GemmEx for the matrix products (16-bit or
// float32 inputs, float32 accumulation), the kernels of model/kernels for the rest, the decode-attention
// kernels of package attention for decode steps they cover and the prefill kernel for everything else.
//
// Dtypes: weight matrices, the KV pages and the inputs of the matrix products (AddRMSNorm's dst,
// Attention's, SwiGLU's and GatherRows' outputs) are of one compute dtype (bfloat16, float16 or float32,
// see cudaConfig); the products' outputs (cuBLAS accumulates in float32 and stores float32: Q/K/V, the
// sublayer outputs, gate/up, the logits), the residual stream (Embed's dst, AddRMSNorm's residual) and
// the norm gains are float32. So a value is rounded to 16 bits only where it enters a product or the
// cache, never on its way between layers, and the logits are float32. Every activation buffer is
// allocated at 4 bytes an element and holds the dtype of its role.
//
// Ops are recorded, not run, as the model calls them; CopyToHost or PickAsync then issues the whole step
// under the device's lock: it uploads the step's metadata in one copy (on stream up), queues the recorded
// ops on the kernels' stream and copies the results back, CopyToHost waiting for them, PickAsync not: its
// step's token ids stay on the device in the step's ring slot (the next step's embedding may read them
// there, Step.InputFrom) and go to the slot's page-locked landing place on stream down, so that the next
// step can be queued, and run, before they are read. A decode step (one token per sequence, at most
// maxGraphBatch sequences) is padded to its batch bucket (graphBucket) and run as a CUDA graph: the first
// step of a bucket and slot runs eagerly (which also warms cuBLAS), the second is captured, later ones
// replay it. The graph is keyed by the bucket, the ring slot, the block-table width (from a power-of-two
// context cap) and a hash of every op's kernel and buffers, so a workspace regrown by the model or a new
// metadata buffer gets a new graph rather than a stale one.
type cudaBackend struct {
	shape Shape
	cfg   cudaConfig

	dev    *cuda.Device
	ownDev bool
	mod    *cuda.Module
	blas   *cuda.BLAS
	stream *cuda.Stream
	// up carries each step's metadata upload, down its picks' download (see upload and PickAsync): off
	// the kernels' stream, ordered by the slots' events, so that neither copy sits between two steps'
	// kernels. Two streams, so that an upload never queues behind the step before's download.
	up, down *cuda.Stream
	fn       cudaFunctions
	gemv     *gemvKernels
	gemm     *gemmKernels // nil: every product the skinny kernel leaves goes to cuBLAS
	tune     gemvTuning
	decode   *attention.CUDAKernels // nil when the decode kernels could not be loaded
	pre      *attention.CUDAPrefill

	dtype      cuda.DataType
	elem       int  // bytes per element of dtype
	decodeFits bool // the decode kernels cover this head size, page size and dtype
	invFreq    cuda.DevicePtr
	kCache     []cuda.DevicePtr // [layer] [NumBlocks][BlockSize][NumKVHeads][HeadDim] of dtype
	vCache     []cuda.DevicePtr
	splitWS    cuda.DevicePtr
	// partials holds the partial products of a product split by k (see splitOf): splitMaxParts ×
	// gemvMaxTokens rows of HiddenSize floats.
	partials cuda.DevicePtr
	allocs   *cuda.Buffers // weights, KV pages, activations, workspaces: what Close frees at once

	// Step metadata: host arena built by BeginStep (and GatherRows), staged in page-locked memory of the
	// step's ring slot and uploaded in one asynchronous copy on stream up into the slot's half of
	// meta (metaCap int32 each), which the step's kernels wait for (the slot's uploaded event): the
	// copy runs while the step before is still on the device.
	host    []int32
	meta    cuda.DevicePtr
	metaCap int // int32 elements
	// ids holds the picked token ids (argmax or draw) of the steps of both slots, idsCap for each (see
	// idsAt): a step writes its slot's and its Embed reads the previous step's (Step.InputFrom).
	ids    cuda.DevicePtr
	idsCap int
	caps   []int32 // graph steps: the context cap repeated, as the decode planner's HostContextLens

	// Ring of two slots for steps in flight (PickAsync returns before its step ends, and the engine
	// queues the next step before reading the picks): each slot has its page-locked metadata staging,
	// landing place of the picked ids, sampler arguments, and the event that marks its step's end.
	slots [2]stepSlot
	slot  int // the slot the next step uses

	// The argmax's partial maxima (see ensureArgmaxPartials): argCap values and indices.
	argValues, argIndices cuda.DevicePtr
	argCap                int

	// The sampler's per-row arguments (see PickAsync): sampleCap rows on the device and, per ring slot,
	// page-locked.
	sampleArgs cuda.DevicePtr
	sampleCap  int
	// sampleKept, when set (tests), receives each row's count of tokens the draw chose from.
	sampleKept cuda.DevicePtr

	st     cudaStep
	ops    []cudaOp
	lastMM *matmulOp // the last recorded op, when it is a MatMul (the ops after it may fuse into it)
	// lastNorm is the last recorded op when it is an AddRMSNorm (the MatMul after it may fold it),
	// lastEmbed when it is an Embed (the norm after it may fold into it).
	lastNorm  *normOp
	lastEmbed *embedOp
	// normSS holds the folded norms' sums of squares, a slot of normMaxTokens fixed-point uint64 for each
	// fold of a step (normSlots; see normOp); norms are the step's norms that may fold, in recording
	// order (norms[i].index == i), and foldMemo whether they do at the rows the step runs at.
	normSS   cuda.DevicePtr
	norms    []*normOp
	foldMemo foldMemo
	attnOut  *cudaTensor // the output of the last recorded Attention
	sig      uint64      // FNV-1a over the recorded ops' kernels and buffers
	err      error       // the first error of the step's recording
	graphs   map[graphKey]*graphEntry
	// graphsOff is set when capture failed once: later steps run eagerly. pdlOff is set when a capture
	// with programmatic dependent launches failed (the capture is retried without).
	graphsOff, pdlOff bool
	stats             cudaStats
	// failOp, when positive, makes eager fail before the step's failOp-th op (tests: a step that stops
	// part way, after some of its ops ran).
	failOp    int
	lastGraph *cuda.GraphExec // the graph the last step launched (benchmarks time it alone)
	// prof, when set, makes the next steps run op by op with an event after each (see profile).
	prof *stepProfile
	// pdlStep: this step launches with programmatic dependent launch (see BeginStep and pdlNow).
	pdlStep bool
}

// cudaConfig is how the CUDA backend is built.
type cudaConfig struct {
	// dtype is the compute dtype: weight matrices, activations and KV pages.
	dtype weights.DType
	// dev is a device to use and leave open at Close; nil opens GPU 0 and closes it at Close.
	dev *cuda.Device
	// noGraphs runs every step eagerly.
	noGraphs bool
}

// cudaStats counts how a CUDA backend ran its steps (for tests and benchmarks).
type cudaStats struct {
	// Eager steps ran op by op (a bucket's first step among them); Captured recorded a graph; Replayed
	// launched one. CaptureFailed is why graphs were switched off, if they were.
	Eager, Captured, Replayed int
	CaptureFailed             error
	// FoldedNorms counts the norms queued folded into the products around them (eagerly or into a
	// graph's capture; see normOp).
	FoldedNorms int
	// GemmArgmaxes counts the greedy picks queued as the skinny GEMM's argmax epilogue (the logits not
	// written; see recordArgmax), SplitProducts the products queued split (see splitOf).
	GemmArgmaxes, SplitProducts int
	// PDLCaptureFailed is why a capture with programmatic dependent launches failed, if one did.
	PDLCaptureFailed error
}

const (
	// maxGraphBatch is the largest decode batch run as a CUDA graph (graphBucket).
	maxGraphBatch = 256
	// minGraphContext is the smallest context cap of a graph (a power of two, in tokens).
	minGraphContext = 256
	// splitWorkspaceBytes holds the split-k decode partials; a plan that needs more runs grouped.
	splitWorkspaceBytes = 32 << 20
)

// cudaFunctions are the model's kernels for the compute dtype.
type cudaFunctions struct {
	embed, addRMSNorm, rope, swiglu, gather *cuda.Function
	argmaxChunks, argmaxPartials            *cuda.Function
	sample                                  *cuda.Function // SampleRows (kernels/sample.cu)
}

// cudaTensor is an activation buffer: rows × cols elements of 4 bytes (enough for float32 or the
// compute dtype). A tensor as wide as the fused Q/K/V projection also carries qRot, the rotated queries
// [rows][NumHeads·HeadDim] in the compute dtype that RoPEWriteKV writes and Attention reads.
type cudaTensor struct {
	ptr        cuda.DevicePtr
	rows, cols int
	qRot       cuda.DevicePtr
	// ropeMM is the product RoPEWriteKV of this step asked to fuse the rotation into (nil: none), for
	// Attention to tell whether the rotation is still to do (ropeInAttention).
	ropeMM *matmulOp
}

// cudaWeight is a parameter on the device: a matrix in the compute dtype or a float32 vector.
type cudaWeight struct {
	ptr    cuda.DevicePtr
	vector bool
}

// cudaStep is the step BeginStep prepared.
type cudaStep struct {
	s                   *Step
	numTokens, numSeqs  int
	decode              bool // every sequence has one query row
	graph               bool // a decode step that may run as the graph of bucket rows
	rows                int  // graph: the bucket; else numTokens
	seqs                int  // graph: the bucket; else numSeqs
	stride              int  // block-table row length
	contextCap          int  // graph: power-of-two bound on every context
	items, paddedItems  int  // prefill items of the real sequences, and with the padding ones
	graphRun            bool // the ops are being queued padded to rows (a graph or its warm-up)
	offTokens, offPos   int  // int32 offsets into the metadata arena
	offSlots, offCtx    int
	offLogits, offItems int
	offTables, offFrom  int
}

// cudaOp is one recorded op: its natural row count, the smallest row capacity of its tensors, and how to
// queue it for a given number of rows. name (and for matrix products n × k) label it in profiles.
type cudaOp struct {
	rows, capacity int
	graphable      bool
	run            func(rows int) error
	name           string
	n, k           int
}

// matmulOp is a recorded MatMul: what it multiplies and the epilogue a following op fused into it.
type matmulOp struct {
	d, x    *cudaTensor
	w       *cudaWeight
	out, in int
	epi     gemvEpilogue
	// residual, when set, is the residual stream the AddRMSNorm after this product adds its output to:
	// the product accumulates into it (cuBLAS with β = 1, the skinny GEMM and the skinny product with
	// their accumulate flags) instead of writing d, and the norm adds nothing.
	residual *cudaTensor
	// normOut is the norm after this product when the next product folds it (see normOp); normIn the
	// norm before this product, when it folds it.
	normOut, normIn *normOp
}

// accumulates reports whether mm adds its product into mm.residual (leaving d unwritten: the model reads
// it only through that AddRMSNorm). Every kernel that runs a plain product can, at any row count.
func (b *cudaBackend) accumulates(mm *matmulOp) bool {
	return mm != nil && mm.residual != nil && mm.epi.mode == gemvPlain
}

// splitMaxParts bounds the parts of a product split by k (productSplit).
const splitMaxParts = 4

// splitRowsMinOut is the fewest output rows of a product split by its output rows rather than by k.
const splitRowsMinOut = 4096

// productSplit is how a product on cuBLAS is split into parts computed by one strided-batched call.
type productSplit struct {
	parts int  // 1: whole
	rows  bool // the output rows dealt out (each part writes or accumulates into its own rows); else k
}

// splitOf is how mm is split at rows rows. A product that runs on cuBLAS at gemvMaxTokens rows or fewer
// and accumulates into the residual (the O and down products of a 9-64-row step) is computed in two
// parts: with at least splitRowsMinOut output rows, two halves of them, each accumulating into its rows
// of the residual (Llama-3-8B); otherwise two halves of k, into b.partials, which the AddRMSNorm after it
// adds to the residual it reads anyway (Llama-3.2-1B). cuBLAS streams either form's weights faster than
// the whole product's, whose k slices it sums itself at the product's end; the k halves' sum costs the
// norm two more reads, which the row halves do not (BenchmarkCUDADecode on the H100, graph GPU ms: 8B
// batch 64 9.15 with k halves → 9.05 with row halves, 1B batch 64 2.00 → 2.02; the k halves against the
// whole product −0.07 and −0.05; docs/bench/e2e-h100-decode.md, fourteenth and fifteenth rounds).
// gemvTuning.SplitK < 0 turns both off, > 0 forces k parts; gemvTuning.SplitRows forces row halves.
// (Dealing the Q/K/V product's rows out the same way, in 2 or 4 parts, left the step level.)
func (b *cudaBackend) splitOf(mm *matmulOp, rows int) productSplit {
	whole := productSplit{parts: 1}
	if !b.accumulates(mm) || mm.out != b.shape.HiddenSize || b.tune.SplitK < 0 || rows > gemvMaxTokens ||
		b.gemvServes(rows, mm.in) || b.gemmTakes(rows, mm.out, mm.in, false) {
		return whole
	}
	if b.tune.SplitK == 0 && (b.tune.SplitRows || mm.out >= splitRowsMinOut) && mm.out%128 == 0 {
		return productSplit{parts: 2, rows: true}
	}
	for _, parts := range []int{b.tune.SplitK, 2} {
		if parts > 1 && parts <= splitMaxParts && mm.in%(64*parts) == 0 {
			return productSplit{parts: parts}
		}
	}
	return whole
}

// normOp is a recorded AddRMSNorm. When the products on both sides of it run the skinny kernel (≤ 8 rows,
// bfloat16) and the one before it accumulates into the residual, the norm is folded into them
// (kernels/gemv.cu, "Folded norm"): the producer writes residual·w and adds each row's sum of squares
// into the fold's slot of normSS, the consumer scales its output by each row's 1/rms, and the norm's own
// kernel is not launched: one kernel boundary fewer per norm of a decode step. The first layer's input
// norm folds into the Embed before it (which has whole rows: it stores each row's sum), the final norm
// into the LM head when the step gathers no rows (a decode step).
//
// The slots: fold i of a step (index, in recording order) adds into slot i, which the
// producer of fold i−1 cleared; fold 0 is the Embed's, which stores its sums. So every slot is written
// whole or cleared earlier in the same step before it is added into, and a step that stopped part way
// (an error) leaves nothing the next step reads (TestCUDAStepAfterFailure). With one fold a step there is
// no other slot to clear it: no fold.
type normOp struct {
	dst                *cudaTensor
	w                  *cudaWeight
	eps                float32
	cols               int
	producer, consumer *matmulOp // the products before and after it (nil: none that can fold it)
	embed              *embedOp  // the first layer's input norm: the Embed before it, which folds it too
	index              int       // its fold's slot, when consumer is set
}

// normMaxTokens bounds the steps whose norms fold (NORM_MAX_TOKENS of kernels/gemv.cu: the one-token-tile
// kernel).
const normMaxTokens = 8

// normFolds reports whether n is folded into the products around it at rows rows: when every norm of the
// step can be (the ring of slots needs each fold of the step to run, in order), or none is.
func (b *cudaBackend) normFolds(n *normOp, rows int) bool {
	if n == nil || n.consumer == nil {
		return false
	}
	if b.foldMemo.rows != rows {
		ok := !b.tune.NoNormFold && len(b.norms) >= 2 && len(b.norms) <= normSlots(b.shape) &&
			b.dtype == cuda.BFloat16 && b.normSS != 0 && rows <= normMaxTokens
		for _, m := range b.norms {
			ok = ok && b.gemvServes(rows, m.consumer.in) &&
				(m.embed != nil || m.producer != nil && b.accumulates(m.producer) && b.gemvServes(rows, m.producer.in))
		}
		b.foldMemo.rows, b.foldMemo.ok = rows, ok
	}
	return b.foldMemo.ok
}

// foldMemo is normFolds' answer for one row count (rows 0: none yet).
type foldMemo struct {
	rows int
	ok   bool
}

// normSlots is how many folds a step may have: every norm of the model (two a layer and the final one).
func normSlots(s Shape) int { return 2*s.NumLayers + 1 }

// normSlot is the address of fold i's sums of squares.
func (b *cudaBackend) normSlot(i int) cuda.DevicePtr {
	return b.normSS.Add(int64(8 * normMaxTokens * i))
}

// fused reports whether the product ran with epilogue mode at rows rows (the op that fused into it then
// has nothing left to do): on the skinny kernel, or SwiGLU or argmax on the skinny GEMM (argmax only
// where its plan keeps k whole, as the epilogue needs: the same sums as the logits Forward returns).
func (b *cudaBackend) fused(mm *matmulOp, mode gemvMode, rows int) bool {
	return mm != nil && mm.epi.mode == mode && (b.gemvServes(rows, mm.in) ||
		mode == gemvSwiGLU && b.gemmTakes(rows, mm.out, mm.in, true) ||
		mode == gemvArgmax && b.gemmTakes(rows, mm.out, mm.in, false) && b.gemmPlan(mm.out, mm.in).ks == 1)
}

// graphKey names a captured step: its bucket, its ops (sig) and the ring slot whose pick buffers it
// names (a step reads the other slot's picks and writes its own's).
type graphKey struct {
	rows, stride, contextCap, slot int
	sig                            uint64
}

// graphEntry is a bucket's graph: seen once eagerly, then captured.
type graphEntry struct {
	exec *cuda.GraphExec
}

// computeDType maps a weights dtype to the device's.
func computeDType(d weights.DType) (cuda.DataType, int, string, error) {
	switch d {
	case weights.DTypeBF16:
		return cuda.BFloat16, 2, "bf16", nil
	case weights.DTypeF16:
		return cuda.Float16, 2, "f16", nil
	case weights.DTypeF32:
		return cuda.Float32, 4, "f32", nil
	}
	return 0, 0, "", fmt.Errorf("cuda backend: compute dtype %v not supported", d)
}

// newCUDABackendFunc returns the constructor of a CUDA backend built as cfg says.
func newCUDABackendFunc(cfg cudaConfig) NewBackendFunc {
	return func(shape Shape) (Backend, error) { return newCUDABackend(shape, cfg) }
}

func newCUDABackend(shape Shape, cfg cudaConfig) (_ *cudaBackend, err error) {
	if shape.NumLayers <= 0 || shape.NumBlocks < 0 || shape.BlockSize <= 0 || shape.NumKVHeads <= 0 ||
		shape.HeadDim <= 0 || shape.NumHeads <= 0 || shape.NumHeads%shape.NumKVHeads != 0 ||
		len(shape.RopeInvFreq) != shape.HeadDim/2 {
		return nil, fmt.Errorf("cuda backend: invalid shape %+v", shape)
	}
	b := &cudaBackend{shape: shape, cfg: cfg, dev: cfg.dev, graphs: map[graphKey]*graphEntry{}}
	var tn string
	if b.dtype, b.elem, tn, err = computeDType(cfg.dtype); err != nil {
		return nil, err
	}
	if b.dev == nil {
		if b.dev, err = cuda.Open(0); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
		b.ownDev = true
	}
	b.allocs = b.dev.NewBuffers()
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if b.mod, err = b.dev.LoadModule(kernels.Fatbin); err != nil {
		return nil, fmt.Errorf("cuda backend: model kernels: %w", err)
	}
	for _, k := range []struct {
		dst  **cuda.Function
		name string
	}{
		{&b.fn.embed, "Embed"}, {&b.fn.addRMSNorm, "AddRMSNorm"}, {&b.fn.rope, "RoPEWriteKV"},
		{&b.fn.swiglu, "SwiGLU"}, {&b.fn.gather, "GatherRows"}, {&b.fn.argmaxChunks, "ArgmaxChunks"},
		{&b.fn.argmaxPartials, "ArgmaxPartials"}, {&b.fn.sample, "SampleRows"},
	} {
		name := k.name + "_" + tn
		switch k.name {
		case "ArgmaxChunks":
			name = k.name + "_f32" // the logits are float32 whatever the compute dtype
		case "ArgmaxPartials", "SampleRows":
			name = k.name
		}
		if *k.dst, err = b.mod.Function(name); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	}
	if b.gemv, err = loadGemvKernels(b.mod, tn); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if b.gemm, err = loadGemmKernels(b.dev, tn); err != nil {
		// A driver that cannot compile the GEMM's PTX (older than CUDA 12) keeps cuBLAS.
		slog.Warn("cuda backend: no skinny GEMM; products of 9-64 rows stay on cuBLAS", "err", err)
		b.gemm, err = nil, nil
	}
	b.tune = defaultGemvTuning
	if b.pre, err = attention.LoadCUDAPrefill(b.mod, b.dev.Info().SharedPerBlockOptin); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if !b.pre.Supports(shape.HeadDim, b.dtype) {
		return nil, fmt.Errorf("cuda backend: head_dim %d: %w", shape.HeadDim, attention.ErrUnsupported)
	}
	bs := shape.BlockSize
	b.decodeFits = (shape.HeadDim == 64 || shape.HeadDim == 128) && bs >= 8 && bs <= 64 && bs&(bs-1) == 0
	if b.decodeFits {
		if b.decode, err = attention.LoadCUDAKernels(b.dev); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
		if b.splitWS, err = b.alloc(splitWorkspaceBytes); err != nil {
			return nil, err
		}
	}
	if b.blas, err = b.dev.LoadBLAS(); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if b.stream, err = b.dev.NewStream(); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if b.up, err = b.dev.NewStream(); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if b.down, err = b.dev.NewStream(); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if err = b.blas.SetStream(b.stream); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if b.partials, err = b.alloc(int64(4 * splitMaxParts * gemvMaxTokens * shape.HiddenSize)); err != nil {
		return nil, err
	}
	ssBytes := int64(8 * normMaxTokens * normSlots(shape))
	if b.normSS, err = b.alloc(ssBytes); err != nil {
		return nil, err
	}
	if err := b.dev.Fill32(b.normSS, 0, ssBytes/4, nil); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if err := b.dev.Synchronize(); err != nil { // the fill is on the default stream, the steps on b.stream
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if b.invFreq, err = b.alloc(int64(4 * len(shape.RopeInvFreq))); err != nil {
		return nil, err
	}
	if err = b.dev.CopyToDevice(b.invFreq, cuda.Bytes(shape.RopeInvFreq)); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if shape.NumBlocks > 0 {
		if err = b.allocateKV(shape.NumBlocks); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// alloc allocates device memory that Close frees.
func (b *cudaBackend) alloc(n int64) (cuda.DevicePtr, error) {
	p, err := b.allocs.Alloc(max(n, 4))
	if err != nil {
		return 0, fmt.Errorf("cuda backend: %w", err)
	}
	return p, nil
}

// kvBytesPerBlock is one page of K and V across all layers.
func (b *cudaBackend) kvBytesPerBlock() int64 {
	s := &b.shape
	return 2 * int64(s.NumLayers) * int64(s.BlockSize) * int64(s.NumKVHeads) * int64(s.HeadDim) * int64(b.elem)
}

// allocateKV allocates numBlocks pages of K and V per layer.
func (b *cudaBackend) allocateKV(numBlocks int) error {
	s := &b.shape
	perLayer := int64(numBlocks) * int64(s.BlockSize) * int64(s.NumKVHeads) * int64(s.HeadDim) * int64(b.elem)
	b.kCache = make([]cuda.DevicePtr, s.NumLayers)
	b.vCache = make([]cuda.DevicePtr, s.NumLayers)
	for l := range s.NumLayers {
		var err error
		if b.kCache[l], err = b.alloc(perLayer); err != nil {
			return fmt.Errorf("cuda backend: KV pool of %d blocks: %w", numBlocks, err)
		}
		if b.vCache[l], err = b.alloc(perLayer); err != nil {
			return fmt.Errorf("cuda backend: KV pool of %d blocks: %w", numBlocks, err)
		}
		// Zeroed: a page's unwritten slots then hold finite values (never read by a correct step).
		for _, p := range []cuda.DevicePtr{b.kCache[l], b.vCache[l]} {
			if err := b.dev.Fill32(p, 0, perLayer/4, nil); err != nil {
				return fmt.Errorf("cuda backend: %w", err)
			}
		}
	}
	if err := b.dev.Synchronize(); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	s.NumBlocks = numBlocks
	return nil
}

// AllocateKV sizes the KV pool like vLLM's gpu_memory_utilization: the pages fill what is free once the
// weights and the workspace are allocated, less the share of the device's memory (1 − utilization) kept
// for cuBLAS, graphs and the rest. It returns the number of pages per layer.
func (b *cudaBackend) AllocateKV(utilization float64) (int, error) {
	if len(b.kCache) > 0 {
		return 0, errors.New("cuda backend: KV pool already allocated")
	}
	if !(utilization > 0 && utilization <= 1) {
		return 0, fmt.Errorf("cuda backend: memory utilization %v not in (0, 1]", utilization)
	}
	free, total, err := b.dev.MemInfo()
	if err != nil {
		return 0, fmt.Errorf("cuda backend: %w", err)
	}
	budget := free - int64((1-utilization)*float64(total))
	n := budget / b.kvBytesPerBlock()
	if n < 1 {
		return 0, fmt.Errorf("cuda backend: no memory left for the KV pool (%d MiB free of %d MiB, utilization %v)",
			free>>20, total>>20, utilization)
	}
	if err := b.allocateKV(int(n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (b *cudaBackend) Upload(t *weights.Tensor) (Weight, error) {
	w := Weight{Rows: 1}
	switch len(t.Shape) {
	case 1:
		w.Cols = t.Shape[0]
	case 2:
		w.Rows, w.Cols = t.Shape[0], t.Shape[1]
	default:
		return Weight{}, fmt.Errorf("cuda backend: tensor %q: rank %d, want 1 or 2", t.Name, len(t.Shape))
	}
	n := w.Rows * w.Cols
	if want := n * t.DType.Size(); len(t.Data) != want || want == 0 {
		return Weight{}, fmt.Errorf("cuda backend: tensor %q: %d bytes of %v for shape %v", t.Name, len(t.Data),
			t.DType, t.Shape)
	}
	var data []byte
	cw := &cudaWeight{vector: len(t.Shape) == 1}
	switch {
	case cw.vector:
		data = cuda.Bytes(t.Float32())
	case t.DType == b.cfg.dtype:
		data = t.Data // straight from the checkpoint's memory map
	default:
		f := t.Float32()
		data = make([]byte, n*b.elem)
		switch b.dtype {
		case cuda.BFloat16:
			dtype.EncodeBF16(data, f)
		case cuda.Float16:
			dtype.EncodeF16(data, f)
		default:
			dtype.EncodeF32(data, f)
		}
	}
	var err error
	if cw.ptr, err = b.alloc(int64(len(data))); err != nil {
		return Weight{}, fmt.Errorf("cuda backend: tensor %q: %w", t.Name, err)
	}
	if err := b.dev.CopyToDevice(cw.ptr, data); err != nil {
		return Weight{}, fmt.Errorf("cuda backend: tensor %q: %w", t.Name, err)
	}
	w.Data = cw
	return w, nil
}

func (b *cudaBackend) NewTensor(rows, cols int) (Tensor, error) {
	if rows <= 0 || cols <= 0 {
		return Tensor{}, fmt.Errorf("cuda backend: tensor [%d][%d]: dimensions must be positive", rows, cols)
	}
	t := &cudaTensor{rows: rows, cols: cols}
	var err error
	if t.ptr, err = b.alloc(4 * int64(rows) * int64(cols)); err != nil {
		return Tensor{}, err
	}
	// Zeroed, so that the padding rows of a graph step never read uninitialised memory.
	if err := b.dev.Fill32(t.ptr, 0, int64(rows)*int64(cols), nil); err != nil {
		return Tensor{}, fmt.Errorf("cuda backend: %w", err)
	}
	if cols == b.shape.QKVCols() {
		qCols := int64(b.shape.NumHeads * b.shape.HeadDim)
		if t.qRot, err = b.alloc(int64(rows) * qCols * int64(b.elem)); err != nil {
			return Tensor{}, err
		}
		if err := b.dev.Fill32(t.qRot, 0, int64(rows)*qCols*int64(b.elem)/4, nil); err != nil {
			return Tensor{}, fmt.Errorf("cuda backend: %w", err)
		}
	}
	if err := b.dev.Synchronize(); err != nil {
		return Tensor{}, fmt.Errorf("cuda backend: %w", err)
	}
	return Tensor{Rows: rows, Cols: cols, Data: t}, nil
}

// Close frees everything and, when the backend opened the device, closes it.
func (b *cudaBackend) Close() error {
	var errs []error
	if b.dev == nil {
		return nil
	}
	// The steps in flight hand over their picks first, so that a Pick waited for after Close returns
	// them instead of reaching for freed events.
	errs = append(errs, b.quiesce())
	for _, s := range []*cuda.Stream{b.stream, b.up, b.down} {
		if s != nil {
			errs = append(errs, s.Synchronize())
		}
	}
	for _, g := range b.graphs {
		if g.exec != nil {
			errs = append(errs, g.exec.Destroy())
		}
	}
	b.graphs = nil
	if b.blas != nil {
		errs = append(errs, b.blas.Destroy())
		b.blas = nil
	}
	errs = append(errs, b.stream.Destroy(), b.up.Destroy(), b.down.Destroy())
	b.stream, b.up, b.down = nil, nil, nil
	errs = append(errs, b.allocs.Free())
	for _, p := range []cuda.DevicePtr{b.meta, b.ids, b.argValues, b.argIndices, b.sampleArgs} {
		errs = append(errs, b.dev.Free(p))
	}
	b.meta, b.ids, b.argValues, b.argIndices, b.sampleArgs = 0, 0, 0, 0, 0
	for i := range b.slots {
		sl := &b.slots[i]
		errs = append(errs, b.dev.FreeHost(sl.meta), b.dev.FreeHost(sl.ids), b.dev.FreeHost(sl.sample))
		for _, ev := range []*cuda.Event{sl.uploaded, sl.picked, sl.done} {
			if ev != nil {
				errs = append(errs, ev.Destroy())
			}
		}
		sl.meta, sl.ids, sl.sample, sl.uploaded, sl.picked, sl.done, sl.inflight = nil, nil, nil, nil, nil, nil, nil
	}
	b.sampleCap = 0
	if b.mod != nil {
		errs = append(errs, b.mod.Unload())
		b.mod = nil
	}
	if b.gemm != nil {
		errs = append(errs, b.gemm.mod.Unload())
		b.gemm = nil
	}
	if b.decode != nil {
		errs = append(errs, b.decode.Close())
		b.decode = nil
	}
	if b.ownDev {
		errs = append(errs, b.dev.Close())
	}
	b.dev = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cuda backend: close: %w", err)
	}
	return nil
}

// Stats returns how the backend's steps ran so far.
func (b *cudaBackend) Stats() cudaStats { return b.stats }

// ---------------------------------------------------------------------------------------------------
// Steps.

// BeginStep lays the step's metadata out in the host arena; CopyToHost uploads it. A decode step of at
// most maxGraphBatch sequences is padded to its bucket: padding rows have token 0, position 0, slot −1
// (nothing stored), a context of one token in page 0, and logits row 0.
func (b *cudaBackend) BeginStep(s *Step) error {
	if len(b.kCache) == 0 {
		return errors.New("cuda backend: no KV pool allocated")
	}
	b.ops, b.sig, b.err, b.lastMM, b.lastNorm, b.attnOut = b.ops[:0], fnvOffset, nil, nil, nil, nil
	b.norms, b.foldMemo, b.lastEmbed = b.norms[:0], foldMemo{}, nil
	// The kernels' tuning picks the launches a graph holds.
	for _, w := range []int{b.tune.MaxTokens, b.tune.RB, b.tune.KS, b.tune.Pipe, b.tune.Plan, b.tune.GemmWarps,
		b.tune.GemmKS, b.tune.GemmStages, b.tune.GemmFlags, int(b.tune.GemmMinBytes), int(b.tune.GemmSwiGLUMinBytes), b.tune.PDLRows,
		b.tune.NormFoldDiag, b.tune.SplitK} {
		b.sig = fnvWord(b.sig, uint64(w))
	}
	if b.tune.Gemm {
		b.sig = fnvString(b.sig, "gemm")
	}
	if b.tune.NoFuse {
		b.sig = fnvString(b.sig, "nofuse")
	}
	if b.tune.NoNormFold {
		b.sig = fnvString(b.sig, "nonormfold")
	}
	if b.tune.NoAttnRoPE {
		b.sig = fnvString(b.sig, "noattnrope")
	}
	if b.tune.SplitRows {
		b.sig = fnvString(b.sig, "splitrows")
	}
	for _, name := range b.tune.Skip {
		b.sig = fnvString(b.sig, "skip "+name)
	}
	b.sig = fnvWord(b.sig, uint64(b.tune.AttnPartition))
	if b.decode != nil && b.decode.Tuning != (attention.CUDATuning{}) { // benchmarks' switches only
		b.sig = fnvString(b.sig, fmt.Sprintf("attention %+v", b.decode.Tuning))
	}
	numTokens, numSeqs := len(s.Tokens), len(s.ContextLens)
	st := cudaStep{s: s, numTokens: numTokens, numSeqs: numSeqs, decode: true}
	for seq := range numSeqs {
		st.decode = st.decode && s.QueryStart[seq+1]-s.QueryStart[seq] == 1
	}
	bs := b.shape.BlockSize
	maxCtx := 0
	for _, c := range s.ContextLens {
		maxCtx = max(maxCtx, int(c))
	}
	st.rows, st.seqs = numTokens, numSeqs
	st.graph = st.decode && !b.cfg.noGraphs && !b.graphsOff && numTokens <= maxGraphBatch &&
		len(s.LogitRows) <= numTokens
	if st.graph {
		st.rows = graphBucket(numTokens)
		st.seqs = st.rows
		st.contextCap = max(minGraphContext, nextPow2(maxCtx))
		st.stride = (st.contextCap + bs - 1) / bs
	} else {
		st.stride = max(1, (maxCtx+bs-1)/bs)
	}
	// Programmatic dependent launch only for steps of at most pdlMaxRows rows: it hides launch gaps where
	// kernels are short, but from 16 rows on a kernel with more than one wave of blocks (split-k
	// attention, the chunked argmax) lets its dependent's blocks take SM slots early and wait in them
	// (BenchmarkCUDADecode on the H100: 0.8-3% slower at batch 16 and 64 with it).
	pdlRows := pdlMaxRows
	if b.tune.PDLRows > 0 {
		pdlRows = b.tune.PDLRows
	}
	b.pdlStep = st.rows <= pdlRows && b.usePDL()
	if b.pdlStep {
		b.sig = fnvString(b.sig, "pdl")
	}
	numLogitRows := len(s.LogitRows)
	if st.graph {
		numLogitRows = st.rows
	}
	h := b.host[:0]
	pad := func(src []int32, n int, fill int32) {
		h = append(h, src...)
		for range n - len(src) {
			h = append(h, fill)
		}
	}
	st.offTokens = len(h)
	pad(s.Tokens, st.rows, 0)
	st.offFrom = len(h)
	pad(s.InputFrom, st.rows, -1)
	st.offPos = len(h)
	pad(s.Positions, st.rows, 0)
	st.offSlots = len(h)
	pad(s.SlotMapping, st.rows, -1)
	st.offCtx = len(h)
	pad(s.ContextLens, st.seqs, 1)
	st.offLogits = len(h)
	pad(s.LogitRows, numLogitRows, 0)
	st.offItems = len(h)
	h = attention.PrefillItems(h, s.QueryStart, b.shape.NumHeads/b.shape.NumKVHeads)
	st.items = (len(h) - st.offItems) / 4
	if st.seqs > numSeqs { // the padding sequences' items: one row each, rows numTokens, numTokens+1, …
		padStarts := make([]int32, 0, st.seqs-numSeqs+1)
		for r := numTokens; r <= st.rows; r++ {
			padStarts = append(padStarts, int32(r))
		}
		first := len(h)
		h = attention.PrefillItems(h, padStarts, b.shape.NumHeads/b.shape.NumKVHeads)
		for i := first; i < len(h); i += 4 {
			h[i] += int32(numSeqs) // sequence ids of the padding
		}
	}
	st.paddedItems = (len(h) - st.offItems) / 4
	st.offTables = len(h)
	for seq := range st.seqs {
		var table []int32
		if seq < numSeqs {
			need := (int(s.ContextLens[seq]) + bs - 1) / bs
			table = s.BlockTables[seq][:need]
		}
		pad(table, st.stride, 0)
	}
	b.host = h
	b.st = st
	// The picks' buffer grows here, before any op is recorded, so that Embed reads the buffer the
	// previous step's picks are in (ensureIDs carries them over).
	if err := b.ensureIDs(max(st.rows, numLogitRows)); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	return nil
}

// metaPtr returns the device address of int32 offset off of the metadata arena.
// The step's slot is b.slot: ops run before PickAsync moves it on.
func (b *cudaBackend) metaPtr(off int) cuda.DevicePtr {
	return b.meta.Add(4 * int64(b.slot*b.metaCap+off))
}

// record appends an op. name and the words identify its kernel and buffers for the graph key.
func (b *cudaBackend) record(op cudaOp, name string, words ...uint64) {
	b.sig = fnvString(b.sig, name)
	for _, w := range words {
		b.sig = fnvWord(b.sig, w)
	}
	op.name = name
	b.ops = append(b.ops, op)
	b.lastMM, b.lastNorm, b.lastEmbed = nil, nil, nil
}

// fuseInto returns the last recorded op when it is a plain MatMul into dst over rows rows that the op
// being recorded may fuse into (16-bit weights, fusion on), else nil. The caller sets the epilogue and
// records its own op, which at run time does nothing when the product ran the fused kernel.
func (b *cudaBackend) fuseInto(dst *cudaTensor, rows int) *matmulOp {
	mm := b.lastMM
	if mm == nil || b.tune.NoFuse || b.gemv.byTiles[0] == nil || mm.d != dst || mm.x.rows < 1 ||
		mm.epi.mode != gemvPlain || b.ops[len(b.ops)-1].rows != rows {
		return nil
	}
	return mm
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

// embedOp is a recorded Embed: the norm after it, when the product after that norm folds it (the first
// layer's input norm; see normOp).
type embedOp struct {
	dst     *cudaTensor
	normOut *normOp
}

func (b *cudaBackend) Embed(dst Tensor, table Weight) {
	d, w := tensorOf(dst), table.Data.(*cudaWeight)
	hidden := table.Cols
	e := &embedOp{dst: d}
	b.record(cudaOp{rows: dst.Rows, capacity: d.rows, graphable: true, run: func(rows int) error {
		p := struct {
			Dst, Table, Tokens, From, Picks, SSOut, SSZero, NormOut, NormW cuda.DevicePtr
			Hidden                                                         int32
		}{Dst: d.ptr, Table: w.ptr, Tokens: b.metaPtr(b.st.offTokens), From: b.metaPtr(b.st.offFrom),
			Picks: b.idsAt(b.slot ^ 1), Hidden: int32(hidden)}
		if n := e.normOut; b.normFolds(n, rows) && b.tune.NormFoldDiag&2 == 0 {
			p.SSOut, p.SSZero, p.NormOut, p.NormW = b.normSlot(n.index), b.normSlot((n.index+1)%len(b.norms)), n.dst.ptr, n.w.ptr
		}
		return cuda.Launch(b.fn.embed, cuda.Dim3{X: rows}, cuda.Dim3{X: rowThreads(hidden)}, 0, b.stream, &p)
	}}, "embed", uint64(d.ptr), uint64(w.ptr), uint64(hidden))
	b.lastEmbed = e
}

// ropeHeads is ROPE_HEADS of kernels/rope.cu: the heads one block of a row rotates or copies.
const ropeHeads = 8

// rowThreads is the block size of a one-block-per-row kernel over cols elements: about four elements a
// thread, a multiple of 32, at most 1024.
func rowThreads(cols int) int { return min(1024, max(32, (cols/4+31)/32*32)) }

func (b *cudaBackend) AddRMSNorm(dst, residual, add Tensor, w Weight, eps float32) {
	d, r, a, g := tensorOf(dst), tensorOf(residual), tensorOf(add), w.Data.(*cudaWeight)
	cols := residual.Cols
	var addPtr cuda.DevicePtr
	capacity := min(d.rows, r.rows)
	if a != nil {
		addPtr = a.ptr
		capacity = min(capacity, a.rows)
	}
	// When add is the output of the product just recorded, that product may accumulate into the residual
	// itself (see matmulOp.residual).
	var mm *matmulOp
	if prev := b.lastMM; a != nil && prev != nil && prev.d == a && prev.out == cols && !b.tune.NoFuse &&
		b.ops[len(b.ops)-1].rows == residual.Rows {
		mm = prev
		mm.residual = r
		b.sig = fnvString(b.sig, "accumulate")
	}
	n := &normOp{dst: d, w: g, eps: eps, cols: cols, producer: mm}
	if e := b.lastEmbed; a == nil && e != nil && e.dst == r && !b.tune.NoFuse && b.ops[len(b.ops)-1].rows == residual.Rows {
		n.embed = e
	}
	b.record(cudaOp{rows: residual.Rows, capacity: capacity, graphable: true, run: func(rows int) error {
		if b.normFolds(n, rows) && b.tune.NormFoldDiag&4 == 0 {
			b.stats.FoldedNorms++
			return nil // done by the products around it
		}
		add, adds := addPtr, 1
		if sp := b.splitOf(mm, rows); sp.parts > 1 && !sp.rows {
			add, adds = b.partials, sp.parts // the product left its partial products
		} else if b.accumulates(mm) {
			add = 0 // the product added itself
		}
		p := struct {
			Dst, Residual, Add, Weight cuda.DevicePtr
			Eps                        float32
			Cols, Adds                 int32
			_                          int32
			AddStride                  int64
		}{Dst: d.ptr, Residual: r.ptr, Add: add, Weight: g.ptr, Eps: eps, Cols: int32(cols), Adds: int32(adds),
			AddStride: int64(rows) * int64(cols)}
		return launchDependent(b, b.fn.addRMSNorm, cuda.Dim3{X: rows}, cuda.Dim3{X: rowThreads(cols)}, 0, &p)
	}}, "norm", uint64(d.ptr), uint64(r.ptr), uint64(addPtr), uint64(g.ptr), uint64(math.Float32bits(eps)), uint64(cols))
	b.lastNorm = n
}

func (b *cudaBackend) MatMul(dst, x Tensor, w Weight) {
	d, xt, wt := tensorOf(dst), tensorOf(x), w.Data.(*cudaWeight)
	if wt.vector || x.Cols != w.Cols || dst.Cols != w.Rows {
		b.fail(fmt.Errorf("cuda backend: matmul [%d][%d] · [%d][%d]ᵀ into [%d][%d]", x.Rows, x.Cols, w.Rows, w.Cols,
			dst.Rows, dst.Cols))
		return
	}
	out, in := w.Rows, w.Cols
	mm := &matmulOp{d: d, x: xt, w: wt, out: out, in: in}
	mm.epi.afterAttention = xt == b.attnOut
	if n := b.lastNorm; n != nil && (n.producer != nil || n.embed != nil) && n.dst == xt && n.cols == in &&
		!b.tune.NoFuse && b.ops[len(b.ops)-1].rows == x.Rows {
		n.consumer, mm.normIn = mm, n
		if n.producer != nil {
			n.producer.normOut = n
		} else {
			n.embed.normOut = n
		}
		n.index = len(b.norms)
		b.norms = append(b.norms, n)
		b.sig = fnvString(b.sig, "normfold")
	}
	b.record(cudaOp{rows: x.Rows, capacity: min(d.rows, xt.rows), graphable: true, n: out, k: in, run: func(rows int) error {
		if b.gemvServes(rows, in) {
			e, y := mm.epi, d
			if b.accumulates(mm) {
				e.accumulate, y = true, mm.residual
			}
			if b.normFolds(mm.normOut, rows) {
				e.normOut = mm.normOut
			}
			if b.normFolds(mm.normIn, rows) {
				e.normIn = mm.normIn
			}
			return b.launchGemv(y, xt, wt, out, in, rows, &e)
		}
		if b.gemmTakes(rows, out, in, mm.epi.mode == gemvSwiGLU) {
			switch {
			case mm.epi.mode == gemvSwiGLU:
				return b.launchGemm(d, xt, wt, out, in, rows, false, mm.epi.act, false)
			case b.accumulates(mm):
				return b.launchGemm(mm.residual, xt, wt, out, in, rows, true, nil, false)
			}
			return b.launchGemm(d, xt, wt, out, in, rows, false, nil, b.fused(mm, gemvArgmax, rows))
		}
		// Row-major Y[rows][out] = X[rows][in] · W[out][in]ᵀ is column-major Yᵀ = W · Xᵀ (see cuda.BLAS.GemmEx);
		// Y is stored as float32.
		y, beta := d.ptr, float32(0)
		if b.accumulates(mm) {
			y, beta = mm.residual.ptr, 1
		}
		switch sp := b.splitOf(mm, rows); {
		case sp.parts > 1 && sp.rows: // part i: rows [i·n, (i+1)·n) of y
			b.stats.SplitProducts++
			n := out / sp.parts
			return b.blas.GemmStridedBatchedEx(cuda.Trans, cuda.NoTrans, n, rows, in, 1, wt.ptr, b.dtype, in, int64(n)*int64(in),
				xt.ptr, b.dtype, in, 0, beta, y, cuda.Float32, out, int64(n), sp.parts)
		case sp.parts > 1: // part i: k slice i into b.partials[i]
			b.stats.SplitProducts++
			ks := in / sp.parts
			return b.blas.GemmStridedBatchedEx(cuda.Trans, cuda.NoTrans, out, rows, ks, 1, wt.ptr, b.dtype, in, int64(ks),
				xt.ptr, b.dtype, in, int64(ks), 0, b.partials, cuda.Float32, out, int64(rows)*int64(out), sp.parts)
		}
		return b.blas.GemmEx(cuda.Trans, cuda.NoTrans, out, rows, in, 1, wt.ptr, b.dtype, in, xt.ptr, b.dtype, in,
			beta, y, cuda.Float32, out)
	}}, "matmul", uint64(d.ptr), uint64(xt.ptr), uint64(wt.ptr), uint64(out), uint64(in))
	b.lastMM = mm
}

func (b *cudaBackend) RoPEWriteKV(qkv Tensor, layer int) {
	t := tensorOf(qkv)
	sh := &b.shape
	if t.qRot == 0 || qkv.Cols != sh.QKVCols() {
		b.fail(fmt.Errorf("cuda backend: RoPEWriteKV on a [%d][%d] tensor, want %d columns", qkv.Rows, qkv.Cols,
			sh.QKVCols()))
		return
	}
	k, v := b.kCache[layer], b.vCache[layer]
	mm := b.fuseInto(t, qkv.Rows)
	if mm != nil && sh.HeadDim%16 == 0 {
		mm.epi.mode, mm.epi.layer = gemvRoPE, layer
		b.sig = fnvString(b.sig, "fused")
	} else {
		mm = nil
	}
	t.ropeMM = mm
	b.record(cudaOp{rows: qkv.Rows, capacity: t.rows, graphable: true, run: func(rows int) error {
		if b.fused(mm, gemvRoPE, rows) {
			return nil // done in the Q/K/V product's epilogue
		}
		if b.ropeInAttention(mm, rows) {
			return nil // done by decode attention
		}
		p := struct {
			QKV, QOut, KCache, VCache, Positions, Slots, InvFreq cuda.DevicePtr
			AttentionScaling                                     float32
			NumHeads, NumKVHeads, HeadDim, QKVCols               int32
		}{t.ptr, t.qRot, k, v, b.metaPtr(b.st.offPos), b.metaPtr(b.st.offSlots), b.invFreq,
			sh.RopeAttentionScaling, int32(sh.NumHeads), int32(sh.NumKVHeads), int32(sh.HeadDim), int32(sh.QKVCols())}
		threads := min(256, max(32, (ropeHeads*sh.HeadDim/2+31)/32*32))
		groups := (sh.NumHeads + 2*sh.NumKVHeads + ropeHeads - 1) / ropeHeads
		return launchDependent(b, b.fn.rope, cuda.Dim3{X: rows, Y: groups}, cuda.Dim3{X: threads}, 0, &p)
	}}, "rope", uint64(t.ptr), uint64(t.qRot), uint64(k), uint64(v), uint64(b.invFreq))
}

func (b *cudaBackend) Attention(dst, qkv Tensor, layer int) {
	d, q := tensorOf(dst), tensorOf(qkv)
	if q.qRot == 0 {
		b.fail(errors.New("cuda backend: Attention before RoPEWriteKV on a Q/K/V tensor"))
		return
	}
	sh := &b.shape
	k, v := b.kCache[layer], b.vCache[layer]
	scale := float32(1 / math.Sqrt(float64(sh.HeadDim)))
	ropeMM := q.ropeMM
	b.record(cudaOp{rows: qkv.Rows, capacity: min(d.rows, q.rows), graphable: true, run: func(rows int) error {
		st := &b.st
		if st.decode && b.decodeFits {
			a := attention.CUDADecodeArgs{
				Out: d.ptr, Q: q.qRot, KCache: k, VCache: v,
				BlockTables: b.metaPtr(st.offTables), ContextLens: b.metaPtr(st.offCtx),
				HostContextLens: st.s.ContextLens, MaxBlocks: st.stride,
				NumHeads: sh.NumHeads, NumKVHeads: sh.NumKVHeads, HeadDim: sh.HeadDim, BlockSize: sh.BlockSize,
				DType: b.dtype, Scale: scale, Dependent: b.pdlNow(),
			}
			if b.ropeInAttention(ropeMM, rows) {
				a.Q, a.RoPE = 0, &attention.CUDARoPE{QKV: q.ptr, QKVCols: sh.QKVCols(),
					Positions: b.metaPtr(st.offPos), Slots: b.metaPtr(st.offSlots),
					InvFreq: b.invFreq, AttentionScaling: sh.RopeAttentionScaling}
			}
			if st.graphRun {
				return b.decodeGraphed(&a, rows)
			}
			_, err := b.decode.Decode(b.stream, &a, b.splitWS, splitWorkspaceBytes)
			if errors.Is(err, attention.ErrWorkspaceTooSmall) {
				err = b.decode.DecodeGrouped(b.stream, &a, attention.PathAuto)
			}
			return err
		}
		items := st.items
		if st.graphRun {
			items = st.paddedItems
		}
		return b.pre.Attend(b.stream, &attention.CUDAPrefillArgs{
			Out: d.ptr, Q: q.qRot, KCache: k, VCache: v,
			BlockTables: b.metaPtr(st.offTables), Positions: b.metaPtr(st.offPos),
			Items: b.metaPtr(st.offItems), NumItems: items, MaxBlocks: st.stride,
			NumHeads: sh.NumHeads, NumKVHeads: sh.NumKVHeads, HeadDim: sh.HeadDim, BlockSize: sh.BlockSize,
			DType: b.dtype, Scale: scale,
		})
	}}, "attention", uint64(d.ptr), uint64(q.qRot), uint64(k), uint64(v))
	b.attnOut = d
}

// ropeInAttention reports whether decode attention does this step's rotary embedding and K/V write
// (attention.CUDARoPE) instead of the RoPE kernel: a decode step on the decode kernels whose Q/K/V
// product mm (RoPEWriteKV's fusion target, nil if none) did not fuse it, and whose attention call will not
// run the persistent grouped kernel (attention.CUDAKernels.FoldsRoPE). The RoPE op and the attention op
// of a layer ask the same question at the same rows, so exactly one of the three does the work.
func (b *cudaBackend) ropeInAttention(mm *matmulOp, rows int) bool {
	if !b.st.decode || !b.decodeFits || b.decode == nil || b.tune.NoAttnRoPE || b.tune.NoFuse || b.fused(mm, gemvRoPE, rows) {
		return false
	}
	sh := &b.shape
	return b.decode.FoldsRoPE(&attention.CUDADecodeArgs{HostContextLens: b.attnLens(rows), MaxBlocks: b.st.stride,
		NumHeads: sh.NumHeads, NumKVHeads: sh.NumKVHeads, HeadDim: sh.HeadDim, BlockSize: sh.BlockSize, DType: b.dtype})
}

// attnLens returns the context lengths decode attention is planned with at rows rows: every row at the
// context cap in a graph step (decodeGraphed), the sequences' own otherwise.
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

// decodeGraphed queues decode attention for a padded graph step: the plan is made for every sequence at
// the context cap, so that it stays the same for every step the graph serves (split-k partitions past
// a sequence's context do nothing).
func (b *cudaBackend) decodeGraphed(a *attention.CUDADecodeArgs, rows int) error {
	a.HostContextLens = b.attnLens(rows)
	plan, err := b.decode.GraphPlan(a, graphBucketLow(rows))
	if err != nil {
		return err
	}
	switch t := b.tune.AttnPartition; {
	case t > 0:
		plan = attention.DecodePlan{Kernel: attention.SplitK, PartitionTokens: t, NumPartitions: (b.st.contextCap + t - 1) / t}
	case t < 0:
		plan = attention.DecodePlan{Kernel: attention.Grouped, NumPartitions: 1}
	}
	sh := &b.shape
	if plan.Kernel == attention.SplitK &&
		attention.SplitKWorkspaceBytes(rows, sh.NumHeads, sh.HeadDim, plan.NumPartitions) <= splitWorkspaceBytes {
		return b.decode.DecodeSplitK(b.stream, a, plan.PartitionTokens, b.splitWS, splitWorkspaceBytes, attention.PathAuto)
	}
	return b.decode.DecodeGrouped(b.stream, a, attention.PathAuto)
}

func (b *cudaBackend) SwiGLU(dst, gateUp Tensor) {
	d, g := tensorOf(dst), tensorOf(gateUp)
	inter := dst.Cols
	mm := b.fuseInto(g, dst.Rows)
	if mm != nil && inter%8 == 0 && mm.out == 2*inter && gateUp.Cols == 2*inter {
		mm.epi.mode, mm.epi.act = gemvSwiGLU, d
		b.sig = fnvString(b.sig, "fused")
	} else {
		mm = nil
	}
	b.record(cudaOp{rows: dst.Rows, capacity: min(d.rows, g.rows), graphable: true, run: func(rows int) error {
		if b.fused(mm, gemvSwiGLU, rows) {
			return nil // done in the gate/up product's epilogue
		}
		n := int64(rows) * int64(inter)
		p := struct {
			Dst, GateUp cuda.DevicePtr
			N           int64
			Inter       int32
		}{d.ptr, g.ptr, n, int32(inter)}
		blocks := int(min((n+255)/256, 65535))
		if inter%4 == 0 {
			blocks = int(min((n/4+255)/256, 65535))
		}
		return launchDependent(b, b.fn.swiglu, cuda.Dim3{X: blocks}, cuda.Dim3{X: 256}, 0, &p)
	}}, "swiglu", uint64(d.ptr), uint64(g.ptr), uint64(inter))
}

func (b *cudaBackend) GatherRows(dst, src Tensor, rows []int32) {
	d, s := tensorOf(dst), tensorOf(src)
	off, graphable := b.st.offLogits, true
	if !equalInt32(rows, b.st.s.LogitRows) { // not the step's logits rows: give them their own section
		off, graphable = len(b.host), false
		b.host = append(b.host, rows...)
	}
	cols := src.Cols
	b.record(cudaOp{rows: len(rows), capacity: min(d.rows, s.rows), graphable: graphable, run: func(n int) error {
		p := struct {
			Dst, Src, Rows cuda.DevicePtr
			Cols           int32
		}{d.ptr, s.ptr, b.metaPtr(off), int32(cols)}
		return launchDependent(b, b.fn.gather, cuda.Dim3{X: n}, cuda.Dim3{X: rowThreads(cols)}, 0, &p)
	}}, "gather", uint64(d.ptr), uint64(s.ptr), uint64(cols), uint64(off))
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

// CopyToHost runs the step and copies src's first len(dst) rows into dst. src is a matrix product's
// output (the logits), so it is float32.
func (b *cudaBackend) CopyToHost(dst [][]float32, src Tensor) error {
	if len(dst) == 0 {
		return b.run(nil)
	}
	t := tensorOf(src)
	rows, cols := len(dst), src.Cols
	if rows > src.Rows {
		return fmt.Errorf("cuda backend: copy %d rows of a %d-row tensor", rows, src.Rows)
	}
	return b.run(func() error {
		if err := b.stream.Synchronize(); err != nil {
			return err
		}
		if contiguous(dst, cols) {
			return b.dev.CopyFromDevice(cuda.Bytes(unsafe.Slice(&dst[0][0], rows*cols)), t.ptr)
		}
		for r := range dst {
			if err := b.dev.CopyFromDevice(cuda.Bytes(dst[r][:cols]), t.ptr.Add(4*int64(r*cols))); err != nil {
				return err
			}
		}
		return nil
	})
}

// contiguous reports whether the rows of dst lie one after another in memory, cols floats each (as
// Model.Forward lays them out), so that one copy fills them all.
func contiguous(dst [][]float32, cols int) bool {
	base := unsafe.Pointer(unsafe.SliceData(dst[0]))
	for r := range dst {
		if len(dst[r]) < cols || unsafe.Pointer(unsafe.SliceData(dst[r])) != unsafe.Add(base, 4*r*cols) {
			return false
		}
	}
	return true
}

// argmaxChunk is ArgmaxChunks' chunk of logits (ARGMAX_CHUNK in kernels/argmax.cu).
const argmaxChunk = 2048

// ensureArgmaxPartials makes the argmax's partial maxima (values and indices) hold n entries: the fused
// LM-head product's one per token and tile of 16 logits, or ArgmaxChunks' one per row and chunk. A new
// buffer drops the graphs, whose argmax used the old one.
func (b *cudaBackend) ensureArgmaxPartials(n int) error {
	if n <= b.argCap {
		return nil
	}
	n = nextPow2(n)
	if err := b.dropGraphs(); err != nil {
		return err
	}
	if err := errors.Join(b.dev.Free(b.argValues), b.dev.Free(b.argIndices)); err != nil {
		return err
	}
	b.argValues, b.argIndices, b.argCap = 0, 0, 0
	var err error
	if b.argValues, err = b.dev.Alloc(4 * int64(n)); err != nil {
		return err
	}
	if b.argIndices, err = b.dev.Alloc(4 * int64(n)); err != nil {
		return err
	}
	b.argCap = n
	return nil
}

// run executes the recorded step on the owner goroutine of the context: upload the metadata, queue the
// ops (eagerly, into a new graph, or as the bucket's graph), then finish (nil: just wait).
func (b *cudaBackend) run(finish func() error) error {
	defer func() { b.ops = b.ops[:0] }()
	if b.err != nil {
		return b.err
	}
	if err := b.quiesce(); err != nil {
		return fmt.Errorf("cuda backend: step: %w", err)
	}
	if err := b.ensureSlot(&b.slots[b.slot]); err != nil {
		return fmt.Errorf("cuda backend: step: %w", err)
	}
	err := b.dev.Do(func() error {
		err := b.upload(&b.slots[b.slot])
		if err == nil {
			err = b.queue()
		}
		if err == nil && finish != nil {
			err = finish()
		} else if err == nil {
			err = b.stream.Synchronize()
		}
		if err != nil {
			// Let queued copies finish before the next step rewrites their page-locked buffers.
			_ = errors.Join(b.stream.Synchronize(), b.up.Synchronize(), b.down.Synchronize())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cuda backend: step: %w", err)
	}
	return nil
}

// upload copies the metadata arena to the device through the staging buffer of slot (b.slots[b.slot]),
// on stream up, and has the kernels' stream wait for it; it grows the device buffer (and drops the
// graphs that point at the old one) when it is short. It runs inside Do; slot has its events (ensureSlot)
// and no step in flight, so its staging buffer and its half of meta are free.
func (b *cudaBackend) upload(slot *stepSlot) error {
	n := len(b.host)
	if n > b.metaCap {
		if err := b.dropGraphs(); err != nil {
			return err
		}
		if b.meta != 0 {
			if err := b.dev.Free(b.meta); err != nil {
				return err
			}
		}
		size := max(4096, nextPow2(n))
		p, err := b.dev.Alloc(4 * int64(len(b.slots)*size))
		if err != nil {
			return err
		}
		b.meta, b.metaCap = p, size
		// A different buffer changes every op's pointers: the signature has to include it.
	}
	b.sig = fnvWord(b.sig, uint64(b.meta))
	if 4*n > len(slot.meta) {
		if err := b.dev.FreeHost(slot.meta); err != nil {
			return err
		}
		slot.meta = nil
		p, err := b.dev.AllocHost(4 * max(4096, nextPow2(n)))
		if err != nil {
			return err
		}
		slot.meta = p
	}
	staged := slot.meta[:4*n]
	copy(staged, cuda.Bytes(b.host))
	if err := b.dev.CopyToDeviceAsync(b.metaPtr(0), staged, b.up); err != nil {
		return err
	}
	if err := slot.uploaded.Record(b.up); err != nil {
		return err
	}
	return b.stream.Wait(slot.uploaded)
}

// dropGraphs destroys every captured graph, once no step is in flight.
func (b *cudaBackend) dropGraphs() error {
	if err := b.quiesce(); err != nil {
		return err
	}
	var errs []error
	for k, g := range b.graphs {
		if g.exec != nil {
			errs = append(errs, g.exec.Destroy())
		}
		delete(b.graphs, k)
	}
	return errors.Join(errs...)
}

// queue runs the recorded ops: as a graph when the step allows it, else eagerly.
func (b *cudaBackend) queue() error {
	st := &b.st
	if b.prof != nil {
		b.stats.Eager++
		return b.profileQueue()
	}
	if b.graphRows() > 0 {
		key := graphKey{rows: st.rows, stride: st.stride, contextCap: st.contextCap, slot: b.slot, sig: b.sig}
		g, seen := b.graphs[key]
		switch {
		case seen && g.exec != nil:
			b.stats.Replayed++
			b.lastGraph = g.exec
			return g.exec.Launch(b.stream)
		case seen:
			exec, err := b.capture(st.rows)
			if err != nil && b.pdlNow() {
				// Retry without programmatic dependent launches (a driver that cannot capture them).
				b.pdlOff, b.stats.PDLCaptureFailed = true, err
				exec, err = b.capture(st.rows)
			}
			if err == nil {
				g.exec = exec
				b.stats.Captured++
				b.lastGraph = exec
				return exec.Launch(b.stream)
			}
			b.graphsOff, b.stats.CaptureFailed = true, err
		default:
			b.graphs[key] = &graphEntry{}
		}
		b.stats.Eager++
		return b.eager(st.rows) // the bucket's warm-up run: the same launches as the graph will hold
	}
	b.stats.Eager++
	return b.eager(0)
}

// graphRows is the bucket the step's ops run padded to, as a graph (and, under a profile, op by op as
// the graph would run them), or 0 when the step runs eagerly on its own rows: when it is not a graph
// step, graphs are off, or an op cannot run padded (graphable).
func (b *cudaBackend) graphRows() int {
	if b.st.graph && !b.graphsOff && b.graphable() {
		return b.st.rows
	}
	return 0
}

// graphable reports whether every op can run padded to the step's bucket.
func (b *cudaBackend) graphable() bool {
	for _, op := range b.ops {
		if !op.graphable || op.capacity < b.st.rows {
			return false
		}
	}
	return true
}

// eager queues the ops on the stream, each on rows rows (0: its own row count; else the graph's bucket).
func (b *cudaBackend) eager(rows int) error {
	b.st.graphRun = rows > 0
	for i, op := range b.ops {
		if slices.Contains(b.tune.Skip, op.name) {
			continue
		}
		if b.failOp > 0 && i == b.failOp-1 {
			return fmt.Errorf("op %d: failed on purpose (failOp)", i)
		}
		n := op.rows
		if rows > 0 {
			n = rows
		}
		if err := op.run(n); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
	}
	return nil
}

// capture records the ops, padded to rows, into a graph and instantiates it. When anything fails the
// stream is taken out of capture mode and the error returned.
func (b *cudaBackend) capture(rows int) (*cuda.GraphExec, error) {
	if err := b.stream.BeginCapture(); err != nil {
		return nil, err
	}
	runErr := b.eager(rows)
	g, endErr := b.stream.EndCapture()
	if err := errors.Join(runErr, endErr); err != nil {
		if g != nil && endErr == nil {
			_ = g.Destroy()
		}
		return nil, fmt.Errorf("capture: %w", err)
	}
	exec, err := g.Instantiate()
	if derr := g.Destroy(); err == nil && derr != nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return exec, nil
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
