package weights

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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

func TestTensorShapesCount(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join("testdata", "config", "llama-3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	shapes := TensorShapes(cfg)
	if len(shapes) != 32*9+3 {
		t.Errorf("%d tensors, want %d", len(shapes), 32*9+3)
	}
	params := 0
	for _, s := range shapes {
		n := 1
		for _, d := range s {
			n *= d
		}
		params += n
	}
	// Meta-Llama-3-8B has 8,030,261,248 parameters.
	if params != 8030261248 {
		t.Errorf("%d parameters, want 8030261248", params)
	}
}
