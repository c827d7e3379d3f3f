package weights

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOpenHFWrittenFolders opens the tiny checkpoints that transformers itself saved for the model
// package's golden tests (config.json in both the 4.x and 5.x styles, safetensors written by the
// reference implementation), so the reader is checked against files nobody here wrote.
func TestOpenHFWrittenFolders(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("..", "model", "testdata", "golden", "*", ConfigFile))
	if len(dirs) == 0 {
		t.Skip("no golden model folders in ../model/testdata/golden")
	}
	for _, cfgPath := range dirs {
		dir := filepath.Dir(cfgPath)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(dir, SafetensorsFile)); err != nil {
				t.Skip("no weights")
			}
			f, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c := f.Config
			if c.HeadDim*c.NumAttentionHeads == 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 || !c.DType.Valid() {
				t.Errorf("implausible config %+v", c)
			}
			emb, err := f.Tensors.Get(c.Tensor("embed_tokens.weight"))
			if err != nil {
				t.Fatal(err)
			}
			if emb.DType != c.DType {
				t.Errorf("embeddings stored as %v, config says %v", emb.DType, c.DType)
			}
			if len(f.Generation.EOSTokenIDs) == 0 {
				t.Errorf("generation config without eos: %s", describe(f.Generation))
			}
			// Rewriting every tensor with WriteSafetensors and reading it back keeps names, dtypes,
			// shapes and bytes.
			var all []*Tensor
			for _, name := range f.Tensors.Names() {
				tensor, err := f.Tensors.Get(name)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, tensor)
			}
			copyPath := filepath.Join(t.TempDir(), SafetensorsFile)
			if err := WriteSafetensors(copyPath, all); err != nil {
				t.Fatal(err)
			}
			again, err := OpenSafetensorsFiles(copyPath)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			for _, orig := range all {
				got, err := again.Get(orig.Name)
				if err != nil {
					t.Fatal(err)
				}
				if got.DType != orig.DType || !slices.Equal(got.Shape, orig.Shape) || string(got.Data) != string(orig.Data) {
					t.Errorf("tensor %q changed in the round trip", orig.Name)
				}
			}
			t.Logf("%s rope %+v tied %v dtype %v, %d tensors", c.Architecture, c.RopeScaling, c.TieWordEmbeddings, c.DType, len(f.Tensors.Names()))
		})
	}
}
