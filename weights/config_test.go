package weights

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
			Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenAct: ActSiLU, VocabSize: 128256, HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 8192,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: noScaling,
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001}, DType: DTypeBF16,
		}},
		{file: "llama-3.2-1b-instruct.json", want: &Config{
			Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenAct: ActSiLU, VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192,
			NumHiddenLayers: 16, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, MaxPositionEmbeddings: 131072,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama32Rope, TieWordEmbeddings: true,
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001, 128008, 128009}, DType: DTypeBF16,
		}},
		{file: "llama-3.2-1b-transformers5.json", want: &Config{
			Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenAct: ActSiLU, VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192,
			NumHiddenLayers: 16, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, MaxPositionEmbeddings: 131072,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama32Rope, TieWordEmbeddings: true,
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001}, DType: DTypeBF16,
		}},
		{file: "tinyllama-1.1b-chat-v1.0.json", want: &Config{
			Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenAct: ActSiLU, VocabSize: 32000, HiddenSize: 2048, IntermediateSize: 5632,
			NumHiddenLayers: 22, NumAttentionHeads: 32, NumKeyValueHeads: 4, HeadDim: 64, MaxPositionEmbeddings: 2048,
			RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: noScaling,
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: DTypeBF16,
		}},
		{file: "mistral-7b-v0.1.json", want: &Config{
			Architecture: "MistralForCausalLM", ModelType: "mistral", HiddenAct: ActSiLU, VocabSize: 32000, HiddenSize: 4096,
			IntermediateSize: 14336, NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
			MaxPositionEmbeddings: 32768, RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: noScaling,
			LayerTypes: repeatTypes(32, SlidingAttention), SlidingWindow: 4096,
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: DTypeBF16,
		}},
		{file: "llama-3.1-8b-instruct.json", want: &Config{
			Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenAct: ActSiLU, VocabSize: 128256, HiddenSize: 4096,
			IntermediateSize: 14336, NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
			MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling: RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001, 128008, 128009}, DType: DTypeBF16,
		}},
		{file: "qwen2.5-7b-instruct.json", want: &Config{
			// use_sliding_window false: no layer slides, whatever sliding_window and max_window_layers say.
			Architecture: "Qwen2ForCausalLM", ModelType: "qwen2", HiddenAct: ActSiLU, QKVBias: true, VocabSize: 152064,
			HiddenSize: 3584, IntermediateSize: 18944, NumHiddenLayers: 28, NumAttentionHeads: 28, NumKeyValueHeads: 4,
			HeadDim: 128, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6, RopeScaling: noScaling,
			BOSTokenIDs: []int32{151643}, EOSTokenIDs: []int32{151645}, DType: DTypeBF16,
		}},
		{file: "qwen3-8b.json", want: &Config{
			Architecture: "Qwen3ForCausalLM", ModelType: "qwen3", HiddenAct: ActSiLU, QKNorm: true, VocabSize: 151936,
			HiddenSize: 4096, IntermediateSize: 12288, NumHiddenLayers: 36, NumAttentionHeads: 32, NumKeyValueHeads: 8,
			HeadDim: 128, MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6, RopeTheta: 1e6, RopeScaling: noScaling,
			BOSTokenIDs: []int32{151643}, EOSTokenIDs: []int32{151645}, DType: DTypeBF16,
		}},
		{file: "ministral-8b-layer-types.json", want: &Config{
			Architecture: "MinistralForCausalLM", ModelType: "ministral", HiddenAct: ActSiLU, VocabSize: 131072,
			HiddenSize: 4096, IntermediateSize: 12288, NumHiddenLayers: 36, NumAttentionHeads: 32, NumKeyValueHeads: 8,
			HeadDim: 128, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 1e8, RopeScaling: noScaling,
			LayerTypes: patternTypes(36, func(i int) bool { return i%4 != 0 }), SlidingWindow: 32768,
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: DTypeBF16,
		}},
		{file: "gemma-3-1b-it.json", want: &Config{
			Architecture: "Gemma3ForCausalLM", ModelType: "gemma3_text", HiddenAct: ActGELUTanh, VocabSize: 262144,
			HiddenSize: 1152, IntermediateSize: 6912, NumHiddenLayers: 26, NumAttentionHeads: 4, NumKeyValueHeads: 1,
			HeadDim: 256, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6, RopeScaling: noScaling,
			LayerTypes: patternTypes(26, func(i int) bool { return (i+1)%6 != 0 }), SlidingWindow: 512,
			LocalRopeTheta: 10000, LocalRopeScaling: noScaling, QKNorm: true, NormOffset: 1, SandwichNorm: true,
			EmbedScale: true, QueryPreAttnScalar: 256, TieWordEmbeddings: true,
			BOSTokenIDs: []int32{2}, EOSTokenIDs: []int32{1, 106}, DType: DTypeBF16,
		}},
		{file: "gemma-3-4b-it.json", want: gemma3_4b()},
		{file: "gemma-3-4b-it-transformers5.json", want: gemma3_4b()},
		{file: "mistral-7b-instruct-v0.2.json", want: &Config{
			Architecture: "MistralForCausalLM", ModelType: "mistral", HiddenAct: ActSiLU, VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-5, RopeTheta: 1e6, RopeScaling: noScaling,
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: DTypeBF16,
		}},
		{file: "smollm2-135m.json", want: &Config{
			Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenAct: ActSiLU, VocabSize: 49152, HiddenSize: 576, IntermediateSize: 1536,
			NumHiddenLayers: 30, NumAttentionHeads: 9, NumKeyValueHeads: 3, HeadDim: 64, MaxPositionEmbeddings: 8192,
			RMSNormEps: 1e-5, RopeTheta: 100000, RopeScaling: noScaling, TieWordEmbeddings: true,
			BOSTokenIDs: []int32{0}, EOSTokenIDs: []int32{0}, DType: DTypeBF16,
		}},
		{file: "vicuna-7b-v1.5-16k.json", want: &Config{
			Architecture: "LlamaForCausalLM", ModelType: "llama", HiddenAct: ActSiLU, VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 11008,
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
			if tc.want.textConfig {
				// ParseConfig assumes transformers 5's layout; Open finds the checkpoint's.
				tc.want.tensorPrefix, tc.want.lmHead = "model.language_model.", "lm_head.weight"
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("LoadConfig =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// gemma3_4b is google/gemma-3-4b-it's text model: its text_config names few fields, the rest are
// Gemma3TextConfig's defaults (8 heads, 4 KV heads, head_dim 256, rope_local_base_freq 10000, a
// pattern of 6); linear rope scaling applies to the full-attention layers only.
func gemma3_4b() *Config {
	return &Config{
		Architecture: "Gemma3ForConditionalGeneration", ModelType: "gemma3_text", HiddenAct: ActGELUTanh,
		VocabSize: 262208, HiddenSize: 2560, IntermediateSize: 10240, NumHiddenLayers: 34, NumAttentionHeads: 8,
		NumKeyValueHeads: 4, HeadDim: 256, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-6, RopeTheta: 1e6,
		RopeScaling: RopeScaling{Type: "linear", Factor: 8},
		LayerTypes:  patternTypes(34, func(i int) bool { return (i+1)%6 != 0 }), SlidingWindow: 1024,
		LocalRopeTheta: 10000, LocalRopeScaling: RopeScaling{Type: "default"}, QKNorm: true, NormOffset: 1,
		SandwichNorm: true, EmbedScale: true, QueryPreAttnScalar: 256, TieWordEmbeddings: true,
		BOSTokenIDs: []int32{2}, EOSTokenIDs: []int32{1, 106}, DType: DTypeBF16, textConfig: true,
	}
}

// repeatTypes returns n copies of kind.
func repeatTypes(n int, kind string) []string {
	return patternTypes(n, func(int) bool { return kind == SlidingAttention })
}

// patternTypes returns the layer types of n layers, layer i sliding when sliding(i).
func patternTypes(n int, sliding func(i int) bool) []string {
	types := make([]string, n)
	for i := range types {
		types[i] = FullAttention
		if sliding(i) {
			types[i] = SlidingAttention
		}
	}
	return types
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

		{name: "Llama attention_bias", patch: patch{"attention_bias": true},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "QKVBias, OBias", [2]bool{c.QKVBias, c.OBias}, [2]bool{true, true})
			}},
		{name: "Mistral attention_bias", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "attention_bias": true}, wantErr: []string{"attention_bias", "MistralForCausalLM"}, is: ErrUnsupported},
		{name: "Qwen2 attention_bias", patch: patch{"architectures": []string{"Qwen2ForCausalLM"}, "model_type": "qwen2", "attention_bias": true}, wantErr: []string{"attention_bias"}, is: ErrUnsupported},
		{name: "mlp_bias", patch: patch{"mlp_bias": true}, wantErr: []string{"mlp_bias"}, is: ErrUnsupported},
		{name: "other architecture", patch: patch{"architectures": []string{"Phi3ForCausalLM"}}, wantErr: []string{"architectures", "Phi3ForCausalLM", "Qwen3ForCausalLM"}, is: ErrUnsupported},
		{name: "two architectures", patch: patch{"architectures": []string{"LlamaForCausalLM", "MistralForCausalLM"}}, wantErr: []string{"architectures"}, is: ErrUnsupported},
		{name: "other model_type", patch: patch{"architectures": nil, "model_type": "phi3"}, wantErr: []string{"model_type", "phi3"}, is: ErrUnsupported},
		{name: "model_type of another family", patch: patch{"architectures": []string{"Qwen2ForCausalLM"}}, wantErr: []string{"model_type", "qwen2"}, is: ErrInvalid},
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
		{name: "Mistral default window", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "max_position_embeddings": 32768, "num_key_value_heads": 8},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "SlidingWindow", c.SlidingWindow, 4096)
				wantEq(t, "LayerTypes", c.LayerTypes, repeatTypes(22, SlidingAttention))
			}},
		{name: "Mistral default context and KV heads", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "max_position_embeddings": nil, "num_key_value_heads": nil},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "MaxPositionEmbeddings", c.MaxPositionEmbeddings, 131072)
				wantEq(t, "NumKeyValueHeads", c.NumKeyValueHeads, 8)
				wantEq(t, "SlidingWindow", c.SlidingWindow, 4096)
			}},
		{name: "Mistral null window", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "sliding_window": "null"},
			check: func(t *testing.T, c *Config) { wantEq(t, "LayerTypes", c.LayerTypes, []string(nil)) }},
		{name: "Mistral layer_types agreeing", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "sliding_window": 16, "layer_types": repeatTypes(22, SlidingAttention)},
			check: func(t *testing.T, c *Config) { wantEq(t, "SlidingWindow", c.SlidingWindow, 16) }},
		{name: "Mistral layer_types it would ignore", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "sliding_window": 16, "layer_types": patternTypes(22, func(i int) bool { return i%2 == 0 })}, wantErr: []string{"layer_types", "MinistralForCausalLM"}, is: ErrUnsupported},
		{name: "Llama sliding layer_types", patch: patch{"layer_types": repeatTypes(22, SlidingAttention)}, wantErr: []string{"layer_types", "LlamaForCausalLM"}, is: ErrUnsupported},
		{name: "Ministral layer_types", patch: patch{"architectures": []string{"MinistralForCausalLM"}, "model_type": "ministral", "sliding_window": 16, "layer_types": patternTypes(22, func(i int) bool { return i%2 == 0 })},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "LayerTypes", c.LayerTypes, patternTypes(22, func(i int) bool { return i%2 == 0 }))
				wantEq(t, "LayerWindow(0), LayerWindow(1)", [2]int{c.LayerWindow(0), c.LayerWindow(1)}, [2]int{16, 0})
			}},
		{name: "Ministral without layer_types slides everywhere", patch: patch{"architectures": []string{"MinistralForCausalLM"}, "model_type": "ministral", "sliding_window": 16},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "LayerTypes", c.LayerTypes, repeatTypes(22, SlidingAttention))
			}},
		{name: "window as long as the context is no window", patch: patch{"architectures": []string{"MinistralForCausalLM"}, "model_type": "ministral", "sliding_window": 2048},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "LayerTypes", c.LayerTypes, repeatTypes(22, SlidingAttention))
				wantEq(t, "SlidingWindow", c.SlidingWindow, 0)
				wantEq(t, "LayerWindow(0)", c.LayerWindow(0), 0)
			}},
		{name: "Qwen2 sliding from max_window_layers", patch: patch{"architectures": []string{"Qwen2ForCausalLM"}, "model_type": "qwen2", "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 20, "bos_token_id": nil, "eos_token_id": nil},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "LayerTypes", c.LayerTypes, patternTypes(22, func(i int) bool { return i >= 20 }))
				wantEq(t, "SlidingWindow", c.SlidingWindow, 64)
				wantEq(t, "QKVBias, OBias", [2]bool{c.QKVBias, c.OBias}, [2]bool{true, false})
				wantEq(t, "BOS, EOS", [2][]int32{c.BOSTokenIDs, c.EOSTokenIDs}, [2][]int32{nil, nil})
			}},
		{name: "Qwen2 window off", patch: patch{"architectures": []string{"Qwen2ForCausalLM"}, "model_type": "qwen2", "use_sliding_window": false, "sliding_window": 64, "max_window_layers": 0},
			check: func(t *testing.T, c *Config) { wantEq(t, "LayerTypes", c.LayerTypes, []string(nil)) }},
		{name: "Qwen3 defaults", patch: patch{"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "head_dim": nil, "num_key_value_heads": nil, "attention_bias": true},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "HeadDim", c.HeadDim, 128)
				wantEq(t, "NumKeyValueHeads", c.NumKeyValueHeads, 32)
				wantEq(t, "QKNorm", c.QKNorm, true)
				wantEq(t, "QKVBias, OBias", [2]bool{c.QKVBias, c.OBias}, [2]bool{true, true})
			}},
		// MistralConfig, Qwen2Config and Qwen3Config take num_key_value_heads None to mean
		// num_attention_heads; only an absent key takes the class's default (8, 32).
		{name: "Mistral null num_key_value_heads means heads", patch: patch{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "num_attention_heads": 16, "num_key_value_heads": "null"},
			check: func(t *testing.T, c *Config) { wantEq(t, "NumKeyValueHeads", c.NumKeyValueHeads, 16) }},
		{name: "Qwen3 null num_key_value_heads means heads", patch: patch{"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "num_attention_heads": 16, "num_key_value_heads": "null"},
			check: func(t *testing.T, c *Config) { wantEq(t, "NumKeyValueHeads", c.NumKeyValueHeads, 16) }},
		{name: "keyed rope_parameters on a model with one rope", patch: patch{"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "default"}}}, wantErr: []string{"rope_parameters", "layer type"}, is: ErrUnsupported},
		{name: "unknown layer type", patch: patch{"architectures": []string{"MinistralForCausalLM"}, "model_type": "ministral", "layer_types": slices.Repeat([]string{"chunked_attention"}, 22)}, wantErr: []string{"layer_types[0]", "chunked_attention"}, is: ErrUnsupported},
		{name: "layer_types of the wrong length", patch: patch{"architectures": []string{"MinistralForCausalLM"}, "model_type": "ministral", "layer_types": repeatTypes(3, SlidingAttention)}, wantErr: []string{"layer_types", "3 entries"}, is: ErrInvalid},
		{name: "legacy attention layer type", patch: patch{"architectures": []string{"MinistralForCausalLM"}, "model_type": "ministral", "sliding_window": 8, "layer_types": append(repeatTypes(21, SlidingAttention), "attention")},
			check: func(t *testing.T, c *Config) { wantEq(t, "LayerType(21)", c.LayerType(21), FullAttention) }},
		{name: "zero window", patch: patch{"architectures": []string{"MinistralForCausalLM"}, "model_type": "ministral", "sliding_window": 0}, wantErr: []string{"sliding_window"}, is: ErrInvalid},
		{name: "gelu tanh on a Llama", patch: patch{"hidden_act": "gelu_pytorch_tanh"},
			check: func(t *testing.T, c *Config) { wantEq(t, "Activation", c.Activation(), ActGELUTanh) }},
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

// TestParseConfigGemma3 patches google/gemma-3-1b-it's config: the rotary embeddings of the two layer
// types in both config forms, the layer pattern, the soft caps, and what is refused.
func TestParseConfigGemma3(t *testing.T) {
	type patch map[string]any // nil value deletes the key
	linear8 := RopeScaling{Type: "linear", Factor: 8}
	tests := []struct {
		name    string
		patch   patch
		check   func(t *testing.T, c *Config)
		wantErr []string
		is      error
	}{
		{name: "transformers 4 ropes", patch: patch{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 8.0}, "rope_local_base_freq": 20000.0},
			check: func(t *testing.T, c *Config) {
				theta, sc := c.LayerRope(5)
				wantEq(t, "full rope", []any{theta, sc}, []any{1e6, linear8})
				theta, sc = c.LayerRope(0)
				wantEq(t, "sliding rope", []any{theta, sc}, []any{20000.0, RopeScaling{Type: "default"}})
			}},
		{name: "transformers 5 ropes", patch: patch{"rope_theta": nil, "rope_local_base_freq": nil, "rope_scaling": nil,
			"rope_parameters": map[string]any{
				"full_attention":    map[string]any{"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
				"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 10000.0}}},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "full", []any{c.RopeTheta, c.RopeScaling}, []any{1e6, linear8})
				wantEq(t, "local", []any{c.LocalRopeTheta, c.LocalRopeScaling}, []any{10000.0, RopeScaling{Type: "default"}})
			}},
		{name: "rope_parameters missing a type take the defaults", patch: patch{"rope_theta": nil, "rope_local_base_freq": nil,
			"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "default"}}},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "thetas", []float64{c.RopeTheta, c.LocalRopeTheta}, []float64{1e6, 1e4})
			}},
		{name: "window longer than the context keeps the sliding layers' rope", patch: patch{"sliding_window": 40000},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "SlidingWindow", c.SlidingWindow, 0)
				theta, _ := c.LayerRope(0)
				wantEq(t, "layer 0's rope_theta", theta, 10000.0)
			}},
		{name: "one rope for both types", patch: patch{"rope_local_base_freq": 1e6},
			check: func(t *testing.T, c *Config) { wantEq(t, "LocalRopeTheta", c.LocalRopeTheta, 0.0) }},
		{name: "layer pattern", patch: patch{"sliding_window_pattern": 2, "num_hidden_layers": 4},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "LayerTypes", c.LayerTypes, []string{SlidingAttention, FullAttention, SlidingAttention, FullAttention})
			}},
		{name: "layer_types over the pattern", patch: patch{"num_hidden_layers": 2, "layer_types": []string{FullAttention, SlidingAttention}},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "LayerTypes", c.LayerTypes, []string{FullAttention, SlidingAttention})
			}},
		{name: "final soft cap", patch: patch{"final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
			check: func(t *testing.T, c *Config) { wantEq(t, "FinalLogitSoftcap", c.FinalLogitSoftcap, 30.0) }},
		{name: "defaults", patch: patch{"query_pre_attn_scalar": nil, "head_dim": nil, "num_key_value_heads": nil, "hidden_activation": nil, "tie_word_embeddings": nil, "bos_token_id": nil, "eos_token_id": nil},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "QueryPreAttnScalar", c.QueryPreAttnScalar, 256.0)
				wantEq(t, "HeadDim", c.HeadDim, 256)
				wantEq(t, "NumKeyValueHeads", c.NumKeyValueHeads, 4)
				wantEq(t, "HiddenAct", c.HiddenAct, ActGELUTanh)
				wantEq(t, "TieWordEmbeddings", c.TieWordEmbeddings, true)
				wantEq(t, "BOS, EOS", [2][]int32{c.BOSTokenIDs, c.EOSTokenIDs}, [2][]int32{{2}, {1}})
			}},

		{name: "flat rope_parameters", patch: patch{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}}, wantErr: []string{"rope_parameters.rope_theta", "layer type"}, is: ErrInvalid},
		{name: "rope_parameters theta against rope_theta", patch: patch{"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "default", "rope_theta": 5e5}}}, wantErr: []string{"rope_parameters.full_attention.rope_theta", "rope_theta"}, is: ErrInvalid},
		{name: "rope_parameters against rope_scaling", patch: patch{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 8.0},
			"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "linear", "factor": 4.0}}}, wantErr: []string{"rope_parameters.full_attention", "rope_scaling"}, is: ErrInvalid},
		{name: "unsupported sliding rope", patch: patch{"rope_parameters": map[string]any{"sliding_attention": map[string]any{"rope_type": "yarn", "factor": 4.0}}}, wantErr: []string{"rope_parameters.sliding_attention.rope_type", "yarn"}, is: ErrUnsupported},
		{name: "bidirectional", patch: patch{"use_bidirectional_attention": true}, wantErr: []string{"use_bidirectional_attention"}, is: ErrUnsupported},
		{name: "hidden_act against hidden_activation", patch: patch{"hidden_act": "silu"}, wantErr: []string{"hidden_act", "hidden_activation"}, is: ErrInvalid},
		{name: "zero soft cap", patch: patch{"final_logit_softcapping": 0.0}, wantErr: []string{"final_logit_softcapping"}, is: ErrInvalid},
		{name: "zero pattern", patch: patch{"sliding_window_pattern": 0}, wantErr: []string{"sliding_window_pattern"}, is: ErrInvalid},
		{name: "negative scalar", patch: patch{"query_pre_attn_scalar": -1.0}, wantErr: []string{"query_pre_attn_scalar"}, is: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "config", "gemma-3-1b-it.json"))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.patch {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			if data, err = json.Marshal(m); err != nil {
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

// TestParseConfigMultimodal: a Gemma3ForConditionalGeneration config's text model comes from text_config,
// with the whole model's dtype, tying and special tokens; what the two levels disagree on is refused.
func TestParseConfigMultimodal(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"architectures": []string{"Gemma3ForConditionalGeneration"}, "model_type": "gemma3",
			"torch_dtype": "bfloat16", "eos_token_id": []int{1, 106},
			"text_config": map[string]any{"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
				"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 300,
				"eos_token_id": 1},
			"vision_config": map[string]any{"model_type": "siglip_vision_model"},
		}
	}
	c, err := ParseConfig(mustJSON(t, base()))
	if err != nil {
		t.Fatal(err)
	}
	wantEq(t, "EOSTokenIDs", c.EOSTokenIDs, []int32{1, 106})
	wantEq(t, "DType", c.DType, DTypeBF16)
	wantEq(t, "Tensor", c.Tensor("norm.weight"), "model.language_model.norm.weight")
	wantEq(t, "FinalLogitSoftcap (the image-text head does not cap)", c.FinalLogitSoftcap, 0.0)

	tests := []struct {
		name   string
		change func(m map[string]any)
		want   []string
		is     error
	}{
		{"no text_config", func(m map[string]any) { delete(m, "text_config") }, []string{"text_config", "missing"}, ErrInvalid},
		{"text_config not an object", func(m map[string]any) { m["text_config"] = 3 }, []string{"text_config"}, ErrInvalid},
		{"other text model", func(m map[string]any) { m["text_config"].(map[string]any)["model_type"] = "llama" }, []string{"text_config.model_type", "llama"}, ErrUnsupported},
		{"dtype disagreement", func(m map[string]any) { m["text_config"].(map[string]any)["torch_dtype"] = "float32" }, []string{"text_config.torch_dtype"}, ErrInvalid},
		{"tie disagreement", func(m map[string]any) {
			m["tie_word_embeddings"] = true
			m["text_config"].(map[string]any)["tie_word_embeddings"] = false
		}, []string{"text_config.tie_word_embeddings"}, ErrInvalid},
		{"quantized at the top", func(m map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "awq"} }, []string{"quantization_config"}, ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			tc.change(m)
			_, err := ParseConfig(mustJSON(t, m))
			checkError(t, err, tc.is, tc.want...)
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
