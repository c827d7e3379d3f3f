package model

import (
	"math"

	"github.com/gollm/gollm/weights"
)

// Tensor is a handle to a row-major activation buffer [Rows][Cols] that a Backend allocated. Data is the
// backend's own storage (a []float32 for the CPU backend, a device allocation for CUDA); the model never
// looks inside it.
//
// A caller may shrink Rows to use a prefix of the buffer: Tensor{Rows: n, Cols: t.Cols, Data: t.Data} names
// the first n rows of t. Backends therefore always read the row count from the handle, never from Data.
// The zero Tensor means "none" where an operation documents an optional operand.
type Tensor struct {
	Rows, Cols int
	Data       any
}

// Prefix returns the handle naming the first rows rows of t.
func (t Tensor) Prefix(rows int) Tensor { return Tensor{Rows: rows, Cols: t.Cols, Data: t.Data} }

// Weight is a handle to a parameter a Backend holds for the life of the model: a matrix [Rows][Cols] in
// the PyTorch Linear layout [out_features][in_features], or a vector (Rows == 1). Data is the backend's own
// storage, in whatever dtype it chose at upload. The zero Weight means "none" where an operation or a
// layer documents an optional parameter.
type Weight struct {
	Rows, Cols int
	Data       any
	// Bias, when not nil, is a vector [Rows] (uploaded like any vector) that MatMul adds to every output
	// row: the Linear layer's bias (Qwen2's q, k and v projections).
	Bias *Weight
}

// Shape is what a backend needs to know about the model at construction, before any weight arrives: the
// attention geometry, the rotary tables, what each layer attends to and the size of the paged KV cache it
// must allocate. The zero value of each field after RopeAttentionScaling is LLaMA's.
type Shape struct {
	NumLayers  int
	HiddenSize int
	NumHeads   int // query heads, Hq
	NumKVHeads int // key/value heads, Hkv; divides NumHeads
	HeadDim    int // D

	// RopeInvFreq holds the HeadDim/2 inverse frequencies of the rotary embedding, scaling already applied
	// (see ropeInvFreq); RopeAttentionScaling multiplies cos and sin (1 for the types gollm supports).
	RopeInvFreq          []float32
	RopeAttentionScaling float32

	// LocalRopeInvFreq is a second rotary table, for the layers whose LayerShape.LocalRope is set (Gemma 3's
	// sliding layers rotate by another base); nil when no layer uses one.
	LocalRopeInvFreq []float32
	// Layers describes each layer's attention (len NumLayers); nil means every layer is LLaMA's: the
	// whole causal context, rotated by RopeInvFreq.
	Layers []LayerShape
	// AttentionScale multiplies the attention scores q·k; 0 means 1/sqrt(HeadDim).
	AttentionScale float32
	// EmbedScale multiplies the embeddings Embed writes (Gemma's sqrt(HiddenSize)); 0 means 1. A backend
	// that computes in another dtype rounds it to that dtype first, as transformers rounds it to the
	// embedding's dtype.
	EmbedScale float32

	// NumBlocks blocks of BlockSize tokens, each a page for K and for V in every layer (in each of
	// KVSlots page arrays, with KV groups).
	NumBlocks, BlockSize int
	// KVGroups holds each KV group's window (see KVLayout) and KVSlots the page arrays of a block; nil
	// and 0 mean one group of every layer without a window, a page array per layer. A layer's group and
	// page array are in its LayerShape.
	KVGroups []int
	KVSlots  int

	// KVCacheDType is the element type of the KV pages: "" the backend's own (float32 on the CPU), or
	// KVCacheFP8: OCP e4m3, each layer's K and V stored as e4m3(x / scale) with its KVScales (see
	// attention.Cache for the arithmetic). A backend that cannot store it refuses the shape.
	KVCacheDType string
	// KVScales holds each layer's K and V scales when KVCacheDType is KVCacheFP8 (len NumLayers).
	KVScales []KVScale
}

// NumKVSlots returns the page arrays of a block: KVSlots, or one per layer.
func (s Shape) NumKVSlots() int {
	if s.KVSlots == 0 {
		return s.NumLayers
	}
	return s.KVSlots
}

// QKVCols is the width of the fused Q/K/V projection's output row: [q: Hq*D | k: Hkv*D | v: Hkv*D].
func (s Shape) QKVCols() int { return (s.NumHeads + 2*s.NumKVHeads) * s.HeadDim }

// LayerShape describes what one decoder layer's attention reads: its window, its rotary table and
// where its K/V live.
type LayerShape struct {
	// Window, when positive, makes the layer's query at position p attend to positions [p−Window+1, p]
	// only (a sliding-window layer); 0 attends to [0, p].
	Window int
	// LocalRope rotates the layer's queries and keys by Shape.LocalRopeInvFreq instead of RopeInvFreq.
	LocalRope bool
	// KVGroup is the KV group whose block tables hold the layer's pages, KVSlot the page array of each
	// block where its K/V are (see KVLayout).
	KVGroup, KVSlot int
}

// Layer returns layer l's LayerShape (LLaMA's when Layers is nil: group 0, page array l).
func (s Shape) Layer(l int) LayerShape {
	if s.Layers == nil {
		return LayerShape{KVSlot: l}
	}
	return s.Layers[l]
}

// Scale returns the attention scores' scale: AttentionScale, or 1/sqrt(HeadDim).
func (s Shape) Scale() float32 {
	if s.AttentionScale != 0 {
		return s.AttentionScale
	}
	return float32(1 / math.Sqrt(float64(s.HeadDim)))
}

// Backend is what the forward pass needs from a device. The model calls it from one goroutine; a
// backend needs no locking. All activations are float32 in meaning (a backend may store them in another
// dtype and states its tolerance against the CPU backend, which is the reference).
//
// The ops are deliberately coarse, one per fused kernel of a fast implementation, so that a CUDA backend
// maps each to one or two launches and can capture a whole decode step into a CUDA graph: every op of a
// step happens between BeginStep and CopyToHost, the model calls them in the same order every step, and
// it reuses the same Tensor handles (allocated once, grown only when a step has more tokens than any
// before), so a graph recorded for a token count can be replayed after BeginStep has refreshed the
// step's metadata in place.
//
// The per-layer math, in the order the model calls it (h is the residual stream, x the normed input;
// the bracketed ops are those of the families that have them):
//
//	AddRMSNorm(x, h, prev, inputNorm)   h += prev (none for layer 0); x = rmsnorm(h) * w
//	MatMul(qkv, x, Wqkv)                 fused Q/K/V projection (+ bias: Qwen2)
//	[QKNorm(qkv, qNorm, kNorm)]          per-head RMSNorm of q and k (Qwen3, Gemma 3)
//	RoPEWriteKV(qkv, layer)              rotate q and k by position; store k, v at the slots
//	Attention(attn, qkv, layer)          causal attention over the layer's pages (or its window)
//	MatMul(o, attn, Wo)
//	[AddRMSNorm(o, o, none, attnOutNorm)] normalise the attention's output in place (Gemma)
//	AddRMSNorm(x, h, o, mlpNorm)
//	MatMul(gu, x, Wgateup)               fused gate/up projection
//	SwiGLU(act, gu) | GeGLU(act, gu)     silu(gate) * up, or gelu_tanh(gate) * up (Gemma)
//	MatMul(prev, act, Wdown)
//	[AddRMSNorm(prev, prev, none, mlpOutNorm)] normalise the MLP's output in place (Gemma)
//
// then AddRMSNorm with the final norm, GatherRows of the rows whose logits are wanted (left out when
// they are all the step's rows in order, as in a decode step), MatMul with the LM head, [Softcap of the
// logits (Gemma 3 with final_logit_softcapping)] and CopyToHost.
type Backend interface {
	// Upload takes a parameter from the checkpoint (any file dtype) and keeps it for the life of the
	// backend: a matrix [out][in] or a vector. It is called only while loading. t.Data may alias the
	// checkpoint's memory map, which the caller may close after loading: keep a copy, never t.Data.
	Upload(t *weights.Tensor) (Weight, error)

	// UploadFP8 takes a Linear layer's FP8 weight with its scales and input scheme (W8A8) and keeps it
	// for the life of the backend in its own layout; MatMul with the Weight it returns computes the FP8
	// product FP8Weight defines. It is called only while loading. w.Codes may alias the checkpoint's
	// memory map: keep a copy. A backend without FP8 products refuses with an error saying so.
	UploadFP8(w *FP8Weight) (Weight, error)

	// NewTensor allocates an activation buffer [rows][cols]. The model allocates its workspace once and
	// grows it rarely.
	NewTensor(rows, cols int) (Tensor, error)

	// BeginStep hands the backend the step's batch metadata (tokens, positions, slot mapping, query
	// starts, context lengths, block tables), already validated. The ops that follow read it.
	BeginStep(s *Step) error

	// Embed writes the embedding row of each step token into dst [T][hidden].
	Embed(dst Tensor, table Weight)

	// AddRMSNorm adds add into residual in place (skipped when add is the zero Tensor), then writes
	// rmsnorm(residual) * w into dst: dst[r] = residual[r] / sqrt(mean(residual[r]^2) + eps) * w. dst is
	// read by the op that follows it and by no other: a backend may fold the norm into that op when it
	// is a MatMul of dst (the CUDA backend does at decode sizes, leaving dst holding residual · w). With
	// no add, dst may be residual itself: the norm of a sublayer's output, in place.
	AddRMSNorm(dst, residual, add Tensor, w Weight, eps float32)

	// MatMul computes dst = x · wᵀ: dst[r][o] = Σ_i x[r][i] * w[o][i], accumulating in float32 or wider,
	// plus w.Bias[o] when w has a bias. For a weight from UploadFP8 the product is FP8Weight's: x's rows
	// quantized to e4m3 with their scales, the scales applied to the float32 sums.
	MatMul(dst, x Tensor, w Weight)

	// QKNorm RMS-normalises every query and key head of qkv [T][QKVCols] in place: each of the Hq query
	// heads (HeadDim values) becomes rmsnorm(head)·q, each of the Hkv key heads rmsnorm(head)·k, with
	// weights q and k of HeadDim (Qwen3's and Gemma 3's q_norm and k_norm, before the rotary embedding).
	QKNorm(qkv Tensor, q, k Weight, eps float32)

	// RoPEWriteKV rotates the q and k parts of each row of qkv [T][QKVCols] (the rotate-half convention
	// of HF LLaMA, by the step's per-token positions, with the layer's rotary table) for the Attention
	// call after it, and writes each token's rotated k and its v into layer's cache pages at its slot (in
	// an FP8 cache as e4m3(x / scale) with the layer's KVScales). What qkv holds afterwards is the
	// backend's: the CPU rotates it in place, the CUDA kernel writes the rotated queries to a buffer of
	// their own and leaves qkv as it was; nothing but that Attention call reads it.
	RoPEWriteKV(qkv Tensor, layer int)

	// Attention writes into dst [T][Hq*D] each token's causal attention over its sequence's pages of
	// layer (the cached prefix and this step's tokens up to itself, or within the layer's window its
	// last Window positions), reading q from qkv, with scores scaled by Shape.Scale.
	Attention(dst, qkv Tensor, layer int)

	// SwiGLU writes dst[r][i] = silu(gateUp[r][i]) * gateUp[r][I+i], where gateUp is [T][2I], dst [T][I].
	SwiGLU(dst, gateUp Tensor)

	// GeGLU is SwiGLU with GELU in the tanh approximation (PyTorch's gelu(approximate="tanh")) in place
	// of silu: dst[r][i] = 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))) * gateUp[r][I+i], g = gateUp[r][i].
	GeGLU(dst, gateUp Tensor)

	// Softcap caps every value of x in place: x = c·tanh(x/c) (Gemma's final-logit soft cap, c > 0).
	Softcap(x Tensor, c float32)

	// GatherRows copies src's rows rows[j] into dst's row j.
	GatherRows(dst, src Tensor, rows []int32)

	// CopyToHost copies src [R][C] into dst (R rows of C float32 each) and ends the step: it returns when
	// the values are in host memory.
	CopyToHost(dst [][]float32, src Tensor) error

	// Close frees everything the backend holds. The backend is unusable afterwards.
	Close() error
}

// NewBackendFunc constructs a backend for a model of the given shape. NewCPUBackend is one.
type NewBackendFunc func(Shape) (Backend, error)
