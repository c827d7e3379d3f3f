package weights

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/dtype"
)

// fp8Checkpoint turns the tensors of a tiny LLaMA into an FP8 checkpoint of quantization config q: every
// Linear layer q quantizes gets random e4m3 codes (no NaN) and its scales (F32, positive) in the shapes
// its scheme implies, and kv adds self_attn.k_scale and v_scale to every layer.
func fp8Checkpoint(t *testing.T, cfg *Config, ts []*Tensor, kv bool) []*Tensor {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 3))
	var out []*Tensor
	for _, x := range ts {
		module, isWeight := strings.CutSuffix(x.Name, ".weight")
		scheme, ok, err := cfg.Quantization.Scheme(module)
		if err != nil {
			t.Fatal(err)
		}
		if !isWeight || !ok || !slices.Contains(cfg.LinearModules(), module) {
			out = append(out, x)
			continue
		}
		w := &Tensor{Name: x.Name, DType: DTypeF8E4M3, Shape: x.Shape, Data: make([]byte, x.NumElements())}
		for i := range w.Data {
			w.Data[i] = byte(rng.IntN(0x7F)) | byte(rng.IntN(2))<<7
		}
		out = append(out, w)
		n := 1
		shape := []int{}
		if scheme.PerChannel {
			n, shape = x.Shape[0], []int{x.Shape[0], 1}
		}
		out = append(out, scaleTensor(module+".weight_scale", shape, n, rng))
		if scheme.StaticInput {
			out = append(out, scaleTensor(module+".input_scale", []int{1}, 1, rng))
		}
	}
	if kv {
		for l := range cfg.NumHiddenLayers {
			names := cfg.KVScaleNames(l)[0]
			out = append(out, scaleTensor(names[0], nil, 1, rng), scaleTensor(names[1], nil, 1, rng))
		}
	}
	return out
}

// scaleTensor makes an F32 tensor of n positive scales.
func scaleTensor(name string, shape []int, n int, rng *rand.Rand) *Tensor {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(0.001 + rng.Float64()*0.01)
	}
	data := make([]byte, 4*n)
	dtype.EncodeF32(data, v)
	return &Tensor{Name: name, DType: DTypeF32, Shape: shape, Data: data}
}

// fp8Folder writes the FP8 checkpoint of dims with quantization config qc after edit, and returns its
// config and tensor set.
func fp8Folder(t *testing.T, dims tinyDims, qc map[string]any, kv bool, edit func(ts []*Tensor) []*Tensor) (*Config, *TensorSet) {
	t.Helper()
	raw := dims.config()
	raw["quantization_config"] = qc
	cfgDir := writeModelFolder(t, raw, nil)
	cfg, err := LoadConfig(filepath.Join(cfgDir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	ts := fp8Checkpoint(t, cfg, dims.tensors(rand.New(rand.NewPCG(5, 5)), DTypeBF16), kv)
	if edit != nil {
		ts = edit(ts)
	}
	dir := writeModelFolder(t, raw, ts)
	s, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return cfg, s
}

// withTensor replaces (or adds) a tensor.
func withTensor(ts []*Tensor, x *Tensor) []*Tensor {
	for i, y := range ts {
		if y.Name == x.Name {
			out := slices.Clone(ts)
			out[i] = x
			return out
		}
	}
	return append(slices.Clone(ts), x)
}

func without(ts []*Tensor, name string) []*Tensor {
	return slices.DeleteFunc(slices.Clone(ts), func(x *Tensor) bool { return x.Name == name })
}

// TestCheckTensorsFP8 checks FP8 checkpoints of both forms, and that a missing or misshapen scale, a
// weight whose dtype contradicts quantization_config and stray KV scales are reported by name.
func TestCheckTensorsFP8(t *testing.T) {
	dims := tinyDims{V: 11, H: 8, I: 12, L: 2, Hq: 4, Hkv: 2}
	static := editJSON(t, ctConfig(), func(m map[string]any) {
		g := group0(m)
		g["weights"] = ctArgs("tensor", false, nil)
		g["input_activations"] = ctArgs("tensor", false, nil)
		m["kv_cache_scheme"] = ctArgs("tensor", false, nil)
	})
	auto := map[string]any{"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": []any{"lm_head"}}
	q0 := "model.layers.0.self_attn.q_proj"
	rng := rand.New(rand.NewPCG(1, 2))
	bf16 := func(name string, shape ...int) *Tensor {
		x, _ := randomTensor(rng, name, DTypeBF16, shape...)
		return x
	}
	tests := []struct {
		name string
		qc   map[string]any
		kv   bool
		edit func(ts []*Tensor) []*Tensor
		is   error
		want []string
	}{
		{name: "channel, dynamic", qc: ctConfig()},
		{name: "tensor, static, KV scales", qc: static, kv: true},
		{name: "AutoFP8 static", qc: auto},
		{name: "AutoFP8 with KV scales as output_scale", qc: auto, edit: func(ts []*Tensor) []*Tensor {
			for l := range 2 {
				names := (&Config{}).kvNames(l, "self_attn.k_proj.output_scale", "self_attn.v_proj.output_scale")
				ts = append(ts, scaleTensor(names[0], []int{1}, 1, rng), scaleTensor(names[1], nil, 1, rng))
			}
			return ts
		}},
		{name: "scalar weight scale stored as [1]", qc: static, kv: true, edit: func(ts []*Tensor) []*Tensor {
			return withTensor(ts, scaleTensor(q0+".weight_scale", []int{1}, 1, rng))
		}},

		{name: "weight scale missing", qc: ctConfig(), edit: func(ts []*Tensor) []*Tensor { return without(ts, q0+".weight_scale") },
			is: ErrTensorNotFound, want: []string{`"` + q0 + `.weight_scale"`}},
		{name: "per-channel scale of the wrong shape", qc: ctConfig(), edit: func(ts []*Tensor) []*Tensor {
			return withTensor(ts, scaleTensor(q0+".weight_scale", []int{8}, 8, rng))
		}, is: ErrShapeMismatch, want: []string{`"` + q0 + `.weight_scale"`, "[8]", "[8 1]"}},
		{name: "per-tensor scale given per channel", qc: static, kv: true, edit: func(ts []*Tensor) []*Tensor {
			return withTensor(ts, scaleTensor(q0+".weight_scale", []int{8, 1}, 8, rng))
		}, is: ErrShapeMismatch, want: []string{`"` + q0 + `.weight_scale"`, "[] or [1]"}},
		{name: "input scale missing", qc: static, kv: true, edit: func(ts []*Tensor) []*Tensor { return without(ts, q0+".input_scale") },
			is: ErrTensorNotFound, want: []string{`"` + q0 + `.input_scale"`}},
		{name: "weight in BF16 where FP8 is promised", qc: ctConfig(), edit: func(ts []*Tensor) []*Tensor {
			return withTensor(ts, bf16(q0+".weight", 8, 8))
		}, is: ErrInvalid, want: []string{`"` + q0 + `.weight"`, "BF16", "F8_E4M3"}},
		{name: "FP8 lm_head that is ignored", qc: ctConfig(), edit: func(ts []*Tensor) []*Tensor {
			return withTensor(ts, &Tensor{Name: "lm_head.weight", DType: DTypeF8E4M3, Shape: []int{11, 8}, Data: make([]byte, 88)})
		}, is: ErrInvalid, want: []string{`"lm_head.weight"`, "does not quantize it"}},
		{name: "FP8 norm", qc: ctConfig(), edit: func(ts []*Tensor) []*Tensor {
			return withTensor(ts, &Tensor{Name: "model.norm.weight", DType: DTypeF8E4M3, Shape: []int{8}, Data: make([]byte, 8)})
		}, is: ErrInvalid, want: []string{`"model.norm.weight"`}},
		{name: "scale stored as FP8", qc: ctConfig(), edit: func(ts []*Tensor) []*Tensor {
			return withTensor(ts, &Tensor{Name: q0 + ".weight_scale", DType: DTypeF8E4M3, Shape: []int{8, 1}, Data: make([]byte, 8)})
		}, is: ErrUnsupported, want: []string{`"` + q0 + `.weight_scale"`}},
		{name: "kv_cache_scheme without KV scales", qc: static, edit: func(ts []*Tensor) []*Tensor { return ts },
			is: ErrTensorNotFound, want: []string{"layer 0", "kv_cache_scheme", "self_attn.k_scale"}},
		{name: "k scale without v scale", qc: static, kv: true, edit: func(ts []*Tensor) []*Tensor {
			return without(ts, "model.layers.1.self_attn.v_scale")
		}, is: ErrTensorNotFound, want: []string{`"model.layers.1.self_attn.k_scale" without "model.layers.1.self_attn.v_scale"`}},
		{name: "KV scales under two names", qc: static, kv: true, edit: func(ts []*Tensor) []*Tensor {
			return append(ts, scaleTensor("model.layers.0.self_attn.kv_scale", nil, 1, rng))
		}, is: ErrInvalid, want: []string{"layer 0", "stored twice"}},
		{name: "stray input scale", qc: ctConfig(), edit: func(ts []*Tensor) []*Tensor {
			return append(ts, scaleTensor(q0+".input_scale", nil, 1, rng))
		}, is: ErrUnexpectedTensor, want: []string{`"` + q0 + `.input_scale"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, s := fp8Folder(t, dims, tc.qc, tc.kv, tc.edit)
			err := CheckTensors(cfg, s)
			if tc.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			checkError(t, err, tc.is, tc.want...)
		})
	}
}

// kvNames is KVScaleNames' pair for layer l under the suffixes k and v (tests only).
func (c *Config) kvNames(l int, k, v string) [2]string {
	return [2]string{c.LayerTensor(l, k), c.LayerTensor(l, v)}
}

// TestCheckTensorsF8WithoutQuantization checks that an F8_E4M3 tensor in a checkpoint without
// quantization_config is refused by name.
func TestCheckTensorsF8WithoutQuantization(t *testing.T) {
	dims := tinyDims{V: 5, H: 4, I: 4, L: 1, Hq: 2, Hkv: 1}
	ts := dims.tensors(rand.New(rand.NewPCG(1, 1)), DTypeBF16)
	ts = withTensor(ts, &Tensor{Name: "model.layers.0.mlp.up_proj.weight", DType: DTypeF8E4M3, Shape: []int{4, 4}, Data: make([]byte, 16)})
	dir := writeModelFolder(t, dims.config(), ts)
	_, err := Open(dir)
	checkError(t, err, ErrInvalid, `"model.layers.0.mlp.up_proj.weight"`, "F8_E4M3", "no quantization_config")
}

// TestReadFP8Linear reads quantized layers and their KV scales, and checks that a scale that is NaN,
// infinite, zero or negative, so large that its codes overflow float32, or of the wrong shape, is
// refused naming the tensor.
func TestReadFP8Linear(t *testing.T) {
	dims := tinyDims{V: 11, H: 8, I: 12, L: 2, Hq: 4, Hkv: 2}
	static := editJSON(t, ctConfig(), func(m map[string]any) {
		g := group0(m)
		g["weights"] = ctArgs("tensor", false, nil)
		g["input_activations"] = ctArgs("tensor", false, nil)
		m["kv_cache_scheme"] = ctArgs("tensor", false, nil)
	})
	q0 := "model.layers.0.self_attn.q_proj"
	t.Run("per channel", func(t *testing.T) {
		cfg, s := fp8Folder(t, dims, ctConfig(), false, nil)
		lin, err := ReadFP8Linear(cfg, s.Get, q0)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := s.Get(q0 + ".weight_scale")
		if !slices.Equal(lin.Scales, want.Float32()) || lin.InputScale != 0 || lin.Weight.DType != DTypeF8E4M3 {
			t.Errorf("scales %v (input %v), want %v", lin.Scales, lin.InputScale, want.Float32())
		}
		if _, _, ok, err := ReadKVScales(cfg, s.Get, 0); ok || err != nil {
			t.Errorf("KV scales found in a checkpoint without them: %v", err)
		}
		if _, err := ReadFP8Linear(cfg, s.Get, "lm_head"); err == nil {
			t.Error("the ignored lm_head read as FP8")
		}
	})
	t.Run("per tensor, static, KV", func(t *testing.T) {
		cfg, s := fp8Folder(t, dims, static, true, nil)
		lin, err := ReadFP8Linear(cfg, s.Get, q0)
		if err != nil {
			t.Fatal(err)
		}
		ws, _ := s.Get(q0 + ".weight_scale")
		in, _ := s.Get(q0 + ".input_scale")
		if len(lin.Scales) != 8 || lin.Scales[0] != ws.Float32()[0] || lin.Scales[7] != ws.Float32()[0] || lin.InputScale != in.Float32()[0] {
			t.Errorf("scales %v input %v, want 8 × %v and %v", lin.Scales, lin.InputScale, ws.Float32(), in.Float32())
		}
		k, v, ok, err := ReadKVScales(cfg, s.Get, 1)
		kt, _ := s.Get("model.layers.1.self_attn.k_scale")
		vt, _ := s.Get("model.layers.1.self_attn.v_scale")
		if err != nil || !ok || k != kt.Float32()[0] || v != vt.Float32()[0] {
			t.Errorf("KV scales %v %v %v %v", k, v, ok, err)
		}
	})
	bad := func(v float32) *Tensor {
		data := make([]byte, 4)
		dtype.EncodeF32(data, []float32{v})
		return &Tensor{Name: q0 + ".input_scale", DType: DTypeF32, Shape: []int{}, Data: data}
	}
	for _, tc := range []struct {
		name string
		x    *Tensor
		is   error
		want string
	}{
		{"NaN", bad(float32(math.NaN())), ErrInvalid, "NaN"},
		{"infinite", bad(float32(math.Inf(1))), ErrInvalid, "+Inf"},
		{"zero", bad(0), ErrInvalid, "is 0"},
		{"negative", bad(-0.5), ErrInvalid, "-0.5"},
		{"overflowing its codes", bad(1e36), ErrInvalid, "overflows float32"},
		{"two values", scaleTensor(q0+".input_scale", []int{2}, 2, rand.New(rand.NewPCG(1, 1))), ErrShapeMismatch, "[2]"},
	} {
		t.Run("input scale "+tc.name, func(t *testing.T) {
			cfg, s := fp8Folder(t, dims, static, true, func(ts []*Tensor) []*Tensor { return withTensor(ts, tc.x) })
			_, err := ReadFP8Linear(cfg, s.Get, q0)
			checkError(t, err, tc.is, `"`+q0+`.input_scale"`, tc.want)
		})
	}
	t.Run("negative per-channel scale", func(t *testing.T) {
		cfg, s := fp8Folder(t, dims, ctConfig(), false, func(ts []*Tensor) []*Tensor {
			x := scaleTensor(q0+".weight_scale", []int{8, 1}, 8, rand.New(rand.NewPCG(1, 1)))
			dtype.EncodeF32(x.Data[4*7:4*8], []float32{-1})
			return withTensor(ts, x)
		})
		_, err := ReadFP8Linear(cfg, s.Get, q0)
		checkError(t, err, ErrInvalid, `"`+q0+`.weight_scale"`, "scale 7 is -1")
	})
	t.Run("per-channel scale overflowing its codes", func(t *testing.T) {
		cfg, s := fp8Folder(t, dims, ctConfig(), false, func(ts []*Tensor) []*Tensor {
			x := scaleTensor(q0+".weight_scale", []int{8, 1}, 8, rand.New(rand.NewPCG(1, 1)))
			dtype.EncodeF32(x.Data[4*3:4*4], []float32{1e36})
			return withTensor(ts, x)
		})
		_, err := ReadFP8Linear(cfg, s.Get, q0)
		checkError(t, err, ErrInvalid, `"`+q0+`.weight_scale"`, "scale 3 is 1e+36", "overflows float32")
	})
	t.Run("zero KV scale", func(t *testing.T) {
		cfg, s := fp8Folder(t, dims, static, true, func(ts []*Tensor) []*Tensor {
			x := scaleTensor("model.layers.1.self_attn.v_scale", nil, 1, rand.New(rand.NewPCG(1, 1)))
			dtype.EncodeF32(x.Data, []float32{0})
			return withTensor(ts, x)
		})
		_, _, _, err := ReadKVScales(cfg, s.Get, 1)
		checkError(t, err, ErrInvalid, `"model.layers.1.self_attn.v_scale"`)
	})
	t.Run("BF16 scales", func(t *testing.T) {
		cfg, s := fp8Folder(t, dims, ctConfig(), false, func(ts []*Tensor) []*Tensor {
			x, v := randomTensor(rand.New(rand.NewPCG(2, 2)), q0+".weight_scale", DTypeBF16, 8, 1)
			for i := range v {
				v[i] = float32(i+1) / 64
			}
			dtype.EncodeBF16(x.Data, v)
			return withTensor(ts, x)
		})
		lin, err := ReadFP8Linear(cfg, s.Get, q0)
		if err != nil {
			t.Fatal(err)
		}
		if lin.Scales[3] != 4.0/64 {
			t.Errorf("scale 3 is %v, want %v", lin.Scales[3], 4.0/64)
		}
	})
}

// BenchmarkDequantizeFP8 dequantizes a 4096 × 4096 block-wise layer (128 × 128 blocks): the load-time
// cost of a block-wise checkpoint's layer, per element.
func BenchmarkDequantizeFP8(b *testing.B) {
	const n = 4096
	codes := make([]byte, n*n)
	for i := range codes {
		codes[i] = byte(i*7) & 0x7E
	}
	scales := make([]float32, (n/128)*(n/128))
	for i := range scales {
		scales[i] = 1 / float32(i+1)
	}
	l := &FP8Linear{Weight: &Tensor{Name: "w", DType: DTypeF8E4M3, Shape: []int{n, n}, Data: codes}, Block: [2]int{128, 128}, BlockScales: scales}
	b.SetBytes(n * n)
	for b.Loop() {
		DequantizeFP8(l)
	}
}

// TestDequantizeFP8 checks both scale layouts on hand-worked codes (OCP e4m3: 0x38 is 1, 0x40 2, 0xB8
// −1, 0x01 the smallest subnormal 2^-9, 0x7E 448) over a 3 × 5 matrix, whose 2 × 2 blocks leave
// partial ones at the bottom and right edges.
func TestDequantizeFP8(t *testing.T) {
	codes := []byte{
		0x38, 0x40, 0xB8, 0x01, 0x7E,
		0x40, 0x38, 0x01, 0xB8, 0x38,
		0x7E, 0xB8, 0x38, 0x40, 0x01,
	}
	value := map[byte]float32{0x38: 1, 0x40: 2, 0xB8: -1, 0x01: 1.0 / 512, 0x7E: 448}
	w := &Tensor{Name: "w", DType: DTypeF8E4M3, Shape: []int{3, 5}, Data: codes}
	for _, tc := range []struct {
		name  string
		l     *FP8Linear
		scale func(n, k int) float32
	}{
		{"rows", &FP8Linear{Weight: w, Scales: []float32{0.5, 3, 0.25}}, func(n, _ int) float32 { return []float32{0.5, 3, 0.25}[n] }},
		{"blocks", &FP8Linear{Weight: w, Block: [2]int{2, 2}, BlockScales: []float32{1, 2, 4, 0.5, 8, 16}},
			func(n, k int) float32 { return []float32{1, 2, 4, 0.5, 8, 16}[(n/2)*3+k/2] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DequantizeFP8(tc.l)
			if got.DType != DTypeF32 || !slices.Equal(got.Shape, []int{3, 5}) || got.Name != "w" {
				t.Fatalf("tensor %q %v %v", got.Name, got.DType, got.Shape)
			}
			v := got.Float32()
			for i, c := range codes {
				if want := value[c] * tc.scale(i/5, i%5); v[i] != want {
					t.Errorf("element (%d, %d): %v, want %v", i/5, i%5, v[i], want)
				}
			}
		})
	}
}
