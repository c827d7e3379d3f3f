package weights

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// addJSONSeeds adds every .json file of a testdata folder to a fuzz target's corpus.
func addJSONSeeds(f *testing.F, dir string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seeds in testdata/%s: %v", dir, err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzParseConfig feeds arbitrary config.json contents to ParseConfig (seeds: testdata/config, the
// published shapes of real checkpoints of every family, in both config forms). It must never panic,
// and a config it accepts must satisfy what the model and the engine rely on: positive shapes, heads
// that divide, an even head size, a positive norm epsilon and rope bases, known rope scaling with sane
// factors, one known attention kind per layer with a window shorter than the context, a known
// activation, special token ids inside the vocabulary, and tensor shapes that can be computed.
func FuzzParseConfig(f *testing.F) {
	addJSONSeeds(f, "config")
	f.Add([]byte(`{"model_type":"gemma3","text_config":{"vocab_size":8,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":3,"num_attention_heads":2,"head_dim":2,"num_key_value_heads":1,"sliding_window":2,"max_position_embeddings":8,"sliding_window_pattern":2,"rope_parameters":{"sliding_attention":{"rope_type":"default","rope_theta":100}}},"tie_word_embeddings":true}`))
	f.Add([]byte(`{"model_type":"qwen2","vocab_size":8,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":3,"num_attention_heads":2,"num_key_value_heads":1,"use_sliding_window":true,"sliding_window":2,"max_window_layers":1,"max_position_embeddings":16}`))
	f.Add([]byte(`{"model_type":"llama","vocab_size":8,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"eos_token_id":[1,2],"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if c != nil {
				t.Fatal("a config returned with an error")
			}
			return
		}
		for name, v := range map[string]int{"vocab_size": c.VocabSize, "hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize,
			"num_hidden_layers": c.NumHiddenLayers, "num_attention_heads": c.NumAttentionHeads, "num_key_value_heads": c.NumKeyValueHeads,
			"head_dim": c.HeadDim, "max_position_embeddings": c.MaxPositionEmbeddings} {
			if v <= 0 {
				t.Fatalf("%s %d accepted", name, v)
			}
		}
		if c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.HeadDim%2 != 0 {
			t.Fatalf("heads %d/%d, head_dim %d accepted", c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim)
		}
		if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
			t.Fatalf("rms_norm_eps %v accepted", c.RMSNormEps)
		}
		if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
			t.Fatalf("rope_theta %v accepted", c.RopeTheta)
		}
		checkRope := func(rs RopeScaling) {
			switch rs.Type {
			case "default":
			case "linear":
				if !(rs.Factor > 0) || math.IsInf(rs.Factor, 0) {
					t.Fatalf("linear rope factor %v accepted", rs.Factor)
				}
			case "llama3":
				if !(rs.Factor > 0) || !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > 0) || rs.OriginalMaxPositionEmbeddings <= 0 {
					t.Fatalf("llama3 rope scaling %+v accepted", rs)
				}
			default:
				t.Fatalf("rope type %q accepted", rs.Type)
			}
		}
		checkRope(c.RopeScaling)
		if c.LocalRopeTheta != 0 {
			if !(c.LocalRopeTheta > 0) || math.IsInf(c.LocalRopeTheta, 0) {
				t.Fatalf("local rope_theta %v accepted", c.LocalRopeTheta)
			}
			checkRope(c.LocalRopeScaling)
		}
		// Layers: nil, or one known kind per layer with at least one sliding layer; a window shorter than
		// the context, or none.
		if c.LayerTypes != nil {
			if len(c.LayerTypes) != c.NumHiddenLayers || c.SlidingWindow < 0 || c.SlidingWindow >= c.MaxPositionEmbeddings {
				t.Fatalf("layer types %v for %d layers with window %d (context %d) accepted", c.LayerTypes, c.NumHiddenLayers, c.SlidingWindow, c.MaxPositionEmbeddings)
			}
			sliding := 0
			for _, kind := range c.LayerTypes {
				switch kind {
				case SlidingAttention:
					sliding++
				case FullAttention:
				default:
					t.Fatalf("layer type %q accepted", kind)
				}
			}
			if sliding == 0 {
				t.Fatal("layer types without a sliding layer kept")
			}
		} else if c.SlidingWindow != 0 {
			t.Fatalf("window %d without layer types", c.SlidingWindow)
		}
		if a := c.Activation(); a != ActSiLU && a != ActGELUTanh {
			t.Fatalf("activation %q accepted", a)
		}
		if c.QueryPreAttnScalar < 0 || c.FinalLogitSoftcap < 0 || math.IsNaN(c.QueryPreAttnScalar) || math.IsNaN(c.FinalLogitSoftcap) {
			t.Fatalf("query_pre_attn_scalar %v, final soft cap %v accepted", c.QueryPreAttnScalar, c.FinalLogitSoftcap)
		}
		for _, ids := range [][]int32{c.BOSTokenIDs, c.EOSTokenIDs} {
			for _, id := range ids {
				if id < 0 || int(id) >= c.VocabSize {
					t.Fatalf("special token id %d outside the vocabulary of %d", id, c.VocabSize)
				}
			}
		}
		if !c.DType.Valid() {
			t.Fatalf("dtype %v accepted", c.DType)
		}
		for name, shape := range TensorShapes(c) {
			for _, d := range shape {
				if d <= 0 {
					t.Fatalf("tensor %s has shape %v", name, shape)
				}
			}
		}
	})
}

// FuzzParseGenerationConfig feeds arbitrary generation_config.json contents to
// ParseGenerationConfig (seeds: testdata/generation): no panic, and accepted values in range.
func FuzzParseGenerationConfig(f *testing.F) {
	addJSONSeeds(f, "generation")
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGenerationConfig(data)
		if err != nil {
			return
		}
		inRange := func(name string, p *float64, lo, hi float64, openLo bool) {
			if p == nil {
				return
			}
			if math.IsNaN(*p) || *p < lo || *p > hi || (openLo && *p == lo) {
				t.Fatalf("%s %v accepted", name, *p)
			}
		}
		inRange("temperature", g.Temperature, 0, math.MaxFloat64, false)
		inRange("top_p", g.TopP, 0, 1, false)
		inRange("min_p", g.MinP, 0, 1, false)
		inRange("repetition_penalty", g.RepetitionPenalty, 0, math.MaxFloat64, true)
		if g.TopK != nil && *g.TopK < 0 {
			t.Fatalf("top_k %d accepted", *g.TopK)
		}
		for _, ids := range [][]int32{g.BOSTokenIDs, g.EOSTokenIDs} {
			for _, id := range ids {
				if id < 0 {
					t.Fatalf("token id %d accepted", id)
				}
			}
		}
	})
}

// FuzzParseTokenizerConfig feeds arbitrary tokenizer_config.json contents to ParseTokenizerConfig
// (seeds: testdata/tokenizer_config): no panic, and the chosen template is the "default" entry of a
// template list.
func FuzzParseTokenizerConfig(f *testing.F) {
	addJSONSeeds(f, "tokenizer_config")
	f.Fuzz(func(t *testing.T, data []byte) {
		tc, err := ParseTokenizerConfig(data)
		if err != nil {
			return
		}
		if tc.ChatTemplates != nil && tc.ChatTemplate != tc.ChatTemplates["default"] {
			t.Fatalf("template list: chose %q, the default entry is %q", tc.ChatTemplate, tc.ChatTemplates["default"])
		}
		if tc.ModelMaxLength < 0 {
			t.Fatalf("model_max_length %d accepted", tc.ModelMaxLength)
		}
	})
}
