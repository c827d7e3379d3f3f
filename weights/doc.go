// Package weights reads a HuggingFace model folder: config.json, generation_config.json,
// tokenizer_config.json and safetensors weights (one file or shards listed by
// model.safetensors.index.json), memory-mapped read-only.
//
// It owns parsing and validation: every value it returns has been checked, and anything gollm cannot
// run exactly (another architecture, attention or MLP biases, sliding-window attention, an unknown
// rope type, a quantized or malformed checkpoint, a missing, misshapen or unexpected tensor) is an
// error that names the file and the field or tensor, wrapping one of the sentinel errors (ErrInvalid,
// ErrUnsupported, ErrTensorNotFound, ErrShapeMismatch, ErrUnexpectedTensor). It must not run a model,
// touch a device or tokenize text (package weights/tokenizer reads tokenizer.json).
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
