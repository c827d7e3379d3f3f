//go:build cuda

package model

import (
	"errors"
	"fmt"
	"log/slog"

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
// context cap), the shared-prefix bucket of its groups (attention.SharedGraphKey; zero on the plain
// kernels) and a hash of every op's kernel and buffers, so a workspace regrown by the model or a new
// metadata buffer gets a new graph rather than a stale one.
//
// The families beyond LLaMA (see Backend) run as data of the same step: each layer's KV page array and
// KV group (its block tables and slots in the step's metadata, per group), rotary table and sliding
// window go to its RoPE, its Q/K/V product's RoPE epilogue and its attention; their own ops are kernels
// of model/kernels that the plan places: q/k norms (before the rotation, or inside the RoPE kernel), the
// products' biases (after the product), GeGLU (the skinny product's epilogue, or a kernel), the
// sublayer-output norms (with the norm that adds them), the logits' soft cap; the embeddings' and the
// attention's scales are the launches' arguments.
//
// The backend's code is split by job: setup and memory (this file), the step's metadata, streams and
// picks (step_cuda.go, pick_cuda.go), the recording of the ops (record_cuda.go), their plan (the pure
// step_plan.go) and its executor (exec_cuda.go, with the products' launches in gemv_cuda.go and
// gemm_cuda.go), and the graphs (graph_cuda.go). Each job's state is a struct of its file, embedded here.
type cudaBackend struct {
	shape Shape
	cfg   cudaConfig

	dev    *cuda.Device
	ownDev bool
	mod    *cuda.Module
	blas   *cuda.BLAS
	fn     cudaFunctions
	gemv   *gemvKernels
	gemm   *gemmKernels           // nil: every product the skinny kernel leaves goes to cuBLAS
	decode *attention.CUDAKernels // nil when the decode kernels could not be loaded
	pre    *attention.CUDAPrefill
	sm90   *cuda.Module // prefill_sm90.cu's PTX (Hopper): the prefill and shared-prefix kernels; nil elsewhere
	// preKernel is the prefill kernel every prefill call runs; the step's work items are cut for it.
	preKernel attention.PrefillKernel

	dtype      cuda.DataType
	elem       int  // bytes per element of dtype
	decodeFits bool // the decode kernels cover this head size, page size and dtype
	// windowed: some layer has a sliding window, so no decode step takes the shared-prefix path
	// (sharedDecision), whose queries must read the whole shared prefix.
	windowed bool
	// grouper finds the decode steps' shared groups (sharedDecision), its scratch kept from step to step.
	grouper attention.SharedGrouper
	// kvFP8: the KV pages hold e4m3 codes (Shape.KVCacheDType KVCacheFP8, see fp8_cuda.go); kvElem is a
	// stored K or V element's bytes (KVElementBytes: 1 with kvFP8, else elem).
	kvFP8  bool
	kvElem int
	tune   gemvTuning
	// embedScale is Shape.EmbedScale rounded to the compute dtype (0: none).
	embedScale float32

	cudaMemory
	stepStreams
	stepRecord
	graphCache
	maskedPicks

	fp8   fp8State
	stats cudaStats
	// failOp, when positive, makes eager fail before the step's failOp-th op (tests: a step that stops
	// part way, after some of its ops ran).
	failOp int
	// prof, when set, makes the next steps run op by op with an event after each (see profile).
	prof *stepProfile
}

// cudaMemory is what the backend allocates once: the rotary tables, the KV pages, the workspaces.
type cudaMemory struct {
	// invFreq is Shape.RopeInvFreq, localInvFreq Shape.LocalRopeInvFreq (0 without one).
	invFreq, localInvFreq cuda.DevicePtr
	// kCache and vCache are the page arrays (Shape.NumKVSlots: a layer's is its LayerShape.KVSlot), each
	// [NumBlocks][BlockSize][NumKVHeads][HeadDim] of dtype, or of e4m3 codes with kvFP8.
	kCache  []cuda.DevicePtr
	vCache  []cuda.DevicePtr
	splitWS cuda.DevicePtr
	// partials holds the partial products of a product split by k (see splitOf): splitMaxParts ×
	// gemvMaxTokens rows of HiddenSize floats.
	partials cuda.DevicePtr
	// normSS holds the folded norms' sums of squares, a slot of normMaxTokens fixed-point uint64 for each
	// fold of a step (normSlots; see normSlot).
	normSS cuda.DevicePtr
	allocs *cuda.Buffers // weights, KV pages, activations, workspaces: what Close frees at once
}

// cudaConfig is how the CUDA backend is built.
type cudaConfig struct {
	// dtype is the compute dtype: weight matrices, activations and KV pages.
	dtype weights.DType
	// dev is a device to use and leave open at Close; nil opens GPU 0 and closes it at Close.
	dev *cuda.Device
	// noGraphs runs every step eagerly.
	noGraphs bool
	// sharedPrefix is Options.SharedPrefix.
	sharedPrefix string
	// coll is the tensor-parallel group's collective this backend is a rank of (AllReduceSum); nil for a
	// model run whole.
	coll deviceCollective
}

// cudaStats counts how a CUDA backend ran its steps (for tests and benchmarks).
type cudaStats struct {
	// Eager steps ran op by op (a bucket's first step among them); Captured recorded a graph; Replayed
	// launched one. CaptureFailed is why graphs were switched off, if they were.
	Eager, Captured, Replayed int
	CaptureFailed             error
	// FoldedNorms counts the norms queued folded into the products around them (eagerly or into a
	// graph's capture; see stepPlanner.normFolds).
	FoldedNorms int
	// GemmArgmaxes counts the greedy picks queued as the skinny GEMM's argmax epilogue (the logits not
	// written; see recordArgmax), SplitProducts the products queued split (see splitOf).
	GemmArgmaxes, SplitProducts int
	// BestPicks counts the steps ended by PickBest (a tensor-parallel rank's greedy pick on the device).
	BestPicks int
	// PDLCaptureFailed is why a capture with programmatic dependent launches failed, if one did.
	PDLCaptureFailed error
	// SharedDecodes counts the decode-attention calls queued as the shared-prefix algorithm: op by op,
	// into a graph or as a graph's replay (counted as the step is queued).
	SharedDecodes int
	// MixedDecodes counts the attention calls of mixed steps whose leading decodes ran on the decode
	// kernels (opPlan.leadDecodes).
	MixedDecodes int
	// UnscaledFP8 counts the FP8 products queued leaving their scales to the op after them
	// (opPlan.fp8Unscaled).
	UnscaledFP8 int
	// Out16FP8 counts those of them that wrote their sums in bfloat16 (opPlan.fp8Out16).
	Out16FP8 int
}

// cudaFunctions are the model's kernels for the compute dtype.
type cudaFunctions struct {
	embed, addRMSNorm, rope, swiglu, gather *cuda.Function
	// ropeE4M3 is the RoPE kernel that writes FP8 KV pages (RoPEWriteKV_<dtype>_e4m3), loaded with kvFP8.
	ropeE4M3                     *cuda.Function
	argmaxChunks, argmaxPartials *cuda.Function
	sample                       *cuda.Function // SampleRows (kernels/sample.cu)
	// The families' ops: GeGLU, the sublayer-output norms (NormAddRMSNorm), and on float32 values the
	// q/k norms, the products' biases and the logits' soft cap.
	geglu, normAdd, qkNorm, bias, softcap *cuda.Function
	// allReduce is the tensor-parallel group's one-shot sum (kernels/allreduce.cu, peerCollective).
	allReduce *cuda.Function
}

// cudaTensor is an activation buffer: rows × cols elements of 4 bytes (enough for float32 or the
// compute dtype). A tensor as wide as the fused Q/K/V projection also carries qRot, the rotated queries
// [rows][NumHeads·HeadDim] in the compute dtype that RoPEWriteKV writes and Attention reads.
type cudaTensor struct {
	ptr        cuda.DevicePtr
	rows, cols int
	qRot       cuda.DevicePtr
}

// cudaWeight is a parameter on the device: a matrix in the compute dtype or a float32 vector, or an FP8
// matrix (fp8 not nil: ptr holds its codes; see fp8_cuda.go).
type cudaWeight struct {
	ptr    cuda.DevicePtr
	vector bool
	fp8    *cudaFP8
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
		len(shape.RopeInvFreq) != shape.HeadDim/2 ||
		(shape.LocalRopeInvFreq != nil && len(shape.LocalRopeInvFreq) != shape.HeadDim/2) ||
		(shape.Layers != nil && len(shape.Layers) != shape.NumLayers) {
		return nil, fmt.Errorf("cuda backend: invalid shape %+v", shape)
	}
	for l, ls := range shape.Layers {
		if ls.Window < 0 || (ls.LocalRope && shape.LocalRopeInvFreq == nil) || ls.KVSlot < 0 ||
			ls.KVSlot >= shape.NumKVSlots() || ls.KVGroup < 0 || ls.KVGroup >= max(1, len(shape.KVGroups)) {
			return nil, fmt.Errorf("cuda backend: layer %d: invalid %+v", l, ls)
		}
	}
	b := &cudaBackend{shape: shape, cfg: cfg, dev: cfg.dev}
	for l := range shape.NumLayers {
		b.windowed = b.windowed || shape.Layer(l).Window > 0
	}
	b.graphs = map[graphKey]*graphEntry{}
	var tn string
	if b.dtype, b.elem, tn, err = computeDType(cfg.dtype); err != nil {
		return nil, err
	}
	b.kvElem = b.elem
	if b.kvFP8, err = shape.kvFP8(); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	} else if b.kvFP8 {
		b.kvElem = 1
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
	if b.kvFP8 {
		if m := fp8KVMissing(b.dev.Info()); m != "" {
			return nil, fmt.Errorf("cuda backend: %s: %w", m, weights.ErrUnsupported)
		}
	}
	if b.mod, err = b.dev.LoadModule(kernels.Fatbin); err != nil {
		return nil, fmt.Errorf("cuda backend: model kernels: %w", err)
	}
	if b.kvFP8 {
		if b.fn.ropeE4M3, err = b.mod.Function("RoPEWriteKV_" + tn + "_e4m3"); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	}
	for _, k := range []struct {
		dst  **cuda.Function
		name string
	}{
		{&b.fn.embed, "Embed"}, {&b.fn.addRMSNorm, "AddRMSNorm"}, {&b.fn.rope, "RoPEWriteKV"},
		{&b.fn.swiglu, "SwiGLU"}, {&b.fn.gather, "GatherRows"}, {&b.fn.argmaxChunks, "ArgmaxChunks"},
		{&b.fn.argmaxPartials, "ArgmaxPartials"}, {&b.fn.sample, "SampleRows"}, {&b.fn.geglu, "GeGLU"},
		{&b.fn.normAdd, "NormAddRMSNorm"}, {&b.fn.qkNorm, "QKNorm"}, {&b.fn.bias, "AddBias"}, {&b.fn.softcap, "Softcap"},
		{&b.fn.allReduce, "AllReduceOneShot"},
	} {
		name := k.name + "_" + tn
		switch k.name {
		case "ArgmaxChunks":
			name = k.name + "_f32" // the logits are float32 whatever the compute dtype
		case "ArgmaxPartials", "SampleRows", "QKNorm", "AddBias", "Softcap", "AllReduceOneShot": // float32 values only
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
	// Every prefill call reads the backend's own pages (b.kvFP8): a kernel over them is all it needs.
	if len(b.pre.Kernels(shape.HeadDim, shape.BlockSize, b.dtype, b.kvFP8)) == 0 {
		return nil, fmt.Errorf("cuda backend: head_dim %d: %w", shape.HeadDim, attention.ErrUnsupported)
	}
	if info := b.dev.Info(); info.Major == 9 && info.Minor == 0 && b.dtype != cuda.Float32 {
		// The Hopper prefill kernel (over 16-bit or FP8 pages): a driver that cannot compile its PTX (older
		// than CUDA 12) keeps the mma.sync kernel.
		mod, err := b.dev.LoadModule(kernels.PrefillSM90PTX)
		if err == nil {
			if err = b.pre.LoadSM90(mod, info.SharedPerBlockOptin); err == nil {
				b.sm90 = mod
			}
		}
		if err != nil {
			slog.Warn("cuda backend: no Hopper prefill attention; prefill stays on the mma.sync kernel", "err", err)
		}
	}
	b.preKernel = b.pre.Kernel(shape.HeadDim, shape.BlockSize, b.dtype, b.kvFP8)
	bs := shape.BlockSize
	// The decode kernels: head sizes 64 and 128, and 256 in 16-bit dtypes (attention.Decide's check).
	// Over FP8 pages, 16-bit dtypes only (float32 decode steps then run the prefill kernel).
	b.decodeFits = (shape.HeadDim == 64 || shape.HeadDim == 128 || shape.HeadDim == 256 && b.dtype != cuda.Float32) &&
		bs >= 8 && bs <= 64 && bs&(bs-1) == 0 && !(b.kvFP8 && b.dtype == cuda.Float32)
	if b.decodeFits {
		if b.decode, err = attention.LoadCUDAKernels(b.dev); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
		if b.splitWS, err = b.alloc(splitWorkspaceBytes); err != nil {
			return nil, err
		}
	}
	if b.decode != nil && b.sm90 != nil {
		if err := b.decode.LoadSM90(b.sm90); err != nil {
			slog.Warn("cuda backend: no Hopper shared-prefix kernel; the prefix pass stays on the mma.sync kernel", "err", err)
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
	if shape.LocalRopeInvFreq != nil {
		if b.localInvFreq, err = b.alloc(int64(4 * len(shape.LocalRopeInvFreq))); err != nil {
			return nil, err
		}
		if err = b.dev.CopyToDevice(b.localInvFreq, cuda.Bytes(shape.LocalRopeInvFreq)); err != nil {
			return nil, fmt.Errorf("cuda backend: %w", err)
		}
	}
	b.embedScale = roundTo(b.dtype, shape.EmbedScale)
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

// roundTo returns x rounded to the compute dtype t (as a float32).
func roundTo(t cuda.DataType, x float32) float32 {
	switch t {
	case cuda.BFloat16:
		return dtype.BF16ToF32(dtype.F32ToBF16(x))
	case cuda.Float16:
		return dtype.F16ToF32(dtype.F32ToF16(x))
	}
	return x
}

// kvBytesPerBlock is one block's pages of K and V: one page in each of the page arrays (a layer each
// without KV groups).
func (b *cudaBackend) kvBytesPerBlock() int64 {
	s := &b.shape
	return 2 * int64(s.NumKVSlots()) * int64(s.BlockSize) * int64(s.NumKVHeads) * int64(s.HeadDim) * int64(b.kvElem)
}

// allocateKV allocates numBlocks pages of K and V in each page array (Shape.NumKVSlots).
func (b *cudaBackend) allocateKV(numBlocks int) error {
	s := &b.shape
	// Rounded up to whole 4-byte words (one-byte FP8 pages of an odd size): the zero fill's unit.
	perLayer := (int64(numBlocks)*int64(s.BlockSize)*int64(s.NumKVHeads)*int64(s.HeadDim)*int64(b.kvElem) + 3) &^ 3
	b.kCache = make([]cuda.DevicePtr, s.NumKVSlots())
	b.vCache = make([]cuda.DevicePtr, s.NumKVSlots())
	for l := range s.NumKVSlots() {
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
// for cuBLAS, graphs and the rest. It returns the number of blocks (each a page in every page array).
func (b *cudaBackend) AllocateKV(utilization float64) (int, error) {
	if len(b.kCache) > 0 {
		return 0, errors.New("cuda backend: KV pool already allocated")
	}
	n, err := b.kvCapacity(utilization)
	if err != nil {
		return 0, err
	}
	if err := b.allocateKV(n); err != nil {
		return 0, err
	}
	return n, nil
}

// kvCapacity is the number of KV pages AllocateKV would allocate now.
func (b *cudaBackend) kvCapacity(utilization float64) (int, error) {
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
		return 0, fmt.Errorf("cuda backend: %w: no memory left for the KV pool (%d MiB free of %d MiB, utilization %v)",
			ErrKVTooLarge, free>>20, total>>20, utilization)
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
	b.graphs, b.sharedKeys = nil, nil
	if b.blas != nil {
		errs = append(errs, b.blas.Destroy())
		b.blas = nil
	}
	errs = append(errs, b.stream.Destroy(), b.up.Destroy(), b.down.Destroy())
	b.stream, b.up, b.down = nil, nil, nil
	errs = append(errs, b.allocs.Free())
	for _, p := range []cuda.DevicePtr{b.meta, b.ids, b.argValues, b.argIndices, b.sampleArgs, b.bestPick} {
		errs = append(errs, b.dev.Free(p))
	}
	b.meta, b.ids, b.argValues, b.argIndices, b.sampleArgs, b.bestPick = 0, 0, 0, 0, 0, 0
	b.bestCap = 0
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
	errs = append(errs, b.freeMasks(), b.freeFP8())
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
