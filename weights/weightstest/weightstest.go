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
	cfg, tensors := llamaTensors(t, config, seed, edit)
	writeFolder(t, dir, config, tensors)
	return cfg
}

// WriteLlamaBF16 is WriteLlama with every tensor stored in bfloat16 (the values rounded to nearest
// even) and config.json's dtype "bfloat16" (when it names none).
func WriteLlamaBF16(t testing.TB, dir string, config map[string]any, seed uint64) *weights.Config {
	t.Helper()
	config = withDType(config)
	cfg, tensors := llamaTensors(t, config, seed, nil)
	for i, x := range tensors {
		tensors[i] = toBF16(x)
	}
	writeFolder(t, dir, config, tensors)
	return cfg
}

// withDType returns config with dtype bfloat16 unless it names a dtype.
func withDType(config map[string]any) map[string]any {
	out := make(map[string]any, len(config)+1)
	for k, v := range config {
		out[k] = v
	}
	if _, ok := out["dtype"]; !ok {
		if _, ok := out["torch_dtype"]; !ok {
			out["dtype"] = "bfloat16"
		}
	}
	return out
}

// llamaTensors parses config and draws its checkpoint's float32 tensors from seed (see WriteLlama), in
// name order, with edit applied.
func llamaTensors(t testing.TB, config map[string]any, seed uint64, edit func(name string, values []float32)) (*weights.Config, []*weights.Tensor) {
	t.Helper()
	data, err := json.Marshal(config)
	if err != nil {
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
		tensors = append(tensors, f32Tensor(name, shape, values))
	}
	return cfg, tensors
}

// writeFolder writes config.json and model.safetensors into dir.
func writeFolder(t testing.TB, dir string, config map[string]any, tensors []*weights.Tensor) {
	t.Helper()
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, weights.ConfigFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := weights.WriteSafetensors(filepath.Join(dir, weights.SafetensorsFile), tensors); err != nil {
		t.Fatal(err)
	}
}

func f32Tensor(name string, shape []int, values []float32) *weights.Tensor {
	buf := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	return &weights.Tensor{Name: name, DType: weights.DTypeF32, Shape: shape, Data: buf}
}

// toBF16 rounds a float32 tensor to bfloat16, to nearest even (NaN kept NaN).
func toBF16(x *weights.Tensor) *weights.Tensor {
	v := x.Float32()
	buf := make([]byte, 2*len(v))
	for i, f := range v {
		b := math.Float32bits(f)
		if b&0x7fffffff > 0x7f800000 {
			b |= 0x00400000
		} else {
			b += 0x7fff + (b>>16)&1
		}
		binary.LittleEndian.PutUint16(buf[2*i:], uint16(b>>16))
	}
	return &weights.Tensor{Name: x.Name, DType: weights.DTypeBF16, Shape: x.Shape, Data: buf}
}
