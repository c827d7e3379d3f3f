package model

import (
	"bytes"
	"errors"
	"math"
	"runtime"
	"testing"

	"github.com/gollm/gollm/weights"
)

// randomTestConfig is tinyConfig with a vocabulary large enough that the embeddings span several
// generator chunks (4096 × 48 elements > randomChunk).
func randomTestConfig(dt weights.DType) *weights.Config {
	c := tinyConfig()
	c.VocabSize = 4096
	c.DType = dt
	return c
}

func TestRandomSourceTensors(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeF32, weights.DTypeF16, weights.DTypeBF16} {
		t.Run(dt.String(), func(t *testing.T) {
			cfg := randomTestConfig(dt)
			src, err := newRandomSource(cfg, 42)
			if err != nil {
				t.Fatal(err)
			}
			shapes := weights.TensorShapes(cfg)
			if len(shapes) != len(src.shapes) {
				t.Fatalf("source has %d tensors, the config %d", len(src.shapes), len(shapes))
			}
			for name, shape := range shapes {
				tn, err := src.tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if tn.DType != dt || tn.Name != name || len(tn.Shape) != len(shape) {
					t.Fatalf("%s: got %s %v %v", name, tn.Name, tn.DType, tn.Shape)
				}
				for i := range shape {
					if tn.Shape[i] != shape[i] {
						t.Fatalf("%s: shape %v, want %v", name, tn.Shape, shape)
					}
				}
				vals := tn.Float32() // also checks len(Data) against the shape
				if len(shape) == 1 {
					for i, v := range vals {
						if v != 1 {
							t.Fatalf("%s[%d] = %v, want 1 (RMSNorm gain)", name, i, v)
						}
					}
					continue
				}
				var sum, sumSq float64
				for _, v := range vals {
					if math.IsNaN(float64(v)) || math.Abs(float64(v)) > 10*RandomStd {
						t.Fatalf("%s: value %v is not a plausible N(0, %g²) draw", name, v, RandomStd)
					}
					sum += float64(v)
					sumSq += float64(v) * float64(v)
				}
				n := float64(len(vals))
				mean, std := sum/n, math.Sqrt(sumSq/n)
				// Five standard errors: the mean's is σ/√n, the sample std's about σ/√(2n).
				if math.Abs(mean) > 5*RandomStd/math.Sqrt(n) {
					t.Errorf("%s: mean %g over %d values", name, mean, len(vals))
				}
				if math.Abs(std-RandomStd) > 5*RandomStd/math.Sqrt(2*n)+RandomStd*1e-2 {
					t.Errorf("%s: std %g over %d values, want %g", name, std, len(vals), RandomStd)
				}
			}
		})
	}
}

func TestRandomSourceDeterminism(t *testing.T) {
	cfg := randomTestConfig(weights.DTypeBF16)
	draw := func(seed uint64, name string, procs int) []byte {
		t.Helper()
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		src, err := newRandomSource(cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		tn, err := src.tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		return tn.Data
	}
	const embed, q = "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"
	a := draw(7, embed, 1)
	if !bytes.Equal(a, draw(7, embed, 3)) {
		t.Error("the same seed gave different embeddings with GOMAXPROCS 1 and 3")
	}
	if bytes.Equal(a, draw(8, embed, 1)) {
		t.Error("seeds 7 and 8 gave the same embeddings")
	}
	if bytes.Equal(draw(7, q, 1), draw(7, "model.layers.1.self_attn.q_proj.weight", 1)) {
		t.Error("two layers' q_proj are equal")
	}
	// Chunks of one tensor must be different streams, not repeats of one.
	if bytes.Equal(a[:2*randomChunk], a[2*randomChunk:4*randomChunk]) {
		t.Error("the embeddings' first two chunks are equal")
	}
}

func TestRandomSourceErrors(t *testing.T) {
	cfg := randomTestConfig(weights.DTypeBF16)
	src, err := newRandomSource(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.tensor("model.layers.9.mlp.up_proj.weight"); !errors.Is(err, weights.ErrTensorNotFound) {
		t.Errorf("tensor of a missing layer: err = %v, want ErrTensorNotFound", err)
	}
	bad := *cfg
	bad.DType = weights.DTypeInvalid
	if _, err := LoadRandom(&bad, 1, Options{NumBlocks: 4}, NewCPUBackend); err == nil {
		t.Error("LoadRandom accepted an invalid dtype")
	}
	if _, err := LoadRandom(nil, 1, Options{NumBlocks: 4}, NewCPUBackend); err == nil {
		t.Error("LoadRandom accepted a nil config")
	}
	if _, err := LoadRandom(cfg, 1, Options{}, NewCPUBackend); err == nil {
		t.Error("LoadRandom accepted zero KV blocks on the CPU")
	}
	if _, err := LoadRandom(cfg, 1, Options{NumBlocks: 4, Device: "tpu"}, nil); err == nil {
		t.Error("LoadRandom accepted an unknown device")
	}
	if !cudaBuilt {
		if _, err := LoadRandom(cfg, 1, Options{NumBlocks: 4, Device: DeviceCUDA}, nil); !errors.Is(err, ErrNoCUDA) {
			t.Errorf("cuda in a build without it: err %v, want ErrNoCUDA", err)
		}
	}
	// nil picks the device Options names: the CPU by default.
	m, err := LoadRandom(cfg, 1, Options{NumBlocks: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// TestLoadRandomForward loads random models on the CPU backend and checks a prefill and decodes against
// the float64 dense reference over the same random tensors.
func TestLoadRandomForward(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dt     weights.DType
		tied   bool
		family func(*weights.Config)
	}{
		{"f32", weights.DTypeF32, false, nil},
		{"bf16_tied", weights.DTypeBF16, true, nil},
		{"f16", weights.DTypeF16, false, nil},
		{"gemma3_bf16", weights.DTypeBF16, true, func(c *weights.Config) { // zero norm weights, zero biases
			c.LayerTypes, c.SlidingWindow = []string{weights.SlidingAttention, weights.FullAttention}, 3
			c.HiddenAct, c.QKNorm, c.NormOffset, c.SandwichNorm, c.EmbedScale = weights.ActGELUTanh, true, 1, true, true
			c.QKVBias, c.OBias, c.QueryPreAttnScalar, c.FinalLogitSoftcap = true, true, 16, 30
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := randomTestConfig(tc.dt)
			cfg.TieWordEmbeddings = tc.tied
			if tc.family != nil {
				tc.family(cfg)
			}
			const seed, numBlocks, blockSize = 3, 16, 4
			m, err := LoadRandom(cfg, seed, Options{NumBlocks: numBlocks, BlockSize: blockSize}, NewCPUBackend)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			src, err := newRandomSource(cfg, seed)
			if err != nil {
				t.Fatal(err)
			}
			ref := &randomModel{cfg: cfg, tensors: map[string]*weights.Tensor{}}
			for name := range src.shapes {
				if ref.tensors[name], err = src.tensor(name); err != nil {
					t.Fatal(err)
				}
			}
			rng := newRand(9)
			p := newModelPager(m, rng)
			tokens := randomTokens(rng, 7, cfg.VocabSize)
			next := tokens
			for step := range 3 {
				logits, err := m.Forward(p.step(chunk{0, next}))
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				want := reference(t, ref, tokens)
				last := want[len(want)-1]
				if diff := maxAbsDiff(logits[0], last); diff > 1e-5 {
					t.Errorf("step %d: max abs diff %g", step, diff)
				}
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, v := range last {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
				if !(hi-lo > 1e-3) {
					t.Errorf("step %d: logits span only [%g, %g]", step, lo, hi)
				}
				next = randomTokens(rng, 1, cfg.VocabSize)
				tokens = append(tokens, next...)
			}
		})
	}
}
