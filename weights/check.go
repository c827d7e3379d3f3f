package weights

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
)

// harmlessTensor matches buffers that old checkpoints carry but that the model recomputes: the rotary
// inverse frequencies saved by transformers before 4.31.
var harmlessTensor = regexp.MustCompile(`^model\.(layers\.[0-9]+\.self_attn\.)?rotary_emb\.inv_freq$`)

// LlamaTensorShapes returns the name and shape of every tensor a LLaMA-family checkpoint with config c
// must hold (lm_head.weight only when the embeddings are not tied):
//
//	model.embed_tokens.weight                  [V, H]
//	model.layers.N.input_layernorm.weight      [H]
//	model.layers.N.self_attn.q_proj.weight     [Hq·D, H]
//	model.layers.N.self_attn.k_proj.weight     [Hkv·D, H]
//	model.layers.N.self_attn.v_proj.weight     [Hkv·D, H]
//	model.layers.N.self_attn.o_proj.weight     [H, Hq·D]
//	model.layers.N.post_attention_layernorm.weight [H]
//	model.layers.N.mlp.gate_proj.weight        [I, H]
//	model.layers.N.mlp.up_proj.weight          [I, H]
//	model.layers.N.mlp.down_proj.weight        [H, I]
//	model.norm.weight                          [H]
//	lm_head.weight                             [V, H]
func LlamaTensorShapes(c *Config) map[string][]int {
	v, h, i := c.VocabSize, c.HiddenSize, c.IntermediateSize
	q, kv := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	shapes := map[string][]int{
		"model.embed_tokens.weight": {v, h},
		"model.norm.weight":         {h},
	}
	if !c.TieWordEmbeddings {
		shapes["lm_head.weight"] = []int{v, h}
	}
	for l := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		shapes[p+"input_layernorm.weight"] = []int{h}
		shapes[p+"self_attn.q_proj.weight"] = []int{q, h}
		shapes[p+"self_attn.k_proj.weight"] = []int{kv, h}
		shapes[p+"self_attn.v_proj.weight"] = []int{kv, h}
		shapes[p+"self_attn.o_proj.weight"] = []int{h, q}
		shapes[p+"post_attention_layernorm.weight"] = []int{h}
		shapes[p+"mlp.gate_proj.weight"] = []int{i, h}
		shapes[p+"mlp.up_proj.weight"] = []int{i, h}
		shapes[p+"mlp.down_proj.weight"] = []int{h, i}
	}
	return shapes
}

// CheckLlamaTensors verifies that s holds exactly the tensors of a LLaMA-family model with config c
// (see LlamaTensorShapes), each with its shape and a supported dtype. A tied checkpoint may still ship
// lm_head.weight (with shape [V, H]); the model uses the embeddings then. Known harmless buffers
// (rotary_emb.inv_freq) are ignored. Every problem is reported, each naming its tensor and wrapping
// ErrTensorNotFound, ErrShapeMismatch, ErrUnexpectedTensor or ErrUnsupported.
func CheckLlamaTensors(c *Config, s *TensorSet) error {
	want := LlamaTensorShapes(c)
	var problems []error
	for name, shape := range want {
		ref, ok := s.tensors[name]
		if !ok {
			problems = append(problems, fmt.Errorf("tensor %q: %w", name, ErrTensorNotFound))
			continue
		}
		if !slices.Equal(ref.entry.Shape, shape) {
			problems = append(problems, fmt.Errorf("tensor %q in %s: shape %v, want %v: %w", name, ref.fileName(), ref.entry.Shape, shape, ErrShapeMismatch))
		}
		if !ref.entry.DType.Valid() {
			problems = append(problems, fmt.Errorf("tensor %q in %s: dtype %s: %w", name, ref.fileName(), ref.entry.DTypeName, ErrUnsupported))
		}
	}
	for _, name := range s.names {
		if _, ok := want[name]; ok || harmlessTensor.MatchString(name) {
			continue
		}
		ref := s.tensors[name]
		if name == "lm_head.weight" && c.TieWordEmbeddings {
			if want := []int{c.VocabSize, c.HiddenSize}; !slices.Equal(ref.entry.Shape, want) {
				problems = append(problems, fmt.Errorf("tensor %q in %s: shape %v, want %v: %w", name, ref.fileName(), ref.entry.Shape, want, ErrShapeMismatch))
			}
			continue
		}
		problems = append(problems, fmt.Errorf("tensor %q in %s: %w", name, ref.fileName(), ErrUnexpectedTensor))
	}
	if len(problems) == 0 {
		return nil
	}
	sortErrors(problems)
	return fmt.Errorf("weights: %s checkpoint: %w", c.Architecture, errors.Join(problems...))
}
