package weightstest

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// FP8Form is the kind of FP8 checkpoint WriteFP8 writes.
type FP8Form int

const (
	// FP8Dynamic is compressed-tensors' float-quantized form as llm-compressor's FP8_DYNAMIC scheme writes
	// it: weight scales per output channel ([N, 1]), activations scaled per token at run time, lm_head
	// ignored.
	FP8Dynamic FP8Form = iota
	// FP8Static is compressed-tensors' form with a scale per weight tensor ([]), a static input_scale per
	// layer, and a kv_cache_scheme with self_attn.k_scale and v_scale in every layer.
	FP8Static
	// FP8AutoFP8 is AutoFP8's form: quant_method fp8, activation_scheme dynamic, a scale per weight
	// tensor, ignored_layers lm_head.
	FP8AutoFP8
	// FP8Block is DeepSeek-V3's block-wise form: quant_method fp8, weight_block_size FP8Block (small,
	// so that a test model's matrices hold several blocks and partial ones at their edges), activations
	// dynamic, one scale per block in weight_scale_inv, the LM head kept in bfloat16 and not listed.
	FP8Block
)

// FP8BlockSize is the [rows, cols] of FP8Block's scale blocks: unequal, so that rows and columns
// cannot be confused.
var FP8BlockSize = [2]int{8, 16}

// FP8Scales are the static scales WriteFP8 writes for FP8Static: every layer's input_scale, and every
// layer's K and V cache scales.
type FP8Scales struct{ Input, K, V float32 }

// WriteFP8 writes into dir the checkpoint WriteLlamaBF16 writes for config and seed, with its Linear
// layers (all but the LM head) quantized to F8_E4M3 in form, and returns the parsed config of the
// unquantized checkpoint (weights.Open reads the folder's quantization_config). The
// quantizer is its own, written from the OCP definition and not from gollm's conversions, so that a
// model's quantization at load can be checked against it: a row's (or a tensor's) scale is
// max(max|w| / 448, 1/(448·512)) computed in float32 from the bfloat16 values, and each weight the
// nearest e4m3 value of w / scale (float32 division), ties to the even mantissa, saturating at ±448.
// Scales are F32; scales gives the static ones of FP8Static.
func WriteFP8(t testing.TB, dir string, config map[string]any, seed uint64, form FP8Form, scales FP8Scales) *weights.Config {
	t.Helper()
	cfg, written, _ := fp8Tensors(t, config, seed, form, scales)
	out := make(map[string]any, len(config)+1)
	for k, v := range withDType(config) {
		out[k] = v
	}
	out["quantization_config"] = fp8Config(form)
	writeFolder(t, dir, out, written)
	return cfg
}

// WriteFP8Dequantized writes into dir the float checkpoint that WriteFP8's checkpoint of the same
// arguments stands for: its Linear layers as F32 tensors of each code's e4m3 value (from the OCP
// definition) times its scale, computed in float32, and every other tensor as WriteFP8 writes it. A
// model of it is what a model of the FP8 checkpoint runs when it dequantizes at load.
func WriteFP8Dequantized(t testing.TB, dir string, config map[string]any, seed uint64, form FP8Form) {
	t.Helper()
	_, _, dequantized := fp8Tensors(t, config, seed, form, FP8Scales{})
	writeFolder(t, dir, withDType(config), dequantized)
}

// fp8Tensors returns WriteFP8's config and tensors, and the dequantized ones WriteFP8Dequantized
// writes.
func fp8Tensors(t testing.TB, config map[string]any, seed uint64, form FP8Form, scales FP8Scales) (*weights.Config, []*weights.Tensor, []*weights.Tensor) {
	config = withDType(config)
	cfg, tensors := llamaTensors(t, config, seed, nil)
	linear := map[string]bool{}
	for _, m := range cfg.LinearModules() {
		if m != "lm_head" {
			linear[m+".weight"] = true
		}
	}
	var written, dequantized []*weights.Tensor
	for _, x := range tensors {
		bf := toBF16(x)
		if !linear[x.Name] {
			written = append(written, bf)
			dequantized = append(dequantized, bf)
			continue
		}
		module := strings.TrimSuffix(x.Name, ".weight")
		rows, cols := x.Shape[0], x.Shape[1]
		if form == FP8Block {
			codes, s, scaleOf := quantizeE4M3Blocks(bf.Float32(), rows, cols, FP8BlockSize)
			written = append(written, &weights.Tensor{Name: x.Name, DType: weights.DTypeF8E4M3, Shape: x.Shape, Data: codes},
				f32Tensor(module+".weight_scale_inv", []int{ceilDiv(rows, FP8BlockSize[0]), ceilDiv(cols, FP8BlockSize[1])}, s))
			dequantized = append(dequantized, f32Tensor(x.Name, x.Shape, dequantizeE4M3(codes, cols, scaleOf)))
			continue
		}
		codes, s := quantizeE4M3(bf.Float32(), rows, cols, form == FP8Dynamic)
		written = append(written, &weights.Tensor{Name: x.Name, DType: weights.DTypeF8E4M3, Shape: x.Shape, Data: codes})
		dequantized = append(dequantized, f32Tensor(x.Name, x.Shape, dequantizeE4M3(codes, cols, func(n, _ int) float32 {
			if form == FP8Dynamic {
				return s[n]
			}
			return s[0]
		})))
		if form == FP8Dynamic {
			written = append(written, f32Tensor(module+".weight_scale", []int{x.Shape[0], 1}, s))
		} else {
			written = append(written, f32Tensor(module+".weight_scale", []int{}, s))
		}
		if form == FP8Static {
			written = append(written, f32Tensor(module+".input_scale", []int{}, []float32{scales.Input}))
		}
	}
	if form == FP8Static {
		for l := range cfg.NumHiddenLayers {
			names := cfg.KVScaleNames(l)[0]
			written = append(written, f32Tensor(names[0], []int{}, []float32{scales.K}), f32Tensor(names[1], []int{}, []float32{scales.V}))
		}
	}
	return cfg, written, dequantized
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// quantizeE4M3Blocks quantizes the matrix v [rows][cols] with a scale per block of block[0] rows ×
// block[1] columns (the edge blocks partial), each max(max|w| / 448, 1/(448·512)) over its block,
// returning its codes, the scales row-major over the blocks, and the scale of element (n, k).
func quantizeE4M3Blocks(v []float32, rows, cols int, block [2]int) ([]byte, []float32, func(n, k int) float32) {
	br, bc := ceilDiv(rows, block[0]), ceilDiv(cols, block[1])
	scales := make([]float32, br*bc)
	for n := range rows {
		for k := range cols {
			i := (n/block[0])*bc + k/block[1]
			scales[i] = max(scales[i], float32(math.Abs(float64(v[n*cols+k]))))
		}
	}
	for i := range scales {
		scales[i] = max(scales[i]/448, float32(1.0/(448*512)))
	}
	scaleOf := func(n, k int) float32 { return scales[(n/block[0])*bc+k/block[1]] }
	codes := make([]byte, len(v))
	for i, f := range v {
		codes[i] = nearestE4M3(f / scaleOf(i/cols, i%cols))
	}
	return codes, scales, scaleOf
}

// dequantizeE4M3 returns the values of codes [rows][cols], each its e4m3 value times scale(n, k) in
// float32.
func dequantizeE4M3(codes []byte, cols int, scale func(n, k int) float32) []float32 {
	value := map[byte]float64{}
	for _, e := range e4m3Grid {
		value[e.code], value[e.code|0x80] = e.v, -e.v
	}
	out := make([]float32, len(codes))
	for i, c := range codes {
		out[i] = float32(value[c]) * scale(i/cols, i%cols)
	}
	return out
}

// fp8Config is the quantization_config of form.
func fp8Config(form FP8Form) map[string]any {
	args := func(strategy string, dynamic bool) map[string]any {
		return map[string]any{"num_bits": 8, "type": "float", "symmetric": true, "strategy": strategy, "dynamic": dynamic,
			"group_size": nil, "block_structure": nil, "actorder": nil, "observer": nil, "observer_kwargs": map[string]any{}}
	}
	switch form {
	case FP8AutoFP8:
		return map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": []string{"lm_head"}}
	case FP8Block:
		return map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
			"weight_block_size": []int{FP8BlockSize[0], FP8BlockSize[1]}}
	case FP8Static:
		return map[string]any{"quant_method": "compressed-tensors", "format": "float-quantized",
			"quantization_status": "compressed", "ignore": []string{"lm_head"}, "kv_cache_scheme": args("tensor", false),
			"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"},
				"weights": args("tensor", false), "input_activations": args("tensor", false)}}}
	}
	return map[string]any{"quant_method": "compressed-tensors", "format": "float-quantized",
		"quantization_status": "compressed", "ignore": []string{"lm_head"}, "kv_cache_scheme": nil,
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"},
			"weights": args("channel", false), "input_activations": args("token", true)}}}
}

// e4m3Grid lists the non-negative finite e4m3 values in increasing order with their codes, from the
// OCP definition: exponent field e, mantissa m, (1 + m/8)·2^(e-7), or m/8·2^-6 for e = 0; S.1111.111 is
// NaN.
var e4m3Grid = func() (g []struct {
	v    float64
	code byte
}) {
	for code := range 0x7F {
		e, m := code>>3, float64(code&7)
		v := math.Ldexp(1+m/8, e-7)
		if e == 0 {
			v = math.Ldexp(m/8, -6)
		}
		g = append(g, struct {
			v    float64
			code byte
		}{v, byte(code)})
	}
	return g
}()

// nearestE4M3 returns the code of the e4m3 value nearest x, ties to the even code, saturating at ±448.
func nearestE4M3(x float32) byte {
	a := math.Abs(float64(x))
	var sign byte
	if math.Signbit(float64(x)) {
		sign = 0x80
	}
	i, _ := slices.BinarySearchFunc(e4m3Grid, a, func(e struct {
		v    float64
		code byte
	}, a float64) int {
		switch {
		case e.v < a:
			return -1
		case e.v > a:
			return 1
		}
		return 0
	})
	switch {
	case i == len(e4m3Grid):
		return sign | e4m3Grid[len(e4m3Grid)-1].code
	case e4m3Grid[i].v == a || i == 0:
		return sign | e4m3Grid[i].code
	}
	lo, hi := e4m3Grid[i-1], e4m3Grid[i]
	switch {
	case a-lo.v < hi.v-a:
		return sign | lo.code
	case a-lo.v > hi.v-a:
		return sign | hi.code
	case lo.code%2 == 0:
		return sign | lo.code
	}
	return sign | hi.code
}

// quantizeE4M3 quantizes the matrix v [rows][cols] with a scale per row (perRow) or one for the whole
// matrix, returning its codes and scales.
func quantizeE4M3(v []float32, rows, cols int, perRow bool) ([]byte, []float32) {
	floor := float32(1.0 / (448 * 512))
	amax := func(x []float32) float32 {
		var m float32
		for _, f := range x {
			m = max(m, float32(math.Abs(float64(f))))
		}
		return m
	}
	var scales []float32
	if perRow {
		for r := range rows {
			scales = append(scales, max(amax(v[r*cols:(r+1)*cols])/448, floor))
		}
	} else {
		scales = []float32{max(amax(v)/448, floor)}
	}
	codes := make([]byte, len(v))
	for i, f := range v {
		s := scales[0]
		if perRow {
			s = scales[i/cols]
		}
		codes[i] = nearestE4M3(f / s)
	}
	return codes, scales
}

// F32Bytes returns v as little-endian float32 bytes (for tests that write scale tensors of their own).
func F32Bytes(v []float32) []byte {
	buf := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
	}
	return buf
}
