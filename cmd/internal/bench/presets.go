package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gollm/gollm/weights"
)

// presets are the built-in model shapes of --config: each the published config.json of the checkpoint
// named (its hyperparameters; weights are random), which Preset parses as a model folder's would be.
var presets = map[string]string{
	// google/gemma-3-12b-it's text model: 11,766,034,176 of the checkpoint's 12,187,325,040 parameters (the
	// rest is the vision tower); five sliding layers (1024 tokens) to one full, a rotary table per layer type.
	"gemma3-12b": `{
		"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262208,
		"hidden_size": 3840, "intermediate_size": 15360, "num_hidden_layers": 48, "num_attention_heads": 16,
		"num_key_value_heads": 8, "head_dim": 256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06,
		"query_pre_attn_scalar": 256, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
		"rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
		"sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
		"bos_token_id": 2, "eos_token_id": [1, 106], "torch_dtype": "bfloat16"
	}`,
	// google/gemma-3-4b-it's text model: 3,880,263,168 of the checkpoint's 4,300,079,472 parameters.
	"gemma3-4b": `{
		"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262208,
		"hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8,
		"num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06,
		"query_pre_attn_scalar": 256, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
		"rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
		"sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
		"bos_token_id": 2, "eos_token_id": [1, 106], "torch_dtype": "bfloat16"
	}`,
	// meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters, saved in float16.
	"llama2-7b": `{
		"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
		"intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
		"max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
		"bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float16"
	}`,
	// meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters.
	"llama3-8b": `{
		"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
		"intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
		"max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": null,
		"tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"
	}`,
	// meta-llama/Meta-Llama-3-70B: 70,553,706,496 parameters (141 GB in bfloat16: tensor parallelism's
	// shape, --tensor-parallel-size 2 or more on H200s).
	"llama3-70b": `{
		"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 8192,
		"intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
		"max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": null,
		"tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"
	}`,
	// meta-llama/Llama-3.1-8B: 8,030,261,248 parameters, a 128k context by llama3 rope scaling.
	"llama3.1-8b": `{
		"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
		"intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
		"max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
		"rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
		"tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"
	}`,
	// meta-llama/Llama-3.2-1B: 1,235,814,400 parameters (tied embeddings).
	"llama3.2-1b": `{
		"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
		"intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
		"head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
		"rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
		"tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"
	}`,
	// meta-llama/Llama-3.2-3B: 3,212,749,824 parameters (tied embeddings).
	"llama3.2-3b": `{
		"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 3072,
		"intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
		"head_dim": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
		"rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
		"tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"
	}`,
	// mistralai/Ministral-8B-Instruct-2410: 8,019,808,256 parameters; its ragged attention (one layer in four
	// of full 128k context, three with a 32768-token window) as MinistralForCausalLM's layer_types.
	"ministral-8b": `{
		"architectures": ["MinistralForCausalLM"], "model_type": "ministral", "vocab_size": 131072,
		"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
		"num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
		"rope_theta": 100000000.0, "sliding_window": 32768,
		"layer_types": ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention"],
		"tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
	}`,
	// mistralai/Mistral-7B-v0.3: 7,248,023,552 parameters; no sliding window.
	"mistral-7b": `{
		"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32768, "hidden_size": 4096,
		"intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
		"head_dim": 128, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
		"sliding_window": null, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
		"torch_dtype": "bfloat16"
	}`,
	// mistralai/Mistral-7B-v0.1: 7,241,732,096 parameters; every layer attends to its last 4096 positions.
	"mistral-7b-v0.1": `{
		"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
		"intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
		"max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
		"tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
	}`,
	// Qwen/Qwen2.5-7B-Instruct: 7,615,616,512 parameters (q, k, v biases; no window).
	"qwen2.5-7b": `{
		"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
		"intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
		"max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
		"use_sliding_window": false, "sliding_window": 131072, "max_window_layers": 28,
		"tie_word_embeddings": false, "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"
	}`,
	// Qwen/Qwen3-8B: 8,190,735,360 parameters (q/k norms).
	"qwen3-8b": `{
		"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
		"intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
		"head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
		"rope_scaling": null, "use_sliding_window": false, "sliding_window": null, "max_window_layers": 36,
		"attention_bias": false, "tie_word_embeddings": false, "bos_token_id": 151643, "eos_token_id": 151645,
		"torch_dtype": "bfloat16"
	}`,
	// HuggingFaceTB/SmolLM2-135M: 134,515,008 parameters (tied embeddings).
	"smollm2-135m": `{
		"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
		"intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
		"head_dim": 64, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000,
		"tie_word_embeddings": true, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"
	}`,
}

// PresetNames returns the names --config accepts, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns a fresh copy of the built-in shape name (see PresetNames). The error wraps
// ErrUnknownPreset.
func Preset(name string) (*weights.Config, error) {
	p, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("bench: config %q: %w (built in: %s)", name, ErrUnknownPreset,
			strings.Join(PresetNames(), ", "))
	}
	cfg, err := weights.ParseConfig([]byte(p))
	if err != nil {
		panic(fmt.Sprintf("bench: preset %s: %v", name, err)) // the table is wrong: a programmer error
	}
	return cfg, nil
}

// CheckContext refuses a run whose sequences need more tokens (prompt plus output) than the model's
// context, max_position_embeddings, before anything loads: the error, wrapping ErrInvalidOptions, names
// the context and the built-in shapes whose context would hold the sequence.
func CheckContext(cfg *weights.Config, name string, tokens int) error {
	if tokens <= cfg.MaxPositionEmbeddings {
		return nil
	}
	var longer []string
	for _, n := range PresetNames() {
		if c, _ := Preset(n); c.MaxPositionEmbeddings >= tokens {
			longer = append(longer, fmt.Sprintf("%s (%d)", n, c.MaxPositionEmbeddings))
		}
	}
	hint := "no built-in shape has a context that long"
	if len(longer) > 0 {
		hint = "built-in shapes that hold it: " + strings.Join(longer, ", ")
	}
	return fmt.Errorf("bench: %d tokens per sequence (input plus output) exceed %s's context of %d tokens (max_position_embeddings); %s: %w",
		tokens, name, cfg.MaxPositionEmbeddings, hint, ErrInvalidOptions)
}
