// Package weightstest writes small random model folders for the tests of the packages above weights
// (model, engine, the command line), so that they run a real checkpoint through weights.Open without
// downloading one. It owns nothing but that; it is imported by tests only.
package weightstest

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gollm/gollm/weights"
)

// WriteLlama writes config (the contents of a config.json) and a float32 model.safetensors with the
// tensors weights.TensorShapes lists for it into dir, and returns the parsed config. The values
// are drawn from seed: embeddings N(0, 1), matrices N(0, 1/fan_in) so that activations keep their
// scale through the layers, and RMSNorm gains 1 + N(0, 0.01), so that greedy continuations of a
// tiny model are varied rather than constant. It fails the test on any error.
func WriteLlama(t testing.TB, dir string, config map[string]any, seed uint64) *weights.Config {
	t.Helper()
	return WriteLlamaEdited(t, dir, config, seed, nil)
}

// WriteLlamaEdited is WriteLlama with edit called on each tensor's values (by name, in a fixed order)
// before they are written, to plant a fault: a NaN, an infinity, a huge value. A nil edit changes
// nothing.
func WriteLlamaEdited(t testing.TB, dir string, config map[string]any, seed uint64, edit func(name string, values []float32)) *weights.Config {
	t.Helper()
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, weights.ConfigFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := weights.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	shapes := weights.TensorShapes(cfg)
	names := make([]string, 0, len(shapes))
	for name := range shapes {
		names = append(names, name)
	}
	slices.Sort(names) // draw in a fixed order: the same seed gives the same checkpoint
	rng := rand.New(rand.NewPCG(seed, 1))
	tensors := make([]*weights.Tensor, 0, len(names))
	for _, name := range names {
		shape := shapes[name]
		n := 1
		for _, d := range shape {
			n *= d
		}
		scale := 1 / math.Sqrt(float64(shape[len(shape)-1]))
		if name == "model.embed_tokens.weight" {
			scale = 1
		}
		values := make([]float32, n)
		for i := range n {
			v := rng.NormFloat64() * scale
			if len(shape) == 1 { // an RMSNorm gain
				v = 1 + 0.1*rng.NormFloat64()
			}
			values[i] = float32(v)
		}
		if edit != nil {
			edit(name, values)
		}
		buf := make([]byte, 4*n)
		for i, v := range values {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		tensors = append(tensors, &weights.Tensor{Name: name, DType: weights.DTypeF32, Shape: shape, Data: buf})
	}
	if err := weights.WriteSafetensors(filepath.Join(dir, weights.SafetensorsFile), tensors); err != nil {
		t.Fatal(err)
	}
	return cfg
}
