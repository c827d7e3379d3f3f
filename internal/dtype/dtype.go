// Package dtype converts between float32 and the narrower floating-point formats that model weights,
// activations and KV caches are stored in (bfloat16, IEEE 754 binary16 and OCP FP8 E4M3), one value at
// a time and in bulk from little-endian bytes.
//
// It owns the numerics of those conversions and nothing else: it knows no tensors, files or devices.
// float32 → bfloat16 rounds to nearest, ties to even, and keeps NaN a NaN; binary16 conversions use
// github.com/x448/float16, which rounds the same way. float32 → e4m3 rounds to nearest, ties to even,
// saturating at ±448 (F32ToE4M3Sat, what quantizers compute) or not (F32ToE4M3, PyTorch's cast); see
// e4m3.go.
package dtype

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"
)

// BF16ToF32 widens the bfloat16 value with bit pattern b to float32. The conversion is exact: a
// bfloat16 is the upper half of a float32.
func BF16ToF32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F32ToBF16 narrows f to the nearest bfloat16, ties to even, and returns its bit pattern. Values beyond
// the largest finite bfloat16 round to infinity as IEEE rounding prescribes; a NaN stays a NaN (quiet,
// with its sign kept) even when its payload lies only in the discarded low bits.
func F32ToBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 { // NaN: truncation could turn it into an infinity.
		return uint16(bits>>16) | 0x0040
	}
	// Adding 0x7fff rounds up when the discarded half exceeds one half; the kept lowest bit breaks ties
	// toward even. A carry out of the mantissa correctly increments the exponent (up to infinity).
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// F16ToF32 widens the IEEE binary16 value with bit pattern h to float32 (exact).
func F16ToF32(h uint16) float32 {
	return float16.Frombits(h).Float32()
}

// F32ToF16 narrows f to the nearest IEEE binary16, ties to even, and returns its bit pattern.
func F32ToF16(f float32) uint16 {
	return uint16(float16.Fromfloat32(f))
}

// checkLengths panics when dst and src do not describe the same number of elements; a mismatch is a
// programmer error in the caller, not a data error.
func checkLengths(op string, dstLen, srcBytes, elemSize int) {
	if srcBytes != dstLen*elemSize {
		panic(fmt.Sprintf("dtype: %s: %d bytes for %d elements of %d bytes", op, srcBytes, dstLen, elemSize))
	}
}

// DecodeBF16 converts little-endian bfloat16 values in src to float32 in dst.
// It panics unless len(src) == 2*len(dst).
func DecodeBF16(dst []float32, src []byte) {
	checkLengths("DecodeBF16", len(dst), len(src), 2)
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

// DecodeF16 converts little-endian IEEE binary16 values in src to float32 in dst.
// It panics unless len(src) == 2*len(dst).
func DecodeF16(dst []float32, src []byte) {
	checkLengths("DecodeF16", len(dst), len(src), 2)
	for i := range dst {
		dst[i] = float16.Frombits(binary.LittleEndian.Uint16(src[2*i:])).Float32()
	}
}

// DecodeF32 converts little-endian float32 values in src to dst.
// It panics unless len(src) == 4*len(dst).
func DecodeF32(dst []float32, src []byte) {
	checkLengths("DecodeF32", len(dst), len(src), 4)
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// EncodeBF16 writes src as little-endian bfloat16 values (rounded to nearest, ties to even) into dst.
// It panics unless len(dst) == 2*len(src).
func EncodeBF16(dst []byte, src []float32) {
	checkLengths("EncodeBF16", len(src), len(dst), 2)
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(f))
	}
}

// EncodeF16 writes src as little-endian IEEE binary16 values (rounded to nearest, ties to even) into
// dst. It panics unless len(dst) == 2*len(src).
func EncodeF16(dst []byte, src []float32) {
	checkLengths("EncodeF16", len(src), len(dst), 2)
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(f))
	}
}

// EncodeF32 writes src as little-endian float32 values into dst.
// It panics unless len(dst) == 4*len(src).
func EncodeF32(dst []byte, src []float32) {
	checkLengths("EncodeF32", len(src), len(dst), 4)
	for i, f := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}
