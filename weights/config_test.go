package weights

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadConfigFixtures(t *testing.T) {
	noScaling := RopeScaling{Type: "default"}
	llama32Rope := RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	tests := []struct {
		file    string
		want    *Config
		wantErr []string // substrings of the error, when an error is expected
		is      error
	}{
		{file: "llama-3-8b.json", want: &Config{
			Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 8192,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: noScaling,
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001}, DType: DTypeBF16,
		}},
		{file: "llama-3.2-1b-instruct.json", want: &Config{
			Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192,
			NumHiddenLayers: 16, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, MaxPositionEmbeddings: 131072,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama32Rope, TieWordEmbeddings: true,
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001, 128008, 128009}, DType: DTypeBF16,
		}},
		{file: "llama-3.2-1b-transformers5.json", want: &Config{
			Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192,
			NumHiddenLayers: 16, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, MaxPositionEmbeddings: 131072,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama32Rope, TieWordEmbeddings: true,
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001}, DType: DTypeBF16,
		}},
		{file: "tinyllama-1.1b-chat-v1.0.json", want: &Config{
			Architecture: "LlamaForCausalLM", VocabSize: 32000, HiddenSize: 2048, IntermediateSize: 5632,
			NumHiddenLayers: 22, NumAttentionHeads: 32, NumKeyValueHeads: 4, HeadDim: 64, MaxPositionEmbeddings: 2048,
			RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: noScaling,
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: DTypeBF16,
		}},
		{file: "mistral-7b-v0.1.json", wantErr: []string{"sliding_window", "4096", "32768"}, is: ErrUnsupported},
		{file: "mistral-7b-instruct-v0.2.json", want: &Config{
			Architecture: "MistralForCausalLM", VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-5, RopeTheta: 1e6, RopeScaling: noScaling,
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: DTypeBF16,
		}},
		{file: "smollm2-135m.json", want: &Config{
			Architecture: "LlamaForCausalLM", VocabSize: 49152, HiddenSize: 576, IntermediateSize: 1536,
			NumHiddenLayers: 30, NumAttentionHeads: 9, NumKeyValueHeads: 3, HeadDim: 64, MaxPositionEmbeddings: 8192,
			RMSNormEps: 1e-5, RopeTheta: 100000, RopeScaling: noScaling, TieWordEmbeddings: true,
			BOSTokenIDs: []int32{0}, EOSTokenIDs: []int32{0}, DType: DTypeBF16,
		}},
		{file: "vicuna-7b-v1.5-16k.json", want: &Config{
			Architecture: "LlamaForCausalLM", VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 11008,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 32, HeadDim: 128, MaxPositionEmbeddings: 4096,
			RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: RopeScaling{Type: "linear", Factor: 4},
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: DTypeF16,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "config", tc.file)
			got, err := LoadConfig(path)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("LoadConfig = %+v, want an error", got)
				}
				checkError(t, err, tc.is, append(tc.wantErr, path)...)
				return
			}
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			tc.want.dtypeGiven = true
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("LoadConfig =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// checkError fails unless err wraps is (when not nil) and mentions every substring.
func checkError(t *testing.T, err error, is error, substrings ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", substrings)
	}
	if is != nil && !errors.Is(err, is) {
		t.Errorf("error %q does not wrap %q", err, is)
	}
	for _, s := range substrings {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// tinyLlamaConfig returns the TinyLlama fixture as a generic map to patch.
func tinyLlamaConfig(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "config", "tinyllama-1.1b-chat-v1.0.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseConfigVariants(t *testing.T) {
	type patch map[string]any // nil value deletes the key
	tests := []struct {
		name    string
		patch   patch
		check   func(t *testing.T, c *Config)
		wantErr []string
		is      error
	}{
		{name: "num_key_value_heads defaults to heads", patch: patch{"num_key_value_heads": nil},
			check: func(t *testing.T, c *Config) { wantEq(t, "NumKeyValueHeads", c.NumKeyValueHeads, 32) }},
		{name: "head_dim may differ from hidden/heads", patch: patch{"head_dim": 128, "num_attention_heads": 8, "num_key_value_heads": 1},
			check: func(t *testing.T, c *Config) { wantEq(t, "HeadDim", c.HeadDim, 128) }},
		{name: "head_dim null means the default", patch: patch{"head_dim": "null"},
			check: func(t *testing.T, c *Config) { wantEq(t, "HeadDim", c.HeadDim, 64) }},
		{name: "head_dim rescues heads that do not divide hidden", patch: patch{"num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 96},
			check: func(t *testing.T, c *Config) { wantEq(t, "HeadDim", c.HeadDim, 96) }},
		{name: "defaults of LlamaConfig", patch: patch{"rms_norm_eps": nil, "rope_theta": nil, "max_position_embeddings": nil, "bos_token_id": nil, "eos_token_id": nil, "tie_word_embeddings": nil, "torch_dtype": nil, "rope_scaling": nil},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "RMSNormEps", c.RMSNormEps, 1e-6)
				wantEq(t, "RopeTheta", c.RopeTheta, 10000.0)
				wantEq(t, "MaxPositionEmbeddings", c.MaxPositionEmbeddings, 2048)
				wantEq(t, "BOSTokenIDs", c.BOSTokenIDs, []int32{1})
				wantEq(t, "EOSTokenIDs", c.EOSTokenIDs, []int32{2})
				wantEq(t, "TieWordEmbeddings", c.TieWordEmbeddings, false)
				wantEq(t, "DType", c.DType, DTypeF32)
				wantEq(t, "RopeScaling", c.RopeScaling, RopeScaling{Type: "default"})
			}},
		{name: "null token ids are empty", patch: patch{"bos_token_id": "null", "eos_token_id": "null"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "BOSTokenIDs", len(c.BOSTokenIDs), 0)
				wantEq(t, "EOSTokenIDs", len(c.EOSTokenIDs), 0)
			}},
		{name: "model_type alone names the architecture", patch: patch{"architectures": nil},
			check: func(t *testing.T, c *Config) { wantEq(t, "Architecture", c.Architecture, "LlamaForCausalLM") }},
		{name: "dtype and torch_dtype agreeing", patch: patch{"dtype": "float16", "torch_dtype": "float16"},
			check: func(t *testing.T, c *Config) { wantEq(t, "DType", c.DType, DTypeF16) }},
		{name: "rope_scaling default type", patch: patch{"rope_scaling": map[string]any{"rope_type": "default"}},
			check: func(t *testing.T, c *Config) { wantEq(t, "RopeScaling", c.RopeScaling, RopeScaling{Type: "default"}) }},
		{name: "rope_parameters linear", patch: patch{"rope_theta": nil, "rope_parameters": map[string]any{"rope_type": "linear", "factor": 2.0, "rope_theta": 20000.0}},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "RopeScaling", c.RopeScaling, RopeScaling{Type: "linear", Factor: 2})
				wantEq(t, "RopeTheta", c.RopeTheta, 20000.0)
			}},
		{name: "rope_parameters without theta keeps rope_theta", patch: patch{"rope_theta": 30000.0, "rope_parameters": map[string]any{"rope_type": "default"}},
			check: func(t *testing.T, c *Config) { wantEq(t, "RopeTheta", c.RopeTheta, 30000.0) }},
		{name: "both rope styles agreeing", patch: patch{"rope_theta": 500000.0,
			"rope_scaling":    map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
			"rope_parameters": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}},
			check: func(t *testing.T, c *Config) { wantEq(t, "RopeScaling.Factor", c.RopeScaling.Factor, 8.0) }},
		{name: "Mistral with a window as long as the context", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "sliding_window": 2048},
			check: func(t *testing.T, c *Config) { wantEq(t, "Architecture", c.Architecture, "MistralForCausalLM") }},
		{name: "Llama ignores sliding_window as transformers does", patch: patch{"sliding_window": 16},
			check: func(t *testing.T, c *Config) { wantEq(t, "Architecture", c.Architecture, "LlamaForCausalLM") }},
		{name: "integral float accepted", patch: patch{"hidden_size": 2048.0},
			check: func(t *testing.T, c *Config) { wantEq(t, "HiddenSize", c.HiddenSize, 2048) }},

		{name: "attention_bias", patch: patch{"attention_bias": true}, wantErr: []string{"attention_bias"}, is: ErrUnsupported},
		{name: "mlp_bias", patch: patch{"mlp_bias": true}, wantErr: []string{"mlp_bias"}, is: ErrUnsupported},
		{name: "other architecture", patch: patch{"architectures": []string{"Qwen2ForCausalLM"}}, wantErr: []string{"architectures", "Qwen2ForCausalLM"}, is: ErrUnsupported},
		{name: "two architectures", patch: patch{"architectures": []string{"LlamaForCausalLM", "MistralForCausalLM"}}, wantErr: []string{"architectures"}, is: ErrUnsupported},
		{name: "other model_type", patch: patch{"architectures": nil, "model_type": "qwen2"}, wantErr: []string{"model_type", "qwen2"}, is: ErrUnsupported},
		{name: "model_type disagrees", patch: patch{"model_type": "mistral"}, wantErr: []string{"model_type"}, is: ErrInvalid},
		{name: "no architecture at all", patch: patch{"architectures": nil, "model_type": nil}, wantErr: []string{"architectures"}, is: ErrInvalid},
		{name: "yarn rope", patch: patch{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4.0}}, wantErr: []string{"rope_scaling.rope_type", "yarn"}, is: ErrUnsupported},
		// Named by their type, whatever other keys they carry (Yarn-Llama-2's and Phi-3's objects):
		// unknown keys are looked at only for a supported type.
		{name: "yarn rope with its keys", patch: patch{"rope_scaling": map[string]any{"type": "yarn", "factor": 16.0,
			"original_max_position_embeddings": 4096, "finetuned": true, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
			"mscale_all_dim": 0.0}}, wantErr: []string{"rope_scaling.rope_type", "yarn"}, is: ErrUnsupported},
		{name: "longrope with its keys", patch: patch{"rope_scaling": map[string]any{"type": "longrope",
			"short_factor": []float64{1, 1}, "long_factor": []float64{2, 2}}}, wantErr: []string{"rope_scaling.rope_type", "longrope"}, is: ErrUnsupported},
		{name: "dynamic rope old spelling", patch: patch{"rope_scaling": map[string]any{"type": "dynamic", "factor": 2.0}}, wantErr: []string{"rope_scaling.rope_type", "dynamic"}, is: ErrUnsupported},
		{name: "rope_parameters unknown type", patch: patch{"rope_parameters": map[string]any{"rope_type": "longrope", "rope_theta": 1e4}}, wantErr: []string{"rope_parameters.rope_type", "longrope"}, is: ErrUnsupported},
		{name: "rope type missing", patch: patch{"rope_scaling": map[string]any{"factor": 2.0}}, wantErr: []string{"rope_scaling.rope_type", "missing"}, is: ErrInvalid},
		{name: "unknown rope key", patch: patch{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 2.0, "beta_fast": 32}}, wantErr: []string{"rope_scaling.beta_fast"}, is: ErrUnsupported},
		{name: "linear without factor", patch: patch{"rope_scaling": map[string]any{"type": "linear"}}, wantErr: []string{"rope_scaling.factor"}, is: ErrInvalid},
		{name: "llama3 without low_freq_factor", patch: patch{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}, wantErr: []string{"rope_scaling.low_freq_factor"}, is: ErrInvalid},
		{name: "llama3 without original context", patch: patch{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}}, wantErr: []string{"rope_scaling.original_max_position_embeddings"}, is: ErrInvalid},
		{name: "llama3 frequencies reversed", patch: patch{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}}, wantErr: []string{"rope_scaling.high_freq_factor"}, is: ErrInvalid},
		{name: "partial rotary", patch: patch{"partial_rotary_factor": 0.5}, wantErr: []string{"partial_rotary_factor"}, is: ErrUnsupported},
		{name: "rope theta conflict", patch: patch{"rope_theta": 10000.0, "rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 500000.0}}, wantErr: []string{"rope_parameters.rope_theta", "rope_theta"}, is: ErrInvalid},
		{name: "rope scaling conflict", patch: patch{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 2.0}, "rope_parameters": map[string]any{"rope_type": "linear", "factor": 4.0}}, wantErr: []string{"rope_parameters", "rope_scaling"}, is: ErrInvalid},
		{name: "kv heads do not divide heads", patch: patch{"num_key_value_heads": 6}, wantErr: []string{"num_key_value_heads", "6", "32"}, is: ErrInvalid},
		{name: "heads do not divide hidden", patch: patch{"num_attention_heads": 24, "num_key_value_heads": 8}, wantErr: []string{"num_attention_heads", "hidden_size"}, is: ErrInvalid},
		{name: "odd head_dim", patch: patch{"head_dim": 63}, wantErr: []string{"head_dim", "63"}, is: ErrInvalid},
		{name: "missing hidden_size", patch: patch{"hidden_size": nil}, wantErr: []string{"hidden_size", "missing"}, is: ErrInvalid},
		{name: "zero layers", patch: patch{"num_hidden_layers": 0}, wantErr: []string{"num_hidden_layers"}, is: ErrInvalid},
		{name: "fractional size", patch: patch{"intermediate_size": 5632.5}, wantErr: []string{"intermediate_size"}, is: ErrInvalid},
		{name: "string size", patch: patch{"vocab_size": "32000"}, wantErr: []string{"vocab_size"}, is: ErrInvalid},
		{name: "negative eps", patch: patch{"rms_norm_eps": -1.0}, wantErr: []string{"rms_norm_eps"}, is: ErrInvalid},
		{name: "float64 dtype", patch: patch{"torch_dtype": "float64"}, wantErr: []string{"torch_dtype", "float64"}, is: ErrUnsupported},
		{name: "dtype disagreement", patch: patch{"dtype": "float16", "torch_dtype": "bfloat16"}, wantErr: []string{"dtype", "torch_dtype"}, is: ErrInvalid},
		{name: "quantized", patch: patch{"quantization_config": map[string]any{"quant_method": "gptq"}}, wantErr: []string{"quantization_config"}, is: ErrUnsupported},
		{name: "gelu", patch: patch{"hidden_act": "gelu"}, wantErr: []string{"hidden_act", "gelu"}, is: ErrUnsupported},
		{name: "eos beyond vocab", patch: patch{"eos_token_id": []int{2, 32000}}, wantErr: []string{"eos_token_id", "32000"}, is: ErrInvalid},
		{name: "negative bos", patch: patch{"bos_token_id": -1}, wantErr: []string{"bos_token_id"}, is: ErrInvalid},
		{name: "Mistral default window", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "max_position_embeddings": 32768}, wantErr: []string{"sliding_window", "4096"}, is: ErrUnsupported},
		{name: "Mistral default context", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "max_position_embeddings": nil, "sliding_window": 4096}, wantErr: []string{"sliding_window", "131072"}, is: ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tinyLlamaConfig(t)
			for k, v := range tc.patch {
				switch v {
				case nil:
					delete(m, k)
				case "null":
					m[k] = nil
				default:
					m[k] = v
				}
			}
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseConfig(data)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("ParseConfig = %+v, want an error", c)
				}
				checkError(t, err, tc.is, tc.wantErr...)
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			tc.check(t, c)
		})
	}
}

func wantEq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestParseConfigMalformed(t *testing.T) {
	tests := []struct {
		name string
		data string
	}{
		{"empty", ""},
		{"not JSON", "{hidden_size: 1}"},
		{"array", "[]"},
		{"null", "null"},
		{"trailing data", `{"model_type": "llama"} {}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.data))
			checkError(t, err, ErrInvalid, "config")
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := LoadConfig(filepath.Join(t.TempDir(), "config.json"))
	checkError(t, err, os.ErrNotExist, "config.json")
}

// TestParseConfigHostile: configs crafted to break the loader. Sizes whose products overflow
// (4 heads × 2⁶² wrapped to 0, an empty q_proj passed the tensor check and model.Load panicked), a
// layer count that made the loader build hundreds of millions of expected tensors, and rope fields that
// disagree (rope_type against type, rope_scaling's rope_theta against rope_theta), which transformers 4,
// transformers 5 and vLLM resolve differently: all refused, naming the field.
func TestParseConfigHostile(t *testing.T) {
	const base = `"architectures":["LlamaForCausalLM"],"vocab_size":4,"hidden_size":8,"intermediate_size":4,"num_attention_heads":4,"num_key_value_heads":4`
	tests := []struct {
		name, extra, field string
	}{
		{"head_dim overflow", `"num_hidden_layers":1,"head_dim":4611686018427387904`, "head_dim"},
		{"huge layer count", `"num_hidden_layers":100000000`, "num_hidden_layers"},
		{"huge context", `"num_hidden_layers":1,"max_position_embeddings":1099511627776`, "max_position_embeddings"},
		{"rope_type against type", `"num_hidden_layers":1,"rope_scaling":{"rope_type":"default","type":"yarn","factor":4.0}`, "rope_type"},
		{"rope_type against type, both supported", `"num_hidden_layers":1,"rope_scaling":{"rope_type":"linear","type":"dynamic","factor":4.0}`, "rope_type"},
		{"rope_scaling theta against rope_theta", `"num_hidden_layers":1,"rope_theta":10000,"rope_scaling":{"rope_type":"default","rope_theta":500000}`, "rope_theta"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte("{" + base + "," + tc.extra + "}"))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err %v, want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
	// Agreeing spellings stay accepted.
	for _, ok := range []string{
		`"num_hidden_layers":1,"rope_scaling":{"rope_type":"linear","type":"linear","factor":2.0}`,
		`"num_hidden_layers":1,"rope_theta":500000,"rope_scaling":{"rope_type":"default","rope_theta":500000}`,
	} {
		if _, err := ParseConfig([]byte("{" + base + "," + ok + "}")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
