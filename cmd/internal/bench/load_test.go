package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

// tinyConfigJSON is a small LLaMA config.json for tests that load a model from a file.
const tinyConfigJSON = `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "rms_norm_eps": 1e-5, "rope_theta": 10000, "torch_dtype": "bfloat16", "tie_word_embeddings": false
}`

func writeTinyConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.json")
	if err := os.WriteFile(path, []byte(tinyConfigJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadModelConfigFile(t *testing.T) {
	path := writeTinyConfig(t)
	lm, err := LoadModel(ModelSpec{Config: path, NumBlocks: BlocksFor(2, 20, 4), BlockSize: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	if lm.Name != "tiny" || !lm.RandomWeights || lm.Device.Name != "cpu" || lm.Config.VocabSize != 300 ||
		lm.Precision != (Precision{WeightBytes: 2, KVBytes: 4}) {
		t.Errorf("loaded %+v", lm)
	}
	if _, ok := lm.Tokenizer.(idTokenizer); !ok {
		t.Errorf("tokenizer %T, want the id stand-in", lm.Tokenizer)
	}
	// The random model runs end to end through the engine.
	res, err := RunLatency(context.Background(), lm, LatencyOptions{Batch: 2, InputLen: 9, OutputLen: 3, Bandwidth: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	if res.DecodeStep.Count != 2 || res.Params != CountParams(lm.Config).Total {
		t.Errorf("result %+v", res)
	}
}

// TestLoadModelFolder loads the built-in model's folder with its weights and, with RandomWeights, only
// its shape and tokenizer.
func TestLoadModelFolder(t *testing.T) {
	dir, err := defaultmodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	for _, random := range []bool{false, true} {
		lm, err := LoadModel(ModelSpec{Dir: dir, RandomWeights: random, NumBlocks: 16, Device: "cpu"})
		if err != nil {
			t.Fatal(err)
		}
		if lm.RandomWeights != random || lm.Name != dir {
			t.Errorf("random %v: loaded %+v", random, lm)
		}
		if _, ok := lm.Tokenizer.(*tokenizer.Tokenizer); !ok {
			t.Errorf("random %v: tokenizer %T, want the folder's", random, lm.Tokenizer)
		}
		res, err := RunThroughput(context.Background(), lm, ThroughputOptions{NumPrompts: 3, InputLen: Range{4, 8},
			OutputLen: Range{2, 3}, MaxNumSeqs: 2})
		if err != nil {
			t.Fatal(err)
		}
		if res.OutputTokens < 6 || res.OutputTokens > 9 {
			t.Errorf("random %v: %d output tokens", random, res.OutputTokens)
		}
		if err := lm.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestLoadModelErrors(t *testing.T) {
	path := writeTinyConfig(t)
	for _, tc := range []struct {
		name string
		spec ModelSpec
		is   error
	}{
		{"neither", ModelSpec{NumBlocks: 4}, ErrInvalidOptions},
		{"both", ModelSpec{Config: "smollm2-135m", Dir: "/nonexistent", NumBlocks: 4}, ErrInvalidOptions},
		{"unknown", ModelSpec{Config: "gpt-5", NumBlocks: 4}, ErrUnknownPreset},
		{"device", ModelSpec{Config: path, Device: "tpu", NumBlocks: 4}, ErrDeviceUnavailable},
		{"no folder", ModelSpec{Dir: "/nonexistent", NumBlocks: 4}, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := LoadModel(tc.spec); !errors.Is(err, tc.is) {
				t.Errorf("err %v, want %v", err, tc.is)
			}
		})
	}
	if _, err := LoadModel(ModelSpec{Config: path}); err == nil {
		t.Error("zero KV pages accepted")
	}
}

func TestBlocksFor(t *testing.T) {
	for _, tc := range []struct{ seqs, tokens, page, want int }{
		{1, 16, 16, 2}, {1, 17, 16, 3}, {4, 160, 16, 44},
		{2, 5, 0, 2 * ((5+model.DefaultBlockSize-1)/model.DefaultBlockSize + 1)}, // 0: the default page
	} {
		if got := BlocksFor(tc.seqs, tc.tokens, tc.page); got != tc.want {
			t.Errorf("BlocksFor(%d, %d, %d) = %d, want %d", tc.seqs, tc.tokens, tc.page, got, tc.want)
		}
	}
}

func TestIDTokenizer(t *testing.T) {
	if got := (idTokenizer{}).Decode([]int32{0, 42}, true); got != " t0 t42" {
		t.Errorf("Decode = %q", got)
	}
}

func TestDeviceByName(t *testing.T) {
	cpu, err := DeviceByName("cpu")
	if err != nil || cpu.Name != "cpu" || cpu.Bandwidth != 0 {
		t.Fatalf("cpu: %+v, %v", cpu, err)
	}
	bf16, _ := Preset("smollm2-135m")
	f16, _ := Preset("llama2-7b")
	if p := cpu.Precision(bf16); p != (Precision{WeightBytes: 2, KVBytes: 4}) {
		t.Errorf("cpu bf16: %+v", p)
	}
	if p := cpu.Precision(f16); p != (Precision{WeightBytes: 4, KVBytes: 4}) {
		t.Errorf("cpu f16: %+v", p)
	}
	if p := cudaPrecision(bf16); p != (Precision{WeightBytes: 2, KVBytes: 2}) {
		t.Errorf("cuda bf16: %+v", p)
	}
	if p := cudaPrecision(&weights.Config{}); p != (Precision{WeightBytes: 4, KVBytes: 4}) {
		t.Errorf("cuda without a dtype: %+v", p)
	}
	gpu, err := DeviceByName("cuda")
	switch {
	case err != nil && !(errors.Is(err, ErrDeviceUnavailable) && errors.Is(err, model.ErrNoCUDA)):
		t.Errorf("cuda: err %v, want ErrDeviceUnavailable and model.ErrNoCUDA", err)
	case err == nil && (gpu.Name != "cuda" || gpu.Bandwidth != 0 || gpu.MeasureBandwidth == nil):
		t.Errorf("cuda: %+v", gpu)
	}
}
