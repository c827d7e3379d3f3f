package dtype

import (
	"math"
)

// OCP FP8 E4M3 (the "E4M3FN" of PyTorch's float8_e4m3fn and safetensors' F8_E4M3): one sign bit, four
// exponent bits with bias 7 and three mantissa bits. Exponent field 0 holds the subnormals
// ±m/8 · 2^-6; fields 1 to 15 hold ±(1 + m/8) · 2^(e-7), except that S.1111.111 (0x7F and 0xFF) is NaN,
// so that the largest finite value is 1.75 · 2^8 = 448 and there are no infinities.
//
// Narrowing a float32 rounds to nearest, ties to even, in one of two modes that differ only beyond 448:
//
//   - F32ToE4M3Sat saturates: every value of magnitude above 448, infinities included, becomes ±448. This
//     is what the quantizers whose output gollm must reproduce compute: compressed-tensors and
//     llm-compressor clamp to ±448 before the cast, and vLLM's quantization kernels convert with
//     __NV_SATFINITE. The model's FP8 arithmetic uses it throughout.
//   - F32ToE4M3 does not saturate (OCP's non-saturating mode, which is PyTorch's x.to(float8_e4m3fn)
//     without a clamp): magnitudes that round beyond 448 (above 464, the midpoint between 448 and the
//     next step 480) and infinities become NaN.
//
// Both keep a NaN a NaN, sign included: an activation that has gone NaN stays visible downstream
// instead of turning into a plausible ±448 (vLLM's clamp with fminf/fmaxf would turn it into 448).

// E4M3Max is the largest finite e4m3 value.
const E4M3Max = 448

// Bit patterns of e4m3 values the conversions return.
const (
	e4m3NaN = 0x7F // S.1111.111
	e4m3Max = 0x7E // S.1111.110: 448
)

// e4m3Values holds the float32 value of every e4m3 bit pattern.
var e4m3Values = func() (t [256]float32) {
	for b := range 256 {
		sign := float32(1)
		if b&0x80 != 0 {
			sign = -1
		}
		exp, mant := b>>3&0xF, b&7
		switch {
		case exp == 0xF && mant == 7:
			t[b] = float32(math.NaN())
			if sign < 0 {
				t[b] = -t[b]
			}
		case exp == 0:
			t[b] = sign * float32(math.Ldexp(float64(mant), -9))
		default:
			t[b] = sign * float32(math.Ldexp(float64(8+mant), exp-10))
		}
	}
	return t
}()

// E4M3ToF32 widens the e4m3 value with bit pattern b to float32 (exact; 0x7F and 0xFF are NaN).
func E4M3ToF32(b uint8) float32 { return e4m3Values[b] }

// F32ToE4M3Sat narrows f to the nearest e4m3 value, ties to even, saturating: magnitudes beyond 448 and
// infinities become ±448; a NaN stays NaN.
func F32ToE4M3Sat(f float32) uint8 {
	code, sign := e4m3Round(f)
	if code > e4m3Max && code != e4m3NaN|0x100 {
		code = e4m3Max
	}
	return uint8(code&0x7F) | sign
}

// F32ToE4M3 narrows f to the nearest e4m3 value, ties to even, without saturating (PyTorch's
// x.to(torch.float8_e4m3fn)): magnitudes that round beyond 448 (above 464) and infinities become NaN, and
// so does a NaN.
func F32ToE4M3(f float32) uint8 {
	code, sign := e4m3Round(f)
	if code > e4m3Max {
		code = e4m3NaN
	}
	return uint8(code) | sign
}

// e4m3Round rounds |f| to e4m3's grid extended past 448 and returns the magnitude's code and the sign
// bit: a code above e4m3Max means f rounds beyond 448 (0x7F for a finite value that rounds to 480 or
// more, 0x80 for an infinity) and e4m3NaN|0x100 means f is NaN.
func e4m3Round(f float32) (code uint32, sign uint8) {
	bits := math.Float32bits(f)
	sign = uint8(bits>>24) & 0x80
	abs := bits & 0x7FFFFFFF
	switch {
	case abs > 0x7F800000: // NaN
		return e4m3NaN | 0x100, sign
	case abs == 0x7F800000: // infinity
		return 0x80, sign
	case abs >= 0x43F00000: // 480 and up: beyond any rounding to 448
		return e4m3NaN, sign
	case abs < 0x3C800000: // below 2^-6, the smallest normal: a multiple of 2^-9, rounded
		// Exact in float64; the result is 0 to 8, and 8 is the code of 2^-6.
		return uint32(math.RoundToEven(float64(math.Float32frombits(abs)) * 512)), sign
	}
	// A normal value: keep the float32 exponent and the top three mantissa bits, rounding the other 20
	// to nearest even; a carry out of the mantissa increments the exponent as it should. The float32
	// exponent bias is 127, e4m3's 7: the code is the rounded bits >> 20 less 120 << 3.
	rounded := abs + 0x7FFFF + (abs>>20)&1
	return rounded>>20 - 120<<3, sign
}

// DecodeE4M3 widens the e4m3 bytes src into dst, each multiplied by scale (1 gives the values
// themselves): dst[i] = E4M3ToF32(src[i]) · scale in float32. It panics unless len(src) == len(dst).
func DecodeE4M3(dst []float32, src []byte, scale float32) {
	checkLengths("DecodeE4M3", len(dst), len(src), 1)
	for i, b := range src {
		dst[i] = e4m3Values[b] * scale
	}
}

// EncodeE4M3Sat writes each src[i] / scale, rounded by F32ToE4M3Sat, into dst (the division in float32,
// as a quantizer divides by its scale). It panics unless len(src) == len(dst).
func EncodeE4M3Sat(dst []byte, src []float32, scale float32) {
	checkLengths("EncodeE4M3Sat", len(src), len(dst), 1)
	for i, f := range src {
		dst[i] = F32ToE4M3Sat(f / scale)
	}
}
