package weights

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// harmlessTensor matches buffers that old checkpoints carry but that the model recomputes: the rotary
// inverse frequencies saved by transformers before 4.31.
var harmlessTensor = regexp.MustCompile(`^(model|model\.language_model|language_model\.model)\.(layers\.[0-9]+\.self_attn\.)?rotary_emb\.inv_freq$`)

// TensorShapes returns the name and shape of every tensor a checkpoint with config c must hold. For a
// LLaMA (names under c.Tensor and c.LayerTensor, lm_head.weight only when the embeddings are not tied):
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
//
// and, as c says: self_attn.{q,k,v}_proj.bias [Hq·D], [Hkv·D], [Hkv·D] (QKVBias), self_attn.o_proj.bias
// [H] (OBias), self_attn.q_norm.weight and self_attn.k_norm.weight [D] (QKNorm),
// pre_feedforward_layernorm.weight and post_feedforward_layernorm.weight [H] (SandwichNorm).
func TensorShapes(c *Config) map[string][]int {
	v, h, i, d := c.VocabSize, c.HiddenSize, c.IntermediateSize, c.HeadDim
	q, kv := c.NumAttentionHeads*d, c.NumKeyValueHeads*d
	shapes := map[string][]int{
		c.Tensor("embed_tokens.weight"): {v, h},
		c.Tensor("norm.weight"):         {h},
	}
	if !c.TieWordEmbeddings {
		shapes[c.LMHeadTensor()] = []int{v, h}
	}
	for l := range c.NumHiddenLayers {
		for _, t := range []struct {
			suffix string
			shape  []int
			want   bool
		}{
			{"input_layernorm.weight", []int{h}, true},
			{"self_attn.q_proj.weight", []int{q, h}, true},
			{"self_attn.k_proj.weight", []int{kv, h}, true},
			{"self_attn.v_proj.weight", []int{kv, h}, true},
			{"self_attn.o_proj.weight", []int{h, q}, true},
			{"post_attention_layernorm.weight", []int{h}, true},
			{"mlp.gate_proj.weight", []int{i, h}, true},
			{"mlp.up_proj.weight", []int{i, h}, true},
			{"mlp.down_proj.weight", []int{h, i}, true},
			{"self_attn.q_proj.bias", []int{q}, c.QKVBias},
			{"self_attn.k_proj.bias", []int{kv}, c.QKVBias},
			{"self_attn.v_proj.bias", []int{kv}, c.QKVBias},
			{"self_attn.o_proj.bias", []int{h}, c.OBias},
			{"self_attn.q_norm.weight", []int{d}, c.QKNorm},
			{"self_attn.k_norm.weight", []int{d}, c.QKNorm},
			{"pre_feedforward_layernorm.weight", []int{h}, c.SandwichNorm},
			{"post_feedforward_layernorm.weight", []int{h}, c.SandwichNorm},
		} {
			if t.want {
				shapes[c.LayerTensor(l, t.suffix)] = t.shape
			}
		}
	}
	return shapes
}

// CheckTensors verifies that s holds exactly the tensors of a model with config c (see TensorShapes),
// each with its shape and a supported dtype, and for an FP8 checkpoint (c.Quantization) that the Linear
// layers it quantizes hold F8_E4M3 weights with their scales of the right shapes, that nothing else is
// F8_E4M3, and that the KV cache scales are there when kv_cache_scheme says so (at most one naming of
// them per layer, see KVScaleNames). A tied checkpoint may still ship its LM head (with shape
// [V, H]); the model uses the embeddings then. Known harmless buffers (rotary_emb.inv_freq) are
// ignored, and so are the vision tower's tensors of a multimodal checkpoint. Every problem is reported,
// each naming its tensor and wrapping ErrTensorNotFound, ErrShapeMismatch, ErrUnexpectedTensor or
// ErrUnsupported.
func CheckTensors(c *Config, s *TensorSet) error {
	want := TensorShapes(c)
	q, problems := c.quantizedTensors(s)
	for name, shape := range want {
		ref, ok := s.tensors[name]
		if !ok {
			problems = append(problems, fmt.Errorf("tensor %q: %w", name, ErrTensorNotFound))
			continue
		}
		if !slices.Equal(ref.entry.Shape, shape) {
			problems = append(problems, fmt.Errorf("tensor %q in %s: shape %v, want %v: %w", name, ref.fileName(), ref.entry.Shape, shape, ErrShapeMismatch))
		}
		switch d := ref.entry.DType; {
		case !d.Valid():
			problems = append(problems, fmt.Errorf("tensor %q in %s: dtype %s: %w", name, ref.fileName(), ref.entry.DTypeName, ErrUnsupported))
		case q.fp8[name] && d != DTypeF8E4M3:
			problems = append(problems, fmt.Errorf("tensor %q in %s: dtype %s, but quantization_config quantizes it to F8_E4M3: %w", name, ref.fileName(), d, ErrInvalid))
		case !q.fp8[name] && d == DTypeF8E4M3:
			problems = append(problems, fmt.Errorf("tensor %q in %s: dtype F8_E4M3, but %s: %w", name, ref.fileName(), q.notQuantized(), ErrInvalid))
		}
	}
	for name, shapes := range q.scales {
		ref, ok := s.tensors[name]
		if !ok {
			problems = append(problems, fmt.Errorf("tensor %q (quantization_config): %w", name, ErrTensorNotFound))
			continue
		}
		if !slices.ContainsFunc(shapes, func(sh []int) bool { return slices.Equal(sh, ref.entry.Shape) }) {
			problems = append(problems, fmt.Errorf("tensor %q in %s: shape %v, want %s: %w", name, ref.fileName(), ref.entry.Shape, shapesText(shapes), ErrShapeMismatch))
		}
		if d := ref.entry.DType; !d.Valid() || d == DTypeF8E4M3 {
			problems = append(problems, fmt.Errorf("tensor %q in %s: dtype %s, want a scale in F32, BF16 or F16: %w", name, ref.fileName(), ref.entry.DTypeName, ErrUnsupported))
		}
	}
	for _, name := range s.names {
		if _, ok := want[name]; ok || q.scales[name] != nil || harmlessTensor.MatchString(name) || c.otherTower(name) {
			continue
		}
		ref := s.tensors[name]
		if name == c.LMHeadTensor() && c.TieWordEmbeddings {
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

// otherTower reports whether name belongs to a tower of a multimodal checkpoint that gollm does not run.
func (c *Config) otherTower(name string) bool {
	if !c.textConfig {
		return false
	}
	for _, p := range otherTowers {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// resolveTextPrefix points c at the text model's tensors in s, for a multimodal checkpoint: the first
// of textPrefixes whose embeddings s holds (CheckTensors then reports what is missing under the
// newest layout when none does).
func (c *Config) resolveTextPrefix(s *TensorSet) {
	if !c.textConfig {
		return
	}
	for _, p := range textPrefixes {
		if _, ok := s.tensors[p.prefix+"embed_tokens.weight"]; ok {
			c.tensorPrefix, c.lmHead = p.prefix, p.lmHead
			return
		}
	}
}
