package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gollm/gollm/weights"
)

// presets are the built-in model shapes of --config: the published config.json values of each model
// (the first checkpoint named), written out as the weights.Config that ParseConfig would return.
var presets = map[string]func() *weights.Config{
	// meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters.
	"llama3-8b": func() *weights.Config {
		return &weights.Config{
			Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
			MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling: weights.RopeScaling{Type: "default"},
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001}, DType: weights.DTypeBF16,
		}
	},
	// meta-llama/Llama-3.2-1B: 1,235,814,400 parameters (tied embeddings).
	"llama3.2-1b": func() *weights.Config {
		return &weights.Config{
			Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192,
			NumHiddenLayers: 16, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64,
			MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling: weights.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4,
				OriginalMaxPositionEmbeddings: 8192},
			TieWordEmbeddings: true,
			BOSTokenIDs:       []int32{128000}, EOSTokenIDs: []int32{128001}, DType: weights.DTypeBF16,
		}
	},
	// meta-llama/Llama-3.2-3B: 3,212,749,824 parameters (tied embeddings).
	"llama3.2-3b": func() *weights.Config {
		return &weights.Config{
			Architecture: "LlamaForCausalLM", VocabSize: 128256, HiddenSize: 3072, IntermediateSize: 8192,
			NumHiddenLayers: 28, NumAttentionHeads: 24, NumKeyValueHeads: 8, HeadDim: 128,
			MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling: weights.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4,
				OriginalMaxPositionEmbeddings: 8192},
			TieWordEmbeddings: true,
			BOSTokenIDs:       []int32{128000}, EOSTokenIDs: []int32{128001}, DType: weights.DTypeBF16,
		}
	},
	// meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters, saved in float16.
	"llama2-7b": func() *weights.Config {
		return &weights.Config{
			Architecture: "LlamaForCausalLM", VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 11008,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 32, HeadDim: 128,
			MaxPositionEmbeddings: 4096, RMSNormEps: 1e-5, RopeTheta: 10000,
			RopeScaling: weights.RopeScaling{Type: "default"},
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: weights.DTypeF16,
		}
	},
	// mistralai/Mistral-7B-v0.3: 7,248,023,552 parameters; no sliding window (v0.1's 4096-token
	// window is the one shape gollm cannot run).
	"mistral-7b": func() *weights.Config {
		return &weights.Config{
			Architecture: "MistralForCausalLM", VocabSize: 32768, HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
			MaxPositionEmbeddings: 32768, RMSNormEps: 1e-5, RopeTheta: 1000000,
			RopeScaling: weights.RopeScaling{Type: "default"},
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, DType: weights.DTypeBF16,
		}
	},
	// HuggingFaceTB/SmolLM2-135M: 134,515,008 parameters (tied embeddings).
	"smollm2-135m": func() *weights.Config {
		return &weights.Config{
			Architecture: "LlamaForCausalLM", VocabSize: 49152, HiddenSize: 576, IntermediateSize: 1536,
			NumHiddenLayers: 30, NumAttentionHeads: 9, NumKeyValueHeads: 3, HeadDim: 64,
			MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5, RopeTheta: 100000,
			RopeScaling:       weights.RopeScaling{Type: "default"},
			TieWordEmbeddings: true,
			BOSTokenIDs:       []int32{0}, EOSTokenIDs: []int32{0}, DType: weights.DTypeBF16,
		}
	},
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
	return p(), nil
}
