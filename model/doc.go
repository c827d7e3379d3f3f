// Package model owns the forward pass of the decoder-only families gollm runs (LLaMA, Mistral, Ministral,
// Qwen2/2.5, Qwen3, Gemma 3's text model), written once against a Backend, and the pure-Go CPU backend
// that is its reference. It knows tensors, layers and batch metadata; it must not know about
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
// # Families are data
//
// A family is not a fork of the forward pass. weights.ParseConfig turns an architecture's config.json
// into one weights.Config (its architecture table, weights/family.go, is the one place an architecture's
// name is looked at), and Load turns that into data the one forward pass reads: which parameters each
// layer has (biases on the projections, q/k norms, Gemma's norms of the sublayers' outputs; an absent one
// is the zero Weight), the MLP's activation, and in the backend's Shape what each layer's attention reads
// (Shape.Layers: its sliding window and rotary table) and the model-wide scales (attention, embeddings).
// Gemma's (1 + w) norms are ordinary norms whose weights Load offsets by 1.
//
// Sliding-window layers keep their K/V in KV groups of their own (KVLayout): a step carries a block
// table per group (Step.BlockTables, Step.GroupBlockTables), and a sliding group's tables may have given
// back (−1) the pages behind every window, which the KV pool reuses.
//
// To add a family made of parts gollm has, add its architecture to weights/family.go. A new part needs a
// field of weights.Config (and its tensors in weights.TensorShapes), the data here that carries it to
// the forward pass (a layer weight, a Shape field) and, if it is a new computation, a Backend op with its
// CPU reference in cpu.go and a CUDA kernel (model/kernels, recorded in record_cuda.go, planned in
// step_plan.go's planOp, launched by exec_cuda.go); then goldens from
// scripts/goldens/make_family_goldens.py, which TestGoldenGreedy and the GPU's TestCUDAGolden both run.
//
// # FP8
//
// Quantization is a weight format, chosen at load. An FP8 checkpoint (weights.Config.Quantization:
// compressed-tensors or AutoFP8) or Options.Quantization "fp8" (a float checkpoint quantized at load,
// one scale per output row) makes the Linear layers FP8 W8A8 products: Load reads each layer's e4m3
// codes and scales (q, k, v and gate, up stacked like their float weights) and hands them to
// Backend.UploadFP8, and MatMul stays one op whose arithmetic FP8Weight defines: each input row
// rounded to e4m3 with its scale (per token, max|x|/448, or the checkpoint's static input_scale), the
// products summed in float32, the row and weight scales applied to the sum. The LM head and the
// embeddings a checkpoint leaves out keep their dtype. Options.KVCacheDType "fp8" stores the KV pages
// as e4m3 with each layer's K and V scales (the checkpoint's k_scale and v_scale, else 1 with a
// warning), a byte an element (see attention.Cache for the arithmetic). The CPU backend computes all of
// it and is the reference the GPU kernels must match. The CUDA backend runs FP8 weights on compute
// capability 8.9 or newer (fp8_cuda.go: its own weight-streaming kernel at decode sizes, cuBLASLt's e4m3
// GEMM for prefill) and an FP8 KV cache there too (e4m3 pages written by the RoPE kernel, read by the
// decode and prefill kernels' e4m3 entry points; fp8_cuda.go). scripts/goldens/make_fp8_goldens.py writes
// PyTorch's teacher-forced references (testdata/golden_fp8, TestFP8Golden).
//
// The golden tests compare greedy continuations and logits with HF transformers on tiny random
// checkpoints in testdata/golden, written by scripts/goldens/make_goldens.py (see its header for the
// command that regenerates them).
//
// # Tensor parallelism
//
// Options.TensorParallel shards a model Megatron's way over ranks, each a Model of its own over the same
// Step: its shard of every weight (cut by name at load, so a family shards as data: biases with their
// rows, per-head q/k norms replicated) on a backend wrapper that all-reduces the embedding and the
// row-parallel products (O, down) and all-gathers the logits through a model/tp Communicator. Each rank
// owns the KV pages of its heads; block tables and the scheduler stay single. The ranks run in one
// process, a goroutine each: on the CPU backend, or on GPUs (rank r on GPU r), where the all-reduces are
// NCCL's, ops of each rank's step inside its decode graphs (internal/cuda loads NCCL at run time, with
// NVLink SHARP off), and the logits come to the host to be gathered and picked there.
package model
