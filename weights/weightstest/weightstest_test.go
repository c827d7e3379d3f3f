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
