package model

import "github.com/gollm/gollm/weights"

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
// storage, in whatever dtype it chose at upload.
type Weight struct {
	Rows, Cols int
	Data       any
}

// Shape is what a backend needs to know about the model at construction, before any weight arrives: the
// attention geometry, the rotary table and the size of the paged KV cache it must allocate.
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

	// NumBlocks pages of BlockSize tokens per layer for K and for V.
	NumBlocks, BlockSize int
}

// QKVCols is the width of the fused Q/K/V projection's output row: [q: Hq*D | k: Hkv*D | v: Hkv*D].
func (s Shape) QKVCols() int { return (s.NumHeads + 2*s.NumKVHeads) * s.HeadDim }

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
// The per-layer math, in the order the model calls it (h is the residual stream, x the normed input):
//
//	AddRMSNorm(x, h, prev, inputNorm)   h += prev (none for layer 0); x = rmsnorm(h) * w
//	MatMul(qkv, x, Wqkv)                 fused Q/K/V projection
//	RoPEWriteKV(qkv, layer)              rotate q and k by position; store k, v at the slots
//	Attention(attn, qkv, layer)          causal attention over the layer's pages
//	MatMul(o, attn, Wo)
//	AddRMSNorm(x, h, o, postNorm)
//	MatMul(gu, x, Wgateup)               fused gate/up projection
//	SwiGLU(act, gu)                      silu(gate) * up
//	MatMul(prev, act, Wdown)
//
// then AddRMSNorm with the final norm, GatherRows of the rows whose logits are wanted (left out when
// they are all the step's rows in order, as in a decode step), MatMul with the LM head and CopyToHost.
type Backend interface {
	// Upload takes a parameter from the checkpoint (any file dtype) and keeps it for the life of the
	// backend: a matrix [out][in] or a vector. It is called only while loading. t.Data may alias the
	// checkpoint's memory map, which the caller may close after loading: keep a copy, never t.Data.
	Upload(t *weights.Tensor) (Weight, error)

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
	// is a MatMul of dst (the CUDA backend does at decode sizes, leaving dst holding residual · w).
	AddRMSNorm(dst, residual, add Tensor, w Weight, eps float32)

	// MatMul computes dst = x · wᵀ: dst[r][o] = Σ_i x[r][i] * w[o][i], accumulating in float32 or wider.
	MatMul(dst, x Tensor, w Weight)

	// RoPEWriteKV rotates the q and k parts of each row of qkv [T][QKVCols] in place (the rotate-half
	// convention of HF LLaMA, by the step's per-token positions), then writes each token's k and v into
	// layer's cache pages at its slot.
	RoPEWriteKV(qkv Tensor, layer int)

	// Attention writes into dst [T][Hq*D] each token's causal attention over its sequence's pages of
	// layer (the cached prefix and this step's tokens up to itself), reading q from qkv.
	Attention(dst, qkv Tensor, layer int)

	// SwiGLU writes dst[r][i] = silu(gateUp[r][i]) * gateUp[r][I+i], where gateUp is [T][2I], dst [T][I].
	SwiGLU(dst, gateUp Tensor)

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
