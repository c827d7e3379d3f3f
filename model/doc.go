// Package model owns the LLaMA-family forward pass, written once against a Backend, and the pure-Go CPU
// backend that is its reference. It knows tensors, layers and batch metadata; it must not know about
// requests, queues, sampling or HTTP, and it does not decide which KV pages a sequence owns (the
// caller's block tables and slot mapping say so).
//
// A step is batched the way vLLM batches: one flat list of tokens (prefill chunks and decode tokens of
// many sequences), per-token positions and KV slots, per-sequence block tables and context lengths:
//
//	m, err := model.Load(folder, model.Options{NumBlocks: 512})
//	// a 3-token prompt in pages 7 (and more later) of a 16-token page size
//	logits, err := m.Forward(&model.Step{
//		Tokens:      []int32{1, 15043, 29892},
//		Positions:   []int32{0, 1, 2},
//		SlotMapping: []int32{7*16 + 0, 7*16 + 1, 7*16 + 2},
//		QueryStart:  []int32{0, 3},
//		ContextLens: []int32{3},
//		BlockTables: [][]int32{{7}},
//		LogitRows:   []int32{2},
//	})
//
// The math of a layer (RMSNorm, fused Q/K/V projection, RoPE with default, linear or llama3 scaling,
// the KV write, paged attention, output projection, residual, RMSNorm, SwiGLU MLP, residual) lives in
// Model.Forward as a sequence of coarse Backend operations; see Backend for the list and for how a CUDA
// backend maps them to kernels and graphs.
//
// The golden tests compare greedy continuations and logits with HF transformers on tiny random
// checkpoints in testdata/golden, written by scripts/goldens/make_goldens.py (see its header for the
// command that regenerates them).
package model
