package weightstest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gollm/gollm/weights"
)

func TestWriteLlamaOpens(t *testing.T) {
	config := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "vocab_size": 50, "hidden_size": 16,
		"intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	for i, dir := range dirs {
		cfg := WriteLlama(t, dir, config, uint64(1+i/2)) // seeds 1, 1, 2
		f, err := weights.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if f.Config.HiddenSize != cfg.HiddenSize || f.Config.NumKeyValueHeads != 2 {
			t.Errorf("config %+v", f.Config)
		}
		norm, err := f.Tensors.Get("model.norm.weight")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range norm.Float32() {
			if v < 0.5 || v > 1.5 {
				t.Errorf("norm gain %v, want about 1", v)
			}
		}
		f.Close()
	}
	read := func(dir string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, weights.SafetensorsFile))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if !bytes.Equal(read(dirs[0]), read(dirs[1])) {
		t.Error("the same seed wrote different checkpoints")
	}
	if bytes.Equal(read(dirs[0]), read(dirs[2])) {
		t.Error("different seeds wrote the same checkpoint")
	}
}

func TestWriteFP8Opens(t *testing.T) {
	config := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "vocab_size": 50, "hidden_size": 16,
		"intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
	}
	for _, form := range []FP8Form{FP8Dynamic, FP8Static, FP8AutoFP8, FP8Block} {
		dir := t.TempDir()
		WriteFP8(t, dir, config, 3, form, FP8Scales{Input: 0.01, K: 0.02, V: 0.03})
		f, err := weights.Open(dir)
		if err != nil {
			t.Fatalf("form %d: %v", form, err)
		}
		if f.Config.Quantization == nil || f.Config.DType != weights.DTypeBF16 {
			t.Errorf("form %d: quantization %+v, dtype %v", form, f.Config.Quantization, f.Config.DType)
		}
		w, err := f.Tensors.Get("model.layers.1.mlp.down_proj.weight")
		if err != nil || w.DType != weights.DTypeF8E4M3 {
			t.Errorf("form %d: down_proj %v, %v", form, w, err)
		}
		lin, err := weights.ReadFP8Linear(f.Config, f.Tensors.Get, "model.layers.1.mlp.down_proj")
		if err != nil {
			t.Fatalf("form %d: %v", form, err)
		}
		if form == FP8Static && lin.InputScale != 0.01 {
			t.Errorf("input scale %v", lin.InputScale)
		}
		// The codes reach ±448 in every row (per channel) or somewhere (per tensor): the scale is the
		// maximum over 448.
		top := 0
		for _, c := range lin.Weight.Data {
			if c&0x7F == 0x7E {
				top++
			}
		}
		if form == FP8Dynamic && top < 16 || top == 0 {
			t.Errorf("form %d: %d codes at ±448", form, top)
		}
		f.Close()
	}
}

// TestNearestE4M3 pins the writer's own quantizer on hand-worked values: ties to even, subnormals,
// saturation.
func TestNearestE4M3(t *testing.T) {
	for _, tc := range []struct {
		x    float32
		want byte
	}{
		{0, 0x00}, {1, 0x38}, {1 + 1.0/16, 0x38}, {1 + 3.0/16, 0x3A}, {-2, 0xC0}, {0x1p-9, 0x01},
		{0x1p-10, 0x00}, {0x3p-10, 0x02}, {448, 0x7E}, {1000, 0x7E}, {-500, 0xFE},
	} {
		if got := nearestE4M3(tc.x); got != tc.want {
			t.Errorf("nearestE4M3(%v) = %#02x, want %#02x", tc.x, got, tc.want)
		}
	}
}
