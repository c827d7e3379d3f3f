package weights

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyDims are the dimensions of the small model the folder tests build.
type tinyDims struct {
	V, H, I, L, Hq, Hkv, D int
	Tied                   bool
}

func (d tinyDims) config() map[string]any {
	m := map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"vocab_size":              d.V,
		"hidden_size":             d.H,
		"intermediate_size":       d.I,
		"num_hidden_layers":       d.L,
		"num_attention_heads":     d.Hq,
		"num_key_value_heads":     d.Hkv,
		"max_position_embeddings": 64,
		"rms_norm_eps":            1e-5,
		"rope_theta":              10000.0,
		"tie_word_embeddings":     d.Tied,
		"torch_dtype":             "bfloat16",
		"bos_token_id":            1,
		"eos_token_id":            2,
	}
	if d.D != 0 {
		m["head_dim"] = d.D
	}
	return m
}

// tensors lists the checkpoint of a LLaMA model with dims d, written out by hand (not derived from
// TensorShapes, which it checks).
func (d tinyDims) tensors(rng *rand.Rand, dt DType) []*Tensor {
	headDim := d.D
	if headDim == 0 {
		headDim = d.H / d.Hq
	}
	var out []*Tensor
	add := func(name string, shape ...int) {
		tensor, _ := randomTensor(rng, name, dt, shape...)
		out = append(out, tensor)
	}
	add("model.embed_tokens.weight", d.V, d.H)
	for l := range d.L {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", d.H)
		add(p+"self_attn.q_proj.weight", d.Hq*headDim, d.H)
		add(p+"self_attn.k_proj.weight", d.Hkv*headDim, d.H)
		add(p+"self_attn.v_proj.weight", d.Hkv*headDim, d.H)
		add(p+"self_attn.o_proj.weight", d.H, d.Hq*headDim)
		add(p+"post_attention_layernorm.weight", d.H)
		add(p+"mlp.gate_proj.weight", d.I, d.H)
		add(p+"mlp.up_proj.weight", d.I, d.H)
		add(p+"mlp.down_proj.weight", d.H, d.I)
	}
	add("model.norm.weight", d.H)
	if !d.Tied {
		add("lm_head.weight", d.V, d.H)
	}
	return out
}

// writeModelFolder writes config.json and model.safetensors for cfg and tensors into a new folder.
func writeModelFolder(t *testing.T, cfg map[string]any, tensors []*Tensor) string {
	t.Helper()
	dir := t.TempDir()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ConfigFile), data)
	if err := WriteSafetensors(filepath.Join(dir, SafetensorsFile), tensors); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckTensors(t *testing.T) {
	base := tinyDims{V: 11, H: 8, I: 12, L: 2, Hq: 4, Hkv: 2}
	replace := func(ts []*Tensor, name string, shape ...int) []*Tensor {
		for i, x := range ts {
			if x.Name == name {
				tensor, _ := randomTensor(rand.New(rand.NewPCG(9, 9)), name, x.DType, shape...)
				ts[i] = tensor
			}
		}
		return ts
	}
	drop := func(ts []*Tensor, name string) []*Tensor {
		out := ts[:0]
		for _, x := range ts {
			if x.Name != name {
				out = append(out, x)
			}
		}
		return out
	}
	extra := func(ts []*Tensor, name string, shape ...int) []*Tensor {
		tensor, _ := randomTensor(rand.New(rand.NewPCG(8, 8)), name, DTypeF32, shape...)
		return append(ts, tensor)
	}
	tests := []struct {
		name   string
		dims   tinyDims
		edit   func([]*Tensor) []*Tensor
		is     []error
		want   []string
		reject []string // tensor names that must not be reported
	}{
		{name: "complete", dims: base},
		{name: "tied without lm_head", dims: tinyDims{V: 11, H: 8, I: 12, L: 2, Hq: 4, Hkv: 2, Tied: true}},
		{name: "tied still shipping lm_head", dims: tinyDims{V: 11, H: 8, I: 12, L: 1, Hq: 4, Hkv: 2, Tied: true},
			edit: func(ts []*Tensor) []*Tensor { return extra(ts, "lm_head.weight", 11, 8) }},
		{name: "head_dim wider than hidden/heads", dims: tinyDims{V: 5, H: 8, I: 4, L: 1, Hq: 2, Hkv: 1, D: 8}},
		{name: "MQA", dims: tinyDims{V: 5, H: 8, I: 4, L: 1, Hq: 4, Hkv: 1}},
		{name: "rotary buffers ignored", dims: base, edit: func(ts []*Tensor) []*Tensor {
			return extra(extra(ts, "model.layers.1.self_attn.rotary_emb.inv_freq", 1), "model.rotary_emb.inv_freq", 1)
		}},

		{name: "tied lm_head of the wrong shape", dims: tinyDims{V: 11, H: 8, I: 12, L: 1, Hq: 4, Hkv: 2, Tied: true},
			edit: func(ts []*Tensor) []*Tensor { return extra(ts, "lm_head.weight", 10, 8) },
			is:   []error{ErrShapeMismatch}, want: []string{`"lm_head.weight"`, "[10 8]", "[11 8]"}},
		{name: "untied without lm_head", dims: base,
			edit: func(ts []*Tensor) []*Tensor { return drop(ts, "lm_head.weight") },
			is:   []error{ErrTensorNotFound}, want: []string{`"lm_head.weight"`}},
		{name: "missing layer tensors", dims: base, edit: func(ts []*Tensor) []*Tensor {
			return drop(drop(ts, "model.layers.1.mlp.up_proj.weight"), "model.norm.weight")
		}, is: []error{ErrTensorNotFound}, want: []string{`"model.layers.1.mlp.up_proj.weight"`, `"model.norm.weight"`}},
		{name: "k_proj sized for MHA", dims: base,
			edit: func(ts []*Tensor) []*Tensor { return replace(ts, "model.layers.0.self_attn.k_proj.weight", 8, 8) },
			is:   []error{ErrShapeMismatch}, want: []string{`"model.layers.0.self_attn.k_proj.weight" in ` + SafetensorsFile, "[8 8]", "[4 8]"}},
		{name: "transposed down_proj", dims: base,
			edit: func(ts []*Tensor) []*Tensor { return replace(ts, "model.layers.1.mlp.down_proj.weight", 12, 8) },
			is:   []error{ErrShapeMismatch}, want: []string{`"model.layers.1.mlp.down_proj.weight"`}},
		{name: "biases and extra layers", dims: base, edit: func(ts []*Tensor) []*Tensor {
			return extra(extra(ts, "model.layers.0.self_attn.q_proj.bias", 8), "model.layers.2.input_layernorm.weight", 8)
		}, is: []error{ErrUnexpectedTensor}, want: []string{`"model.layers.0.self_attn.q_proj.bias" in ` + SafetensorsFile, `"model.layers.2.input_layernorm.weight"`}},
		{name: "every problem at once", dims: base, edit: func(ts []*Tensor) []*Tensor {
			return extra(replace(drop(ts, "model.embed_tokens.weight"), "model.norm.weight", 9), "junk", 1)
		}, is: []error{ErrTensorNotFound, ErrShapeMismatch, ErrUnexpectedTensor},
			want: []string{`"model.embed_tokens.weight"`, `"model.norm.weight"`, `"junk"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 5))
			ts := tc.dims.tensors(rng, DTypeBF16)
			if tc.edit != nil {
				ts = tc.edit(ts)
			}
			dir := writeModelFolder(t, tc.dims.config(), ts)
			cfg, err := LoadConfig(filepath.Join(dir, ConfigFile))
			if err != nil {
				t.Fatal(err)
			}
			s, err := OpenSafetensors(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = CheckTensors(cfg, s)
			if tc.is == nil {
				if err != nil {
					t.Fatalf("CheckTensors: %v", err)
				}
				return
			}
			for _, is := range tc.is {
				checkError(t, err, is, tc.want...)
			}
		})
	}
}

func TestCheckTensorsUnsupportedDType(t *testing.T) {
	dims := tinyDims{V: 3, H: 2, I: 2, L: 1, Hq: 1, Hkv: 1}
	rng := rand.New(rand.NewPCG(6, 6))
	ts := dims.tensors(rng, DTypeF32)
	dir := writeModelFolder(t, dims.config(), ts)
	// Rewrite the file with model.norm.weight stored as I32 (same byte size as F32).
	path := filepath.Join(dir, SafetensorsFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := `"model.norm.weight":{"dtype":"F32"`
	if !strings.Contains(string(raw), old) {
		t.Fatal("writer layout changed")
	}
	writeFile(t, path, []byte(strings.Replace(string(raw), old, `"model.norm.weight":{"dtype":"I32"`, 1)))
	_, err = Open(dir)
	checkError(t, err, ErrUnsupported, `"model.norm.weight"`, "I32")
}

// TestTensorShapesCount counts the tensors and parameters of published checkpoints' configs against the
// parameter counts their model cards give (the text model's, for Gemma 3 4B).
func TestTensorShapesCount(t *testing.T) {
	for _, tc := range []struct {
		file            string
		tensors, params int
	}{
		{"llama-3-8b.json", 32*9 + 3, 8030261248},
		{"llama-3.1-8b-instruct.json", 32*9 + 3, 8030261248},
		{"mistral-7b-v0.1.json", 32*9 + 3, 7241732096},
		{"ministral-8b-layer-types.json", 36*9 + 3, 8019808256},
		{"qwen2.5-7b-instruct.json", 28*12 + 3, 7615616512}, // + q, k, v biases
		{"qwen3-8b.json", 36*11 + 3, 8190735360},            // + q, k norms
		{"gemma-3-1b-it.json", 26*13 + 2, 999885952},        // + q, k norms, two norms; tied
		{"gemma-3-4b-it.json", 34*13 + 2, 3880263168},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg, err := LoadConfig(filepath.Join("testdata", "config", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			shapes := TensorShapes(cfg)
			if len(shapes) != tc.tensors {
				t.Errorf("%d tensors, want %d", len(shapes), tc.tensors)
			}
			params := 0
			for _, s := range shapes {
				n := 1
				for _, d := range s {
					n *= d
				}
				params += n
			}
			if params != tc.params {
				t.Errorf("%d parameters, want %d", params, tc.params)
			}
		})
	}
}

// TestOpenFamilies writes tiny checkpoints of each family as transformers names their tensors and opens
// them: Qwen2's biases, Qwen3's q/k norms, Gemma 3's four norms, and a Gemma 3 image-text folder in both
// weight layouts with its vision tower, which is ignored; a missing family tensor is named.
func TestOpenFamilies(t *testing.T) {
	text := map[string]any{"vocab_size": 11, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2,
		"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "max_position_embeddings": 64}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	layer := func(prefix string, suffixes ...string) []string {
		var names []string
		for l := range 2 {
			for _, s := range suffixes {
				names = append(names, fmt.Sprintf("%slayers.%d.%s", prefix, l, s))
			}
		}
		return names
	}
	llama := []string{"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
		"self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
		"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}
	gemma := append(slices.Clone(llama), "self_attn.q_norm.weight", "self_attn.k_norm.weight",
		"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight")
	vision := []string{"vision_tower.vision_model.embeddings.patch_embedding.weight", "multi_modal_projector.mm_input_projection_weight"}
	tests := []struct {
		name    string
		config  map[string]any
		tensors []string // names; shapes from TensorShapes of the parsed config, [3] for the others
		wantErr []string
	}{
		{"qwen2", with(text, "architectures", []string{"Qwen2ForCausalLM"}),
			append(layer("model.", append(slices.Clone(llama), "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")...),
				"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"), nil},
		{"qwen2 without a bias", with(text, "architectures", []string{"Qwen2ForCausalLM"}),
			append(layer("model.", llama...), "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"),
			[]string{`"model.layers.0.self_attn.q_proj.bias"`}},
		{"qwen3", with(text, "architectures", []string{"Qwen3ForCausalLM"}),
			append(layer("model.", append(slices.Clone(llama), "self_attn.q_norm.weight", "self_attn.k_norm.weight")...),
				"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"), nil},
		{"gemma3", with(text, "architectures", []string{"Gemma3ForCausalLM"}),
			append(layer("model.", gemma...), "model.embed_tokens.weight", "model.norm.weight"), nil},
		{"gemma3 image-text, transformers 5 names", map[string]any{"architectures": []string{"Gemma3ForConditionalGeneration"}, "text_config": text},
			append(append(layer("model.language_model.", gemma...), "model.language_model.embed_tokens.weight", "model.language_model.norm.weight"),
				"model.vision_tower.vision_model.embeddings.patch_embedding.weight", "model.multi_modal_projector.mm_input_projection_weight"), nil},
		{"gemma3 image-text, transformers 4 names", map[string]any{"architectures": []string{"Gemma3ForConditionalGeneration"}, "text_config": text},
			append(append(layer("language_model.model.", gemma...), "language_model.model.embed_tokens.weight", "language_model.model.norm.weight"), vision...), nil},
		{"gemma3 image-text, untied", map[string]any{"architectures": []string{"Gemma3ForConditionalGeneration"}, "text_config": text, "tie_word_embeddings": false},
			append(append(layer("language_model.model.", gemma...), "language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
				"language_model.lm_head.weight"), vision...), nil},
		{"gemma3 image-text without its text model", map[string]any{"architectures": []string{"Gemma3ForConditionalGeneration"}, "text_config": text},
			vision, []string{`"model.language_model.embed_tokens.weight"`}},
		{"gemma3 image-text with a stray tensor", map[string]any{"architectures": []string{"Gemma3ForConditionalGeneration"}, "text_config": text},
			append(append(layer("language_model.model.", gemma...), "language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
				"language_model.model.junk"), vision...), []string{`"language_model.model.junk"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig(mustJSON(t, tc.config))
			if err != nil {
				t.Fatal(err)
			}
			// The shapes of the layout the tensors use: the config parsed, pointed at their prefix.
			probe := *cfg
			if strings.HasPrefix(tc.tensors[0], "language_model.") {
				probe.tensorPrefix, probe.lmHead = textPrefixes[1].prefix, textPrefixes[1].lmHead
			}
			shapes := TensorShapes(&probe)
			rng := rand.New(rand.NewPCG(1, 2))
			var ts []*Tensor
			for _, name := range tc.tensors {
				shape, ok := shapes[name]
				if !ok {
					shape = []int{3}
				}
				tensor, _ := randomTensor(rng, name, DTypeBF16, shape...)
				ts = append(ts, tensor)
			}
			dir := writeModelFolder(t, tc.config, ts)
			f, err := Open(dir)
			if tc.wantErr != nil {
				checkError(t, err, nil, tc.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Tensors.Get(f.Config.Tensor("embed_tokens.weight")); err != nil {
				t.Errorf("embeddings: %v", err)
			}
			if f.Config.DType != DTypeBF16 {
				t.Errorf("dtype %v, want the embeddings' bfloat16", f.Config.DType)
			}
		})
	}
}
