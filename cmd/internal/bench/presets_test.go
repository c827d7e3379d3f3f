package bench

import (
	"errors"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// TestPresetContexts pins the long-context shapes to their checkpoints' published context
// (max_position_embeddings) and rotary scaling: the llama3 scaling of Llama 3.1 and 3.2 is what lets their
// 8192-token training context reach 131072 (model's rotary tables read these fields; TestGoldenInvFreq
// checks that math against transformers).
func TestPresetContexts(t *testing.T) {
	llama31 := weights.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	llama32 := llama31
	llama32.Factor = 32
	for _, tc := range []struct {
		name    string
		context int
		theta   float64
		scaling weights.RopeScaling
	}{
		{"llama3-8b", 8192, 500000, weights.RopeScaling{Type: "default"}},
		{"llama3.1-8b", 131072, 500000, llama31},
		{"llama3-70b", 8192, 500000, weights.RopeScaling{Type: "default"}},
		{"llama3.2-1b", 131072, 500000, llama32},
		{"llama3.2-3b", 131072, 500000, llama32},
		{"qwen2.5-7b", 32768, 1e6, weights.RopeScaling{Type: "default"}},
		{"qwen3-8b", 40960, 1e6, weights.RopeScaling{Type: "default"}},
		{"gemma3-12b", 131072, 1e6, weights.RopeScaling{Type: "linear", Factor: 8}},
		{"gemma3-4b", 131072, 1e6, weights.RopeScaling{Type: "linear", Factor: 8}},
		{"mistral-7b", 32768, 1e6, weights.RopeScaling{Type: "default"}},
		{"ministral-8b", 131072, 1e8, weights.RopeScaling{Type: "default"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Preset(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MaxPositionEmbeddings != tc.context || cfg.RopeTheta != tc.theta || cfg.RopeScaling != tc.scaling {
				t.Errorf("context %d, theta %g, scaling %+v; want %d, %g, %+v", cfg.MaxPositionEmbeddings,
					cfg.RopeTheta, cfg.RopeScaling, tc.context, tc.theta, tc.scaling)
			}
			if err := CheckContext(cfg, tc.name, tc.context); err != nil {
				t.Errorf("a sequence of the whole context refused: %v", err)
			}
			if err := CheckContext(cfg, tc.name, tc.context+1); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("a sequence one past the context: %v", err)
			}
		})
	}
}

// TestCheckContext: a sequence past the context is refused with the context named and the shapes that hold
// it listed (none past the longest).
func TestCheckContext(t *testing.T) {
	cfg, _ := Preset("qwen3-8b")
	for _, tc := range []struct {
		tokens int
		want   string // "" accepted
	}{
		{1, ""},
		{40960, ""},
		{40961, "40961 tokens per sequence (input plus output) exceed qwen3-8b's context of 40960 tokens (max_position_embeddings); built-in shapes that hold it: gemma3-12b (131072), gemma3-4b (131072), llama3.1-8b (131072), llama3.2-1b (131072), llama3.2-3b (131072), ministral-8b (131072)"},
		{131073, "no built-in shape has a context that long"},
	} {
		err := CheckContext(cfg, "qwen3-8b", tc.tokens)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d tokens: %v", tc.tokens, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidOptions)):
			t.Errorf("%d tokens: %v, want an error saying %q", tc.tokens, err, tc.want)
		}
	}
}
