package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// fp8Product is FP8Weight's definition computed in float64 from the codes: each row's scale as the
// definition gives it (float32), the input rounded to e4m3, the sum of the products in float64, then
// the scales. bound[r][o] is Σ|xq·w|·scales, the size a float32 sum's rounding is relative to.
func fp8Product(x []float32, rows, in int, w *FP8Weight) (ref, bound [][]float64) {
	for r := range rows {
		row := x[r*in : (r+1)*in]
		s := w.InputScale
		if s == 0 {
			var amax float32
			for _, v := range row {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			s = max(amax/448, float32(1.0/(448*512)))
		}
		out, b := make([]float64, w.Rows), make([]float64, w.Rows)
		for o := range w.Rows {
			var sum, abs float64
			for i, v := range row {
				p := float64(dtype.E4M3ToF32(dtype.F32ToE4M3Sat(v/s))) * float64(dtype.E4M3ToF32(w.Codes[o*in+i]))
				sum += p
				abs += math.Abs(p)
			}
			out[o] = sum * float64(s) * float64(w.Scales[o])
			b[o] = abs * float64(s) * float64(w.Scales[o])
		}
		ref, bound = append(ref, out), append(bound, b)
	}
	return ref, bound
}

// randomFP8 draws an FP8 weight: codes over every finite e4m3 value, scales around 1/100.
func randomFP8(rng *rand.Rand, rows, cols int, inputScale float32) *FP8Weight {
	w := &FP8Weight{Name: "w", Rows: rows, Cols: cols, Codes: make([]byte, rows*cols), Scales: make([]float32, rows), InputScale: inputScale}
	for i := range w.Codes {
		w.Codes[i] = byte(rng.IntN(0x7F)) | byte(rng.IntN(2))<<7
	}
	for i := range w.Scales {
		w.Scales[i] = float32(0.001 + 0.02*rng.Float64())
	}
	return w
}

// TestFP8MatMul checks the CPU backend's FP8 product against the float64 product of FP8Weight's
// definition, for token counts and output sizes around its four-row tiles, dynamic and static input
// scales (a static scale small enough that inputs saturate at ±448), a bias, a row of zeros (the floor
// scale) and a row holding a NaN, which makes that row's outputs NaN and leaves the others alone.
func TestFP8MatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	b, err := NewCPUBackend(Shape{NumLayers: 1, HiddenSize: 8, NumHeads: 1, NumKVHeads: 1, HeadDim: 8,
		RopeInvFreq: make([]float32, 4), NumBlocks: 1, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		rows, in, out int
		inputScale    float32
		bias          bool
	}{
		{1, 64, 13, 0, false}, {2, 33, 8, 0, true}, {3, 48, 5, 0.01, false}, {6, 40, 17, 0, true},
		{5, 16, 4, 0.0005, false},
	} {
		t.Run(fmt.Sprintf("%dx%d→%d_input%v_bias%v", tc.rows, tc.in, tc.out, tc.inputScale, tc.bias), func(t *testing.T) {
			w := randomFP8(rng, tc.out, tc.in, tc.inputScale)
			weight, err := b.UploadFP8(w)
			if err != nil {
				t.Fatal(err)
			}
			var bias []float32
			if tc.bias {
				bias = make([]float32, tc.out)
				for i := range bias {
					bias[i] = float32(rng.NormFloat64())
				}
				bw, err := b.Upload(&weights.Tensor{Name: "b", DType: weights.DTypeF32, Shape: []int{tc.out}, Data: float32Bytes(bias)})
				if err != nil {
					t.Fatal(err)
				}
				weight.Bias = &bw
			}
			x, _ := b.NewTensor(tc.rows, tc.in)
			dst, _ := b.NewTensor(tc.rows, tc.out)
			xs := f32(x)
			for i := range xs {
				xs[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
			}
			if tc.rows > 2 {
				clear(xs[1*tc.in : 2*tc.in]) // a row of zeros
				xs[2*tc.in+3] = float32(math.NaN())
			}
			b.MatMul(dst, x, weight)
			ref, bound := fp8Product(xs, tc.rows, tc.in, w)
			got := f32(dst)
			for r := range tc.rows {
				for o := range tc.out {
					want := ref[r][o]
					if bias != nil {
						want += float64(bias[o])
					}
					g := float64(got[r*tc.out+o])
					if tc.rows > 2 && r == 2 {
						if !math.IsNaN(g) {
							t.Fatalf("row with a NaN: output %d is %v", o, g)
						}
						continue
					}
					if math.Abs(g-want) > 1e-6*bound[r][o]+1e-6*math.Abs(want)+1e-30 {
						t.Fatalf("row %d output %d: %v, want %v (bound %v)", r, o, g, want, bound[r][o])
					}
				}
			}
			if tc.rows > 2 && !tc.bias {
				for o := range tc.out {
					if got[1*tc.out+o] != 0 {
						t.Fatalf("row of zeros: output %d is %v", o, got[1*tc.out+o])
					}
				}
			}
		})
	}
	if _, err := b.UploadFP8(&FP8Weight{Name: "bad", Rows: 1, Cols: 2, Codes: []byte{1, 2}, Scales: []float32{0}}); err == nil {
		t.Error("a zero scale was accepted")
	}
}

// fp8Config is a tiny LLaMA for the FP8 tests (heads of 8, a GQA group of 2).
var fp8Config = map[string]any{
	"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
	"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
	"num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
	"rms_norm_eps": 1e-5, "rope_theta": 10000.0,
}

// openFolder opens dir, closing it when the test ends.
func openFolder(t *testing.T, dir string) *weights.Folder {
	t.Helper()
	f, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// fp8RefModel returns the float checkpoint that the FP8 folder f stands for (each FP8 weight
// dequantized, code · scale) and the hooks that make referenceWith quantize each FP8 layer's input as its
// scheme says and, with kv, round K and V to e4m3 with the layer's scales as an FP8 KV cache stores them.
func fp8RefModel(t *testing.T, f *weights.Folder, kv []KVScale) (*randomModel, refHooks) {
	t.Helper()
	cfg := f.Config
	r := &randomModel{cfg: cfg, tensors: map[string]*weights.Tensor{}}
	inputScale := map[string]float32{}
	for name, shape := range weights.TensorShapes(cfg) {
		tn, err := f.Tensors.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if tn.DType != weights.DTypeF8E4M3 {
			r.tensors[name] = tn
			continue
		}
		module := strings.TrimSuffix(name, ".weight")
		lin, err := weights.ReadFP8Linear(cfg, f.Tensors.Get, module)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, len(lin.Weight.Data))
		for i, c := range lin.Weight.Data {
			v[i] = dtype.E4M3ToF32(c) * lin.Scales[i/shape[1]]
		}
		r.tensors[name] = &weights.Tensor{Name: name, DType: weights.DTypeF32, Shape: shape, Data: float32Bytes(v)}
		inputScale[module] = lin.InputScale
	}
	round := func(x []float64, s float32) {
		for i, v := range x {
			x[i] = float64(dtype.E4M3ToF32(dtype.F32ToE4M3Sat(float32(v)/s))) * float64(s)
		}
	}
	hooks := refHooks{input: func(module string, x []float64) []float64 {
		s, ok := inputScale[module]
		if !ok {
			return x
		}
		if s == 0 {
			var amax float32
			for _, v := range x {
				amax = max(amax, float32(math.Abs(float64(float32(v)))))
			}
			s = max(amax/448, float32(1.0/(448*512)))
		}
		out := slices.Clone(x)
		round(out, s)
		return out
	}}
	if kv != nil {
		hooks.kv = func(l int, k, v []float64) {
			round(k, kv[l].K)
			round(v, kv[l].V)
		}
	}
	return r, hooks
}

// runPrompts prefills prompts side by side in one step, then decodes steps greedy tokens for all of
// them together (greedyRun, argmax on the host), and returns every step's logits rows (per sequence)
// and the tokens each sequence has seen, for a reference to check.
func runPrompts(t *testing.T, m *Model, prompts [][]int32, steps int) (logits [][][]float32, seen [][]int32) {
	t.Helper()
	picks := greedyRun(t, newModelPager(m, newRand(5)), prompts, steps+1, func(_ int, s *Step) ([]int32, error) {
		out, err := m.Forward(s)
		if err != nil {
			return nil, err
		}
		logits = append(logits, out)
		return argmaxRows(out), nil
	})
	seen = make([][]int32, len(prompts))
	for i, pr := range prompts {
		seen[i] = slices.Concat(pr, picks[i][:steps]) // the last step's picks were never fed
	}
	return logits, seen
}

// TestFP8CheckpointsMatchReference loads FP8 checkpoints of every form gollm reads (compressed-tensors
// per channel with per-token activations; per tensor with static input scales and K/V scales, run with
// and without an FP8 KV cache; AutoFP8), runs prompts and greedy decoding on the CPU, and checks every
// logits row against the float64 reference forward pass given the checkpoint's meaning: weights
// dequantized, each FP8 layer's input rounded to e4m3 with its scale, K and V rounded with theirs.
// The two differ by float32 rounding (about 1e-6 here) unless an input element's float32 and float64
// values round to neighbouring e4m3 codes (one step is 1/16 of it), which would move a logit by about
// 1e-3: the tolerance allows one such element; anything wired wrongly (a per-tensor scale read per row,
// an unquantized layer, the LM head quantized, K and V stored unrounded) moves them by 1e-2 or more.
func TestFP8CheckpointsMatchReference(t *testing.T) {
	rng := newRand(8)
	prompts := [][]int32{randomTokens(rng, 19, 64), randomTokens(rng, 5, 64), randomTokens(rng, 1, 64)}
	for _, tc := range []struct {
		name string
		form weightstest.FP8Form
		kv   bool
	}{
		{"compressed-tensors dynamic", weightstest.FP8Dynamic, false},
		{"compressed-tensors static", weightstest.FP8Static, false},
		{"compressed-tensors static, FP8 KV", weightstest.FP8Static, true},
		{"AutoFP8", weightstest.FP8AutoFP8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			weightstest.WriteFP8(t, dir, fp8Config, 21, tc.form, weightstest.FP8Scales{Input: 0.012, K: 0.02, V: 0.006})
			f := openFolder(t, dir)
			opts := Options{NumBlocks: 32, BlockSize: 4}
			var kv []KVScale
			if tc.kv {
				opts.KVCacheDType = KVCacheFP8
				kv = []KVScale{{0.02, 0.006}, {0.02, 0.006}}
			}
			m, err := Load(f, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if tc.kv && !slices.Equal(m.Shape().KVScales, kv) {
				t.Fatalf("KV scales %v, want the checkpoint's %v", m.Shape().KVScales, kv)
			}
			r, hooks := fp8RefModel(t, f, kv)
			logits, seen := runPrompts(t, m, prompts, 6)
			var worst float64
			for i := range prompts {
				want := referenceWith(t, r, seen[i], hooks)
				for step, out := range logits {
					pos := len(prompts[i]) - 1 + step
					diff := maxAbsDiff(out[i], want[pos])
					worst = max(worst, diff)
					if diff > 1e-3 {
						t.Errorf("sequence %d position %d: max abs diff %g from the reference", i, pos, diff)
					}
				}
			}
			t.Logf("worst logit difference from the FP8 reference: %.3g", worst)
		})
	}
}

// TestQuantizationFP8EqualsCheckpoint loads a bfloat16 checkpoint with Options.Quantization fp8 and the
// FP8 checkpoint of the same weights that weightstest's own quantizer wrote (per channel, per-token
// activations, lm_head kept): every Linear layer's codes and scales agree, and so do the logits, bit for
// bit.
func TestQuantizationFP8EqualsCheckpoint(t *testing.T) {
	bfDir, fpDir := t.TempDir(), t.TempDir()
	weightstest.WriteLlamaBF16(t, bfDir, fp8Config, 33)
	weightstest.WriteFP8(t, fpDir, fp8Config, 33, weightstest.FP8Dynamic, weightstest.FP8Scales{})
	online, err := Load(openFolder(t, bfDir), Options{NumBlocks: 32, BlockSize: 4, Quantization: QuantizationFP8})
	if err != nil {
		t.Fatal(err)
	}
	defer online.Close()
	stored, err := Load(openFolder(t, fpDir), Options{NumBlocks: 32, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer stored.Close()
	checkSameFP8Weights(t, online, stored)
	rng := newRand(9)
	prompts := [][]int32{randomTokens(rng, 23, 64), randomTokens(rng, 2, 64)}
	a, _ := runPrompts(t, online, prompts, 4)
	b, _ := runPrompts(t, stored, prompts, 4)
	sameLogitBits(t, a, b, "quantized at load", "from the checkpoint")
}

// sameLogitBits fails t unless runPrompts' logits got and want are equal bit for bit; gotName and
// wantName say where each came from.
func sameLogitBits(t *testing.T, got, want [][][]float32, gotName, wantName string) {
	t.Helper()
	for step := range want {
		for i := range want[step] {
			for j := range want[step][i] {
				if math.Float32bits(got[step][i][j]) != math.Float32bits(want[step][i][j]) {
					t.Fatalf("step %d sequence %d logit %d: %v %s, %v %s", step, i, j, got[step][i][j], gotName, want[step][i][j], wantName)
				}
			}
		}
	}
}

// checkSameFP8Weights fails unless a and b hold the same FP8 layers (codes, scales, input scale) and
// keep the same layers (the LM head) in float.
func checkSameFP8Weights(t *testing.T, a, b *Model) {
	t.Helper()
	pairs := [][2]Weight{{a.lmHead, b.lmHead}}
	for l := range a.layers {
		x, y := &a.layers[l], &b.layers[l]
		pairs = append(pairs, [2]Weight{x.qkv, y.qkv}, [2]Weight{x.o, y.o}, [2]Weight{x.gateUp, y.gateUp}, [2]Weight{x.down, y.down})
	}
	fp8 := 0
	for i, p := range pairs {
		x, xok := p[0].Data.(*fp8Matrix)
		y, yok := p[1].Data.(*fp8Matrix)
		if xok != yok {
			t.Fatalf("matrix %d: FP8 %v and %v", i, xok, yok)
		}
		if !xok {
			continue
		}
		fp8++
		if !bytes.Equal(x.codes, y.codes) || !slices.Equal(x.scales, y.scales) || x.inputScale != y.inputScale {
			for j := range x.codes {
				if x.codes[j] != y.codes[j] {
					t.Fatalf("matrix %d: code %d is %#02x and %#02x", i, j, x.codes[j], y.codes[j])
				}
			}
			t.Fatalf("matrix %d: scales %v and %v", i, x.scales, y.scales)
		}
	}
	if fp8 != 4*len(a.layers) {
		t.Fatalf("%d FP8 matrices, want the %d of the layers (not the LM head)", fp8, 4*len(a.layers))
	}
}

// TestFP8KVCacheScales loads float checkpoints with an FP8 KV cache: without scales in the checkpoint
// every layer gets 1 and the loader warns; chunked prefill computes what a whole prefill does (a token's
// K and V round the same whichever step writes them); and the logits stay close to the float32 cache's.
func TestFP8KVCacheScales(t *testing.T) {
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, fp8Config, 5)
	f := openFolder(t, dir)
	var logs bytes.Buffer
	m, err := Load(f, Options{NumBlocks: 32, BlockSize: 4, KVCacheDType: "fp8_e4m3", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "using 1.0") || !strings.Contains(logs.String(), "layers=2") {
		t.Errorf("no warning about the missing scales: %q", logs.String())
	}
	for l, s := range m.Shape().KVScales {
		if s != (KVScale{1, 1}) {
			t.Errorf("layer %d: scales %+v, want 1", l, s)
		}
	}
	plain, err := Load(f, Options{NumBlocks: 32, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	prompt := randomTokens(newRand(3), 30, 64)
	p := newModelPager(m, newRand(1))
	whole, err := m.Forward(p.step(chunk{seq: 0, tokens: prompt}))
	if err != nil {
		t.Fatal(err)
	}
	var chunked [][]float32
	for start := 0; start < len(prompt); start += 7 {
		if chunked, err = m.Forward(p.step(chunk{seq: 1, tokens: prompt[start:min(start+7, len(prompt))]})); err != nil {
			t.Fatal(err)
		}
	}
	if diff := maxAbsDiff(chunked[0], float64s(whole[0])); diff > 1e-4 {
		t.Errorf("chunked and whole prefill differ by %g", diff)
	}
	ref, err := plain.Forward(newModelPager(plain, newRand(1)).step(chunk{seq: 0, tokens: prompt}))
	if err != nil {
		t.Fatal(err)
	}
	diff := maxAbsDiff(whole[0], float64s(ref[0]))
	t.Logf("FP8 KV (scale 1) against float32 KV: max abs logit difference %.3g", diff)
	if diff > 0.5 || argmax(whole[0]) != argmax(ref[0]) {
		t.Errorf("FP8 KV moved the logits by %g (argmax %d, float32 KV %d)", diff, argmax(whole[0]), argmax(ref[0]))
	}
}

// TestFP8KVOnlyCheckpoint loads a float checkpoint whose quantization_config has a kv_cache_scheme and
// no config groups: its Linear layers stay float (or are quantized at load with Options.Quantization
// fp8), and an FP8 KV cache takes its K and V scales.
func TestFP8KVOnlyCheckpoint(t *testing.T) {
	dir := t.TempDir()
	weightstest.WriteLlamaBF16(t, dir, fp8Config, 4)
	path := filepath.Join(dir, weights.ConfigFile)
	cfg := readJSON(t, path)
	cfg["quantization_config"] = map[string]any{"quant_method": "compressed-tensors", "format": "float-quantized",
		"kv_cache_scheme": map[string]any{"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true}}
	writeJSON(t, path, cfg)
	editTensors(t, dir, func(ts []*weights.Tensor) []*weights.Tensor {
		for l := range 2 {
			for i, name := range []string{"k_scale", "v_scale"} {
				v := float32(0.01 * float64(l+1) * float64(i+1))
				ts = append(ts, &weights.Tensor{Name: fmt.Sprintf("model.layers.%d.self_attn.%s", l, name), DType: weights.DTypeF32,
					Shape: []int{}, Data: float32Bytes([]float32{v})})
			}
		}
		return ts
	})
	f := openFolder(t, dir)
	plain, err := Load(f, Options{NumBlocks: 8, BlockSize: 4, KVCacheDType: KVCacheFP8})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, ok := plain.layers[0].qkv.Data.(*fp8Matrix); ok || UsesFP8Weights(f.Config, "") {
		t.Error("a checkpoint with KV scales only has FP8 layers")
	}
	if want := []KVScale{{0.01, 0.02}, {0.02, 0.04}}; !slices.Equal(plain.Shape().KVScales, want) {
		t.Errorf("KV scales %v, want %v", plain.Shape().KVScales, want)
	}
	online, err := Load(f, Options{NumBlocks: 8, BlockSize: 4, Quantization: QuantizationFP8})
	if err != nil {
		t.Fatal(err)
	}
	defer online.Close()
	if _, ok := online.layers[1].down.Data.(*fp8Matrix); !ok || !UsesFP8Weights(f.Config, QuantizationFP8) {
		t.Error("--quantization fp8 left the layers float")
	}
}

// TestFP8LoadErrors checks that what an FP8 checkpoint or the options get wrong is refused at load with
// an error naming it: a NaN code, layers run as one product that disagree on being quantized or on
// their input scheme, an unknown quantization or KV cache dtype.
func TestFP8LoadErrors(t *testing.T) {
	write := func(t *testing.T, form weightstest.FP8Form, edit func(dir string)) *weights.Folder {
		dir := t.TempDir()
		weightstest.WriteFP8(t, dir, fp8Config, 2, form, weightstest.FP8Scales{Input: 0.01, K: 1, V: 1})
		if edit != nil {
			edit(dir)
		}
		return openFolder(t, dir)
	}
	// rewrite applies f to config.json's quantization_config.
	rewrite := func(f func(q map[string]any)) func(dir string) {
		return func(dir string) {
			path := filepath.Join(dir, weights.ConfigFile)
			cfg := readJSON(t, path)
			f(cfg["quantization_config"].(map[string]any))
			writeJSON(t, path, cfg)
		}
	}
	for _, tc := range []struct {
		name string
		form weightstest.FP8Form
		edit func(dir string)
		opts Options
		is   error
		want []string
	}{
		{"NaN code", weightstest.FP8Dynamic, func(dir string) {
			patchTensor(t, dir, "model.layers.1.mlp.up_proj.weight", func(data []byte) { data[5] = 0xFF })
		}, Options{}, ErrNonFiniteWeight, []string{`"model.layers.1.mlp.up_proj.weight"`}},
		{"k_proj left out of q, k, v", weightstest.FP8Dynamic, func(dir string) {
			rewrite(func(q map[string]any) { q["ignore"] = []any{"lm_head", "re:.*k_proj"} })(dir)
			editTensors(t, dir, func(ts []*weights.Tensor) []*weights.Tensor { // k_proj in bfloat16
				var out []*weights.Tensor
				for _, x := range ts {
					switch {
					case strings.HasSuffix(x.Name, "k_proj.weight_scale"):
						continue
					case strings.HasSuffix(x.Name, "k_proj.weight"):
						x = encodeTensor(x.Name, weights.DTypeBF16, x.Shape, make([]float32, len(x.Data)))
					}
					out = append(out, x)
				}
				return out
			})
		}, Options{}, nil, []string{"model.layers.0.self_attn.q_proj is FP8 but model.layers.0.self_attn.k_proj is not"}},
		{"gate and up scale their input differently", weightstest.FP8Static, func(dir string) {
			rewrite(func(q map[string]any) {
				groups := q["config_groups"].(map[string]any)
				groups["group_1"] = map[string]any{"targets": []any{"re:.*gate_proj"}, "weights": map[string]any{
					"num_bits": 8, "type": "float", "strategy": "tensor"}, "input_activations": map[string]any{
					"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}
			})(dir)
			editTensors(t, dir, func(ts []*weights.Tensor) []*weights.Tensor {
				return slices.DeleteFunc(ts, func(x *weights.Tensor) bool { return strings.HasSuffix(x.Name, "gate_proj.input_scale") })
			})
		}, Options{}, nil, []string{"gate_proj and model.layers.0.mlp.up_proj share an input"}},
		{"quantization int8", weightstest.FP8Dynamic, nil, Options{Quantization: "int8"}, nil, []string{`quantization "int8"`}},
		{"KV e5m2", weightstest.FP8Dynamic, nil, Options{KVCacheDType: "fp8_e5m2"}, nil, []string{`"fp8_e5m2"`, "e4m3"}},
		{"KV bf16", weightstest.FP8Dynamic, nil, Options{KVCacheDType: "bf16"}, nil, []string{`kv cache dtype "bf16"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.NumBlocks, opts.BlockSize = 8, 4
			m, err := Load(write(t, tc.form, tc.edit), opts)
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %q", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestFP8KVPages reports how many KV pages fit a given memory with FP8 pages against float32 (the CPU's)
// and bfloat16 (a GPU's) ones, for Llama-3-8B's shape: four and two times as many.
func TestFP8KVPages(t *testing.T) {
	cfg, err := weights.LoadConfig(filepath.Join("..", "weights", "testdata", "config", "llama-3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	const memory = 16 << 30
	page := func(kv string, elem int) int64 {
		// One page of every layer's K and V: L × 2 × 16 tokens × Hkv × D × elem.
		return int64(cfg.NumHiddenLayers * 2 * 16 * cfg.NumKeyValueHeads * cfg.HeadDim * KVElementBytes(kv, elem))
	}
	f32Pages := memory / int64(KVBytesPerBlock(cfg, 16, ""))
	fp8Pages := memory / int64(KVBytesPerBlock(cfg, 16, KVCacheFP8))
	bf16Pages := memory / page("", 2)
	gpuFP8Pages := memory / page(KVCacheFP8, 2)
	t.Logf("Llama-3-8B, 16 GiB of KV, 16-token pages: CPU float32 %d pages (%d tokens), FP8 %d (%d tokens); GPU bfloat16 %d (%d tokens), FP8 %d (%d tokens)",
		f32Pages, 16*f32Pages, fp8Pages, 16*fp8Pages, bf16Pages, 16*bf16Pages, gpuFP8Pages, 16*gpuFP8Pages)
	if f32Pages != 4096 || fp8Pages != 4*f32Pages || gpuFP8Pages != 2*bf16Pages || gpuFP8Pages != fp8Pages {
		t.Errorf("pages: float32 %d, fp8 %d, bfloat16 %d, GPU fp8 %d", f32Pages, fp8Pages, bf16Pages, gpuFP8Pages)
	}
	if got, want := KVBytesPerBlock(cfg, 16, KVCacheFP8), 32*2*16*8*128; got != want {
		t.Errorf("FP8 page of Llama-3-8B: %d bytes, want %d", got, want)
	}
	if KVElementBytes("fp8_e4m3", 2) != 1 || KVElementBytes("auto", 2) != 2 || KVElementBytes("", 4) != 4 {
		t.Error("KVElementBytes")
	}
}

// TestCPUWeightBytesFP8 checks the CPU's weight memory with FP8 layers: a byte a parameter and a float32
// scale a row for the layers' matrices, the checkpoint's dtype for the rest.
func TestCPUWeightBytesFP8(t *testing.T) {
	cfg, err := weights.LoadConfig(filepath.Join("..", "weights", "testdata", "config", "llama-3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	bf16 := CPUWeightBytes(cfg, "")
	fp8 := CPUWeightBytes(cfg, QuantizationFP8)
	// Llama-3-8B: 8.03e9 parameters, of which the layers' matrices are 32 × 218,103,808; their rows
	// are 32 × (4096+1024+1024+4096+14336+14336+4096).
	layers := int64(32 * 218103808)
	rows := int64(32 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096))
	if got, want := bf16-fp8, layers-4*rows; got != want {
		t.Errorf("FP8 saves %d bytes, want %d", got, want)
	}
	t.Logf("Llama-3-8B on the CPU: bfloat16 %.2f GiB, FP8 %.2f GiB", float64(bf16)/(1<<30), float64(fp8)/(1<<30))
}

// patchTensor applies edit to the bytes of tensor name in dir's model.safetensors.
func patchTensor(t *testing.T, dir, name string, edit func(data []byte)) {
	t.Helper()
	editTensors(t, dir, func(tensors []*weights.Tensor) []*weights.Tensor {
		for _, x := range tensors {
			if x.Name == name {
				edit(x.Data)
			}
		}
		return tensors
	})
}

// editTensors rewrites dir's model.safetensors with the tensors edit returns (given copies of them).
func editTensors(t *testing.T, dir string, edit func(tensors []*weights.Tensor) []*weights.Tensor) {
	t.Helper()
	s, err := weights.OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tensors []*weights.Tensor
	for _, n := range s.Names() {
		x, err := s.Get(n)
		if err != nil {
			t.Fatal(err)
		}
		x.Data = slices.Clone(x.Data)
		tensors = append(tensors, x)
	}
	s.Close()
	if err := weights.WriteSafetensors(filepath.Join(dir, weights.SafetensorsFile), edit(tensors)); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFP8BlockCheckpoint loads a block-wise FP8 checkpoint (DeepSeek-V3's and Qwen3's form:
// weight_block_size, weight_scale_inv; weightstest's own quantizer, blocks of 8 rows × 16 columns with
// partial ones at the MLP's edge) and the float checkpoint of its dequantized weights (weightstest's own
// e4m3 table): the layers run dequantized, so the logits agree bit for bit, and at TP 2 within float
// tolerance. A scale missing, of the wrong shape, zero or NaN fails the load naming the tensor.
func TestFP8BlockCheckpoint(t *testing.T) {
	config := maps.Clone(fp8Config)
	config["intermediate_size"] = 40 // down_proj: 2½ blocks of 16 columns
	fpDir, refDir := t.TempDir(), t.TempDir()
	weightstest.WriteFP8(t, fpDir, config, 41, weightstest.FP8Block, weightstest.FP8Scales{})
	weightstest.WriteFP8Dequantized(t, refDir, config, 41, weightstest.FP8Block)
	f := openFolder(t, fpDir)
	if UsesFP8Weights(f.Config, "") {
		t.Error("UsesFP8Weights: block-wise layers run dequantized, not on the FP8 products")
	}
	rng := newRand(12)
	prompts := [][]int32{randomTokens(rng, 17, 64), randomTokens(rng, 3, 64)}
	run := func(f *weights.Folder, tp int) [][][]float32 {
		m, err := Load(f, Options{NumBlocks: 32, BlockSize: 4, TensorParallel: tp})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		logits, _ := runPrompts(t, m, prompts, 4)
		return logits
	}
	got, want := run(f, 1), run(openFolder(t, refDir), 1)
	sameLogitBits(t, got, want, "from the block-wise checkpoint", "from its dequantized weights")
	sharded := run(f, 2)
	for step := range want {
		for i := range want[step] {
			ref := make([]float64, len(want[step][i]))
			for j, v := range want[step][i] {
				ref[j] = float64(v)
			}
			if d := maxAbsDiff(sharded[step][i], ref); d > 1e-2 {
				t.Errorf("TP 2, step %d sequence %d: max abs diff %g from the whole model", step, i, d)
			}
		}
	}

	const scale = "model.layers.1.mlp.down_proj.weight_scale_inv"
	for _, tc := range []struct {
		name string
		edit func(dir string)
		want string
	}{
		{"missing", func(dir string) {
			editTensors(t, dir, func(ts []*weights.Tensor) []*weights.Tensor {
				return slices.DeleteFunc(ts, func(x *weights.Tensor) bool { return x.Name == scale })
			})
		}, scale},
		{"wrong shape", func(dir string) {
			editTensors(t, dir, func(ts []*weights.Tensor) []*weights.Tensor {
				for i, x := range ts {
					if x.Name == scale {
						ts[i] = encodeTensor(scale, weights.DTypeF32, []int{2, 2}, []float32{1, 1, 1, 1})
					}
				}
				return ts
			})
		}, scale},
		{"zero", func(dir string) {
			patchTensor(t, dir, scale, func(data []byte) { binary.LittleEndian.PutUint32(data[4:], 0) })
		}, scale},
		{"NaN", func(dir string) {
			patchTensor(t, dir, scale, func(data []byte) { binary.LittleEndian.PutUint32(data, math.Float32bits(float32(math.NaN()))) })
		}, scale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			weightstest.WriteFP8(t, dir, config, 41, weightstest.FP8Block, weightstest.FP8Scales{})
			tc.edit(dir)
			f, err := weights.Open(dir)
			if err == nil {
				_, err = Load(f, Options{NumBlocks: 32, BlockSize: 4, SkipWeightCheck: true})
				f.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestFP8RowShape: the quantizing kernels' register forms take rows of a multiple of 4 values up to the
// largest shape's 16384, each the first shape that holds it; others run the loop kernels.
func TestFP8RowShape(t *testing.T) {
	for _, tc := range []struct {
		cols, shape int
		ok          bool
	}{{4, 0, true}, {160, 0, true}, {1024, 0, true}, {1028, 1, true}, {4096, 2, true}, {8192, 3, true},
		{8196, 4, true}, {14336, 4, true}, {16384, 4, true}, {16388, 0, false}, {18944, 0, false}, {162, 0, false},
		{0, 0, false}, {-4, 0, false}} {
		shape, ok := fp8RowShape(tc.cols)
		if ok != tc.ok || ok && shape != tc.shape {
			t.Errorf("fp8RowShape(%d) = %d, %v; want %d, %v", tc.cols, shape, ok, tc.shape, tc.ok)
		}
		if ok && (tc.cols/4 > fp8RowShapes[shape].threads*fp8RowShapes[shape].groups ||
			shape > 0 && tc.cols/4 <= fp8RowShapes[shape-1].threads*fp8RowShapes[shape-1].groups) {
			t.Errorf("fp8RowShape(%d) = %d: not the first shape that holds the row", tc.cols, shape)
		}
	}
}

// TestFP8FusedForm: the quantizing producers run a register shape where one holds the row, staged where
// none does and the row fits the shared memory as float32, the loop kernels for rows of an odd width or
// too wide for both. The tuning forces either form where it can run.
func TestFP8FusedForm(t *testing.T) {
	const share = 227 << 10
	for _, tc := range []struct {
		cols, share, staged, want int
	}{
		{4096, share, 0, 2}, {8192, share, 0, 3}, {14336, share, 0, 4}, {16384, share, 0, 4},
		{16388, share, 0, fp8FormStaged}, {18944, share, 0, fp8FormStaged}, {28672, share, 0, fp8FormStaged},
		{162, share, 0, fp8FormLoop}, {18946, share, 0, fp8FormLoop}, // odd widths
		{18944, 4*18944 - 4, 0, fp8FormLoop}, {18944, 4 * 18944, 0, fp8FormStaged}, // the share
		{4096, share, 1, fp8FormStaged}, {162, share, 1, fp8FormLoop}, {18944, 4*18944 - 4, 1, fp8FormLoop}, // always
		{4096, share, -1, 2}, {14336, share, -1, 4}, {18944, share, -1, fp8FormLoop}, // never
	} {
		if got := fp8FusedForm(tc.cols, tc.share, tc.staged); got != tc.want {
			t.Errorf("fp8FusedForm(%d cols, share %d, tuning %d) = %d, want %d", tc.cols, tc.share, tc.staged, got, tc.want)
		}
	}
	// The SwiGLU over bfloat16 sums: staged past the decode steps' rows, unless the tuning says.
	for _, tc := range []struct{ rows, staged, want int }{
		{1, 0, 4}, {64, 0, 4}, {65, 0, fp8FormStaged}, {1024, 0, fp8FormStaged}, {1024, -1, 4}, {8, 1, fp8FormStaged},
	} {
		if got := fp8FusedForm(14336, share, fp8StagedIn16(tc.rows, tc.staged)); got != tc.want {
			t.Errorf("SwiGLU over bfloat16 sums, %d rows, tuning %d: form %d, want %d", tc.rows, tc.staged, got, tc.want)
		}
	}
}
