// Package weights reads a HuggingFace model folder: config.json, generation_config.json,
// tokenizer_config.json and safetensors weights (one file or shards listed by
// model.safetensors.index.json), memory-mapped read-only.
//
// It owns parsing and validation: every value it returns has been checked, and anything gollm cannot
// run exactly (another architecture, MLP biases, an unknown rope type, a quantization other than FP8
// e4m3, a malformed checkpoint, a missing, misshapen or unexpected tensor, a scale that is not a
// positive number) is an error that names the file and the field or tensor, wrapping one of the
// sentinel errors (ErrInvalid, ErrUnsupported, ErrTensorNotFound, ErrShapeMismatch,
// ErrUnexpectedTensor). It must not run a model, touch a device or tokenize text (package
// weights/tokenizer reads tokenizer.json).
//
// FP8 checkpoints (compressed-tensors' float-quantized and AutoFP8's forms) are read as they are:
// Config.Quantization says which Linear layers hold F8_E4M3 weights and how they are scaled,
// CheckTensors checks that the tensors agree, and ReadFP8Linear and ReadKVScales return a layer's
// codes with its checked scales, and a layer's KV cache scales. Turning them into products is the
// model's business.
//
// The main types are Config (the validated hyperparameters), GenerationConfig and TokenizerConfig
// (sampling defaults and chat template), TensorSet (named tensors whose Data aliases the mapping) and
// Folder, which bundles them:
//
//	f, err := weights.Open("/models/Llama-3.2-1B-Instruct")
//	if err != nil {
//		return err
//	}
//	defer f.Close()
//	emb, err := f.Tensors.Get("model.embed_tokens.weight") // [vocab, hidden], f.Config.DType
//
// WriteSafetensors writes a file, for tests and tools.
package weights
