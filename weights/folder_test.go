package weights

import (
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestOpenFolder(t *testing.T) {
	dims := tinyDims{V: 11, H: 8, I: 12, L: 2, Hq: 4, Hkv: 2, Tied: true}
	rng := rand.New(rand.NewPCG(7, 7))
	tensors := dims.tensors(rng, DTypeBF16)
	dir := writeModelFolder(t, dims.config(), tensors)
	writeFile(t, filepath.Join(dir, GenerationConfigFile), []byte(`{"eos_token_id": [2, 3], "temperature": 0.6}`))
	writeFile(t, filepath.Join(dir, TokenizerConfigFile), []byte(`{"bos_token": "<s>", "chat_template": "from json"}`))

	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.Dir != dir || f.TokenizerPath() != filepath.Join(dir, "tokenizer.json") {
		t.Errorf("Dir %q TokenizerPath %q", f.Dir, f.TokenizerPath())
	}
	if f.Config.NumKeyValueHeads != 2 || !f.Config.TieWordEmbeddings || f.Config.DType != DTypeBF16 {
		t.Errorf("Config = %+v", f.Config)
	}
	if !slices.Equal(f.Generation.EOSTokenIDs, []int32{2, 3}) || *f.Generation.Temperature != 0.6 {
		t.Errorf("Generation = %s", describe(f.Generation))
	}
	if f.TokenizerConfig.BOSToken != "<s>" || f.TokenizerConfig.ChatTemplate != "from json" {
		t.Errorf("TokenizerConfig = %s", describe(f.TokenizerConfig))
	}
	emb, err := f.Tensors.Get("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	if string(emb.Data) != string(tensors[0].Data) {
		t.Error("embeddings differ from what was written")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	t.Run("chat_template.jinja replaces the json template", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, ChatTemplateFile), []byte("{{ messages }}\n"))
		f, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if f.TokenizerConfig.ChatTemplate != "{{ messages }}\n" {
			t.Errorf("ChatTemplate = %q", f.TokenizerConfig.ChatTemplate)
		}
	})
}

func TestOpenFolderDefaults(t *testing.T) {
	dims := tinyDims{V: 5, H: 4, I: 6, L: 1, Hq: 2, Hkv: 1}
	cfg := dims.config()
	delete(cfg, "torch_dtype")
	dir := writeModelFolder(t, cfg, dims.tensors(rand.New(rand.NewPCG(1, 7)), DTypeF16))
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Config.DType != DTypeF16 {
		t.Errorf("DType = %v, want F16 from the embeddings", f.Config.DType)
	}
	if f.Generation == nil || f.Generation.Temperature != nil || f.TokenizerConfig == nil || f.TokenizerConfig.ChatTemplate != "" {
		t.Errorf("absent files must give zero values: %s %s", describe(f.Generation), describe(f.TokenizerConfig))
	}
}

func TestOpenFolderErrors(t *testing.T) {
	dims := tinyDims{V: 5, H: 4, I: 6, L: 1, Hq: 2, Hkv: 1}
	rng := rand.New(rand.NewPCG(2, 7))
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		is    error
		want  []string
	}{
		{"no config", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, ConfigFile)) }, fs.ErrNotExist, []string{ConfigFile}},
		{"bad generation config", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, GenerationConfigFile), []byte(`{"top_k": "many"}`))
		}, ErrInvalid, []string{GenerationConfigFile, "top_k"}},
		{"bad tokenizer config", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, TokenizerConfigFile), []byte(`{"eos_token": 2}`))
		}, ErrInvalid, []string{TokenizerConfigFile, "eos_token"}},
		{"no weights", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, SafetensorsFile)) }, fs.ErrNotExist, []string{SafetensorsFile}},
		{"weights of another config", func(t *testing.T, dir string) {
			other := tinyDims{V: 5, H: 4, I: 8, L: 1, Hq: 2, Hkv: 1}
			if err := WriteSafetensors(filepath.Join(dir, SafetensorsFile), other.tensors(rng, DTypeF32)); err != nil {
				t.Fatal(err)
			}
		}, ErrShapeMismatch, []string{"mlp.gate_proj.weight", "[8 4]", "[6 4]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeModelFolder(t, dims.config(), dims.tensors(rng, DTypeF32))
			tc.setup(t, dir)
			f, err := Open(dir)
			if err == nil {
				f.Close()
				t.Fatal("no error")
			}
			checkError(t, err, tc.is, tc.want...)
		})
	}
}
