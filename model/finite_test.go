package model

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// encodeElements writes values as little-endian elements of d.
func encodeElements(d weights.DType, values []float32) []byte {
	out := make([]byte, d.Size()*len(values))
	for i, v := range values {
		switch d {
		case weights.DTypeF32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		case weights.DTypeF16:
			binary.LittleEndian.PutUint16(out[2*i:], dtype.F32ToF16(v))
		case weights.DTypeBF16:
			binary.LittleEndian.PutUint16(out[2*i:], dtype.F32ToBF16(v))
		}
	}
	return out
}

// TestScanNonFinite compares the word-at-a-time scan with an element-by-element one over random
// tensors of every dtype, with NaN and infinities planted at the start, at every lane of a word, in
// the tail that does not fill a word, and next to the largest finite values and subnormals, which
// have all but one exponent bit set or none.
func TestScanNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for _, d := range []weights.DType{weights.DTypeF32, weights.DTypeF16, weights.DTypeBF16} {
		for _, n := range []int{0, 1, 3, 4, 7, 8, 9, 31, 1000} {
			for trial := range 40 {
				values := make([]float32, n)
				for i := range values {
					switch rng.IntN(6) {
					case 0:
						values[i] = math.MaxFloat32
					case 1:
						values[i] = -65504 // float16's largest
					case 2:
						values[i] = 1e-40 // a float32 subnormal, zero in float16
					default:
						values[i] = float32(rng.NormFloat64())
					}
				}
				if d == weights.DTypeF16 {
					for i, v := range values {
						if v == math.MaxFloat32 {
							values[i] = 65504
						}
					}
				}
				for range trial % 4 { // 0 to 3 planted faults
					if n > 0 {
						values[rng.IntN(n)] = bad[rng.IntN(len(bad))]
					}
				}
				data := encodeElements(d, values)
				wantCount, wantFirst := 0, -1
				for i := range n {
					if !finiteAt(d, data, i*d.Size()) {
						if wantFirst < 0 {
							wantFirst = i
						}
						wantCount++
					}
				}
				count, first := scanNonFinite(d, data)
				if count != wantCount || first != wantFirst {
					t.Fatalf("%v, %d values, trial %d: scan %d from %d, want %d from %d", d, n, trial, count, first, wantCount, wantFirst)
				}
			}
		}
	}
}

// TestCheckFinite: the error names the tensor, the count and the first bad element by its index, and a
// large tensor (scanned in parallel pieces) reports the first in index order.
func TestCheckFinite(t *testing.T) {
	values := make([]float32, 6<<20) // 24 MiB of float32: three pieces
	values[5<<20+7] = float32(math.Inf(-1))
	values[4<<20+3] = float32(math.NaN())
	values[1] = 1
	tn := &weights.Tensor{Name: "w", DType: weights.DTypeF32, Shape: []int{6 << 10, 1 << 10}, Data: encodeElements(weights.DTypeF32, values)}
	err := checkFinite(tn)
	want := `tensor "w": weight is not finite: 2 of its 6291456 values are NaN or infinite, the first (NaN) at [4096 3]`
	if !errors.Is(err, ErrNonFiniteWeight) || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	values[4<<20+3], values[5<<20+7] = 0, 0
	tn.Data = encodeElements(weights.DTypeF32, values)
	if err := checkFinite(tn); err != nil {
		t.Errorf("finite tensor: %v", err)
	}
}

// TestLoadNonFiniteWeight writes a checkpoint with one NaN in a projection: Load refuses it naming the
// tensor, and with SkipWeightCheck loads it (what the engine's non-finite logits checks then face).
func TestLoadNonFiniteWeight(t *testing.T) {
	config := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"vocab_size": 50, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
		"num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-5, "torch_dtype": "float32",
	}
	for _, tc := range []struct {
		name   string
		tensor string
		value  float32
	}{
		{"NaN in o_proj", "model.layers.0.self_attn.o_proj.weight", float32(math.NaN())},
		{"Inf in k_proj", "model.layers.0.self_attn.k_proj.weight", float32(math.Inf(1))},
		{"-Inf in the final norm", "model.norm.weight", float32(math.Inf(-1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			weightstest.WriteLlamaEdited(t, dir, config, 1, func(name string, v []float32) {
				if name == tc.tensor {
					v[3] = tc.value
				}
			})
			f, err := weights.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = Load(f, Options{NumBlocks: 4})
			if !errors.Is(err, ErrNonFiniteWeight) || !strings.Contains(err.Error(), tc.tensor) {
				t.Fatalf("Load: %v, want ErrNonFiniteWeight naming %s", err, tc.tensor)
			}
			m, err := Load(f, Options{NumBlocks: 4, SkipWeightCheck: true})
			if err != nil {
				t.Fatalf("Load with SkipWeightCheck: %v", err)
			}
			m.Close()
		})
	}
}

func BenchmarkCheckFinite(b *testing.B) {
	for _, d := range []weights.DType{weights.DTypeF32, weights.DTypeBF16} {
		values := make([]float32, 64<<20/d.Size())
		for i := range values {
			values[i] = float32(i%1000) - 500
		}
		tn := &weights.Tensor{Name: "w", DType: d, Shape: []int{len(values)}, Data: encodeElements(d, values)}
		b.Run(d.String(), func(b *testing.B) {
			b.SetBytes(int64(len(tn.Data)))
			for b.Loop() {
				if err := checkFinite(tn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
