// Package weights reads a HuggingFace model folder: config.json, generation_config.json,
// tokenizer_config.json and safetensors (single or sharded, memory-mapped). It validates what it reads
// and returns clear errors naming the file and field; it must not run a model.
package weights
