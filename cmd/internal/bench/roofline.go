package bench

import "github.com/gollm/gollm/weights"

// ParamCounts is a model's parameter count by role, from its config alone.
type ParamCounts struct {
	// Embedding is the token embedding table, V × H.
	Embedding int64
	// LMHead is the output projection, V × H, or 0 when it is tied to the embeddings.
	LMHead int64
	// PerLayer is one decoder layer: Q, K, V, O projections, gate/up/down, its RMSNorm gains (two, or
	// four for Gemma), and the family's biases and q/k norm gains.
	PerLayer int64
	// Layers is PerLayer × the number of layers; LayerMatrices the part of it in the projections'
	// matrices (what a token multiplies).
	Layers, LayerMatrices int64
	// FinalNorm is the last RMSNorm's gain, H.
	FinalNorm int64
	// Total is every parameter, embeddings and LM head included.
	Total int64
}

// headDimOf is cfg.HeadDim, or H/Hq when the config leaves it zero.
func headDimOf(cfg *weights.Config) int {
	if cfg.HeadDim > 0 {
		return cfg.HeadDim
	}
	return cfg.HiddenSize / max(cfg.NumAttentionHeads, 1)
}

// CountParams counts cfg's parameters (the tensors of weights.TensorShapes).
func CountParams(cfg *weights.Config) ParamCounts {
	v, h, i := int64(cfg.VocabSize), int64(cfg.HiddenSize), int64(cfg.IntermediateSize)
	d := int64(headDimOf(cfg))
	q, kv := int64(cfg.NumAttentionHeads)*d, int64(cfg.NumKeyValueHeads)*d
	var p ParamCounts
	p.Embedding = v * h
	if !cfg.TieWordEmbeddings {
		p.LMHead = v * h
	}
	matrices := q*h + 2*kv*h + h*q + 3*i*h
	vectors := 2 * h
	if cfg.QKVBias {
		vectors += q + 2*kv
	}
	if cfg.OBias {
		vectors += h
	}
	if cfg.QKNorm {
		vectors += 2 * d
	}
	if cfg.SandwichNorm {
		vectors += 2 * h
	}
	p.PerLayer = matrices + vectors
	p.Layers = p.PerLayer * int64(cfg.NumHiddenLayers)
	p.LayerMatrices = matrices * int64(cfg.NumHiddenLayers)
	p.FinalNorm = h
	p.Total = p.Embedding + p.LMHead + p.Layers + p.FinalNorm
	return p
}

// Precision is how many bytes a backend stores per weight and per KV cache element.
type Precision struct {
	// WeightBytes per parameter of the matrices (norm gains are too few to matter).
	WeightBytes int `json:"weight_bytes"`
	// KVBytes per element of the K and V caches.
	KVBytes int `json:"kv_bytes"`
	// LayerWeightBytes per parameter of the decoder layers' matrices when it differs from WeightBytes
	// (1 for FP8 layers, whose embeddings and LM head keep WeightBytes, plus a float32 scale per row);
	// 0 means WeightBytes.
	LayerWeightBytes int `json:"layer_weight_bytes,omitempty"`
}

// layerWeightBytes is LayerWeightBytes, or WeightBytes.
func (p Precision) layerWeightBytes() int64 {
	if p.LayerWeightBytes > 0 {
		return int64(p.LayerWeightBytes)
	}
	return int64(p.WeightBytes)
}

// KVBytesPerToken is the size of one token's K and V across all layers: 2 × L × Hkv × D × kvBytes.
func KVBytesPerToken(cfg *weights.Config, kvBytes int) int64 {
	return int64(cfg.NumHiddenLayers) * kvBytesPerLayerToken(cfg, kvBytes)
}

// kvBytesPerLayerToken is one token's K and V in one layer: 2 × Hkv × D × kvBytes.
func kvBytesPerLayerToken(cfg *weights.Config, kvBytes int) int64 {
	return 2 * int64(cfg.NumKeyValueHeads) * int64(headDimOf(cfg)) * int64(kvBytes)
}

// layerTokensRead is how many keys the query at position ctx−1 reads, summed over the layers: ctx in a
// full-attention layer, at most the window in a sliding one.
func layerTokensRead(cfg *weights.Config, ctx int) int64 {
	var n int64
	for l := range cfg.NumHiddenLayers {
		if w := cfg.LayerWindow(l); w > 0 {
			n += int64(min(ctx, w))
		} else {
			n += int64(ctx)
		}
	}
	return n
}

// KVBytesRead is the K and V a decode of a context of ctx tokens reads across all layers: ctx ×
// KVBytesPerToken without sliding windows, less with them.
func KVBytesRead(cfg *weights.Config, kvBytes, ctx int) int64 {
	return layerTokensRead(cfg, ctx) * kvBytesPerLayerToken(cfg, kvBytes)
}

// StepBytes is what one decode step must move through memory at least: each byte read once.
type StepBytes struct {
	// Weights is every parameter except the embedding table, of which a step reads only its tokens'
	// rows (EmbeddingRows); with tied embeddings the LM head reads the whole table, counted here.
	Weights int64 `json:"weights"`
	// EmbeddingRows is the embedding rows of the step's tokens.
	EmbeddingRows int64 `json:"embedding_rows"`
	// KV is every sequence's K and V read by attention: Σ KVBytesRead of each context (context ×
	// KVBytesPerToken without sliding windows).
	KV int64 `json:"kv"`
	// Total is the sum.
	Total int64 `json:"total"`
}

// DecodeStepBytes counts the bytes of a decode step with one new token for each sequence, whose
// contexts (the new token included) are contexts. Activations, the KV write of the new tokens and the
// logits are left out: they are a rounding error beside the weights and the cache.
func DecodeStepBytes(cfg *weights.Config, p Precision, contexts []int) StepBytes {
	c := CountParams(cfg)
	wb := int64(p.WeightBytes)
	var s StepBytes
	s.Weights = c.LayerMatrices*p.layerWeightBytes() + (c.Layers-c.LayerMatrices+c.FinalNorm+c.LMHead)*wb
	if p.LayerWeightBytes == 1 {
		// FP8 layers: each matrix also reads a float32 scale per output row (model.FP8Weight).
		d := int64(headDimOf(cfg))
		rows := int64(cfg.NumAttentionHeads)*d + 2*int64(cfg.NumKeyValueHeads)*d + 2*int64(cfg.HiddenSize) +
			2*int64(cfg.IntermediateSize)
		s.Weights += 4 * rows * int64(cfg.NumHiddenLayers)
	}
	if cfg.TieWordEmbeddings {
		s.Weights += c.Embedding * wb // the LM head is the table
	}
	s.EmbeddingRows = int64(len(contexts)) * int64(cfg.HiddenSize) * wb
	for _, ctx := range contexts {
		s.KV += KVBytesRead(cfg, p.KVBytes, ctx)
	}
	s.Total = s.Weights + s.EmbeddingRows + s.KV
	return s
}

// UniformContexts returns n copies of ctx: the contexts of a batch whose sequences are all as long.
func UniformContexts(n, ctx int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = ctx
	}
	return out
}

// RooflineSeconds is the least time moving bytes can take at bandwidth bytes per second.
func RooflineSeconds(bytes int64, bandwidth float64) float64 {
	if bandwidth <= 0 {
		return 0
	}
	return float64(bytes) / bandwidth
}

// TokenFLOPs is the forward pass's arithmetic for one token at position pos (0-based) of its sequence:
// 2 FLOPs per weight of the layers' matrices, causal attention over the keys it reads (pos+1, or its
// window; Q·Kᵀ and P·V, 4 · Hq · D per key and layer), and the LM head when the token's logits are
// wanted. Norms, RoPE, biases and the gated activation are left out (a rounding error beside the
// matrices).
func TokenFLOPs(cfg *weights.Config, pos int, logits bool) float64 {
	c := CountParams(cfg)
	h := int64(cfg.HiddenSize)
	f := 2*float64(c.LayerMatrices) + 4*float64(cfg.NumAttentionHeads)*float64(headDimOf(cfg))*float64(layerTokensRead(cfg, pos+1))
	if logits {
		f += 2 * float64(cfg.VocabSize) * float64(h)
	}
	return f
}

// ThroughputRoofline bounds an offline run from below: its arithmetic at the device's matrix rate, and
// what its decode steps must read at the copy bandwidth: the weights of each (a step yields at most
// max-num-seqs tokens, so there are at least output tokens / max-num-seqs of them) and every decode's
// K and V. The run cannot take less than the larger of the two.
type ThroughputRoofline struct {
	// FLOPs is Σ TokenFLOPs over every token the model runs: each prompt token and each generated token
	// but a request's last (logits from the prompt's last token on); PeakFLOPS the matrix rate it is
	// divided by (0: unknown, no compute bound).
	FLOPs     float64 `json:"flops"`
	PeakFLOPS float64 `json:"peak_flops"`
	ComputeS  float64 `json:"compute_s"`
	// DecodeSteps is the fewest decode steps; Bytes their weight reads; KVBytes the K and V their
	// decodes read (KVBytesRead of each generated token's context but the prefills'); Bandwidth the
	// copy bandwidth; BandwidthS both reads at it, KVS the K/V's share.
	DecodeSteps int64   `json:"decode_steps"`
	Bytes       int64   `json:"bytes"`
	KVBytes     int64   `json:"kv_bytes"`
	Bandwidth   float64 `json:"bandwidth_bytes_s"`
	BandwidthS  float64 `json:"bandwidth_s"`
	KVS         float64 `json:"kv_s"`
	// BoundS is the larger bound; OutputTokensPerSecond the output tokens over it; Percent BoundS over
	// the measured run.
	BoundS                float64 `json:"bound_s"`
	OutputTokensPerSecond float64 `json:"output_tok_s"`
	Percent               float64 `json:"percent"`
}

// throughputRoofline computes the bound of a run of requests with the given prompt and output lengths.
func throughputRoofline(cfg *weights.Config, p Precision, inputs, outputs []int, maxNumSeqs int, peakFLOPS,
	bandwidth float64) ThroughputRoofline {
	r := ThroughputRoofline{PeakFLOPS: peakFLOPS, Bandwidth: bandwidth}
	outTokens := 0
	for i, in := range inputs {
		// The model runs every prompt token and every generated token but the last (which nothing reads);
		// the prompt's last token and those generated tokens give logits.
		for pos := range in + outputs[i] - 1 {
			r.FLOPs += TokenFLOPs(cfg, pos, pos >= in-1)
		}
		// Its first token comes from the prefill, each later one from a decode of the token before it,
		// which reads the context up to it.
		for j := 1; j < outputs[i]; j++ {
			r.KVBytes += KVBytesRead(cfg, p.KVBytes, in+j)
		}
		outTokens += outputs[i]
	}
	if peakFLOPS > 0 {
		r.ComputeS = r.FLOPs / peakFLOPS
	}
	// The first token of each request comes from its prefill, the rest from decode steps.
	decodeTokens := outTokens - len(inputs)
	r.DecodeSteps = int64((decodeTokens + maxNumSeqs - 1) / max(1, maxNumSeqs))
	r.Bytes = r.DecodeSteps * DecodeStepBytes(cfg, p, nil).Weights
	r.BandwidthS = RooflineSeconds(r.Bytes+r.KVBytes, bandwidth)
	r.KVS = RooflineSeconds(r.KVBytes, bandwidth)
	r.BoundS = max(r.ComputeS, r.BandwidthS)
	if r.BoundS > 0 {
		r.OutputTokensPerSecond = float64(outTokens) / r.BoundS
	}
	return r
}
