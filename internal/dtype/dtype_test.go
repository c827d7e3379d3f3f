package dtype

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// format describes a binary floating-point format by its field widths, so that the tests can decode
// and round with arithmetic of their own instead of trusting the code under test.
type format struct {
	name      string
	expBits   int
	mantBits  int
	toF32     func(uint16) float32
	fromF32   func(float32) uint16
	maxFinite uint16 // bit pattern of the largest finite positive value
}

var formats = []format{
	{"bf16", 8, 7, BF16ToF32, F32ToBF16, 0x7f7f},
	{"f16", 5, 10, F16ToF32, F32ToF16, 0x7bff},
}

// value decodes pattern b of format f in float64 from its sign, exponent and mantissa fields. An
// infinity decodes to the power of two just past the largest finite value when pastMax is set: that
// is the point IEEE rounding treats as the next representable value when deciding overflow.
func (f format) value(b uint16, pastMax bool) float64 {
	sign := 1.0
	if b>>(f.expBits+f.mantBits)&1 == 1 {
		sign = -1
	}
	exp := int(b>>f.mantBits) & (1<<f.expBits - 1)
	mant := float64(int(b) & (1<<f.mantBits - 1))
	bias := 1<<(f.expBits-1) - 1
	switch exp {
	case 0:
		return sign * math.Ldexp(mant, 1-bias-f.mantBits)
	case 1<<f.expBits - 1:
		if mant != 0 {
			return math.NaN()
		}
		if pastMax {
			return sign * math.Ldexp(1, bias+1)
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1+mant/math.Ldexp(1, f.mantBits), exp-bias)
}

func (f format) isNaN(b uint16) bool {
	exp := int(b>>f.mantBits) & (1<<f.expBits - 1)
	return exp == 1<<f.expBits-1 && int(b)&(1<<f.mantBits-1) != 0
}

// roundRef rounds the finite x to format f, to nearest with ties to even, by searching the ordered
// positive patterns: the reference for fromF32.
func (f format) roundRef(x float32) uint16 {
	ax := math.Abs(float64(x))
	var signBit uint16
	if math.Signbit(float64(x)) {
		signBit = 1 << (f.expBits + f.mantBits)
	}
	inf := f.maxFinite + 1
	// Largest pattern lo in [0, inf] with value(lo) <= ax.
	lo, hi := uint16(0), inf
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if f.value(mid, true) <= ax {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == inf {
		return signBit | inf
	}
	below, above := ax-f.value(lo, true), f.value(lo+1, true)-ax
	switch {
	case below < above:
		return signBit | lo
	case above < below:
		return signBit | (lo + 1)
	case lo%2 == 0:
		return signBit | lo
	}
	return signBit | (lo + 1)
}

// TestWidenExhaustive checks every 16-bit pattern of both formats against the field-wise decoding,
// and that narrowing the widened value gives the pattern back (NaN stays NaN).
func TestWidenExhaustive(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			for i := range 1 << 16 {
				b := uint16(i)
				got := f.toF32(b)
				if f.isNaN(b) {
					if !math.IsNaN(float64(got)) {
						t.Fatalf("%#04x: widened to %v, want NaN", b, got)
					}
					if back := f.fromF32(got); !f.isNaN(back) {
						t.Fatalf("%#04x: NaN round-trips to %#04x", b, back)
					}
					if math.Signbit(float64(got)) != (b>>15 == 1) {
						t.Fatalf("%#04x: NaN lost its sign", b)
					}
					continue
				}
				if want := f.value(b, false); float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
					t.Fatalf("%#04x: widened to %v, want %v", b, got, want)
				}
				if back := f.fromF32(got); back != b {
					t.Fatalf("%#04x: round-trips to %#04x", b, back)
				}
			}
		})
	}
}

// TestNarrowTies checks rounding at and around every midpoint between neighbouring values of each
// format (all exponents, subnormals and the overflow boundary included) against roundRef.
func TestNarrowTies(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			checked := 0
			for i := range int(f.maxFinite) + 1 {
				for _, sign := range []float64{1, -1} {
					lo := f.value(uint16(i), true)
					hi := f.value(uint16(i+1), true)
					mid := float32(sign * (lo + hi) / 2)
					if float64(mid) != sign*(lo+hi)/2 {
						t.Fatalf("midpoint of %#04x not exact in float32", i)
					}
					for _, x := range []float32{
						mid,
						math.Nextafter32(mid, 0),
						math.Nextafter32(mid, float32(math.Inf(int(sign)))),
						float32(sign * lo),
					} {
						if got, want := f.fromF32(x), f.roundRef(x); got != want {
							t.Fatalf("%v (%#08x): got %#04x, want %#04x", x, math.Float32bits(x), got, want)
						}
						checked++
					}
				}
			}
			t.Logf("%d values checked", checked)
		})
	}
}

// TestNarrowRandom checks rounding of random float32 values, biased toward each format's range.
func TestNarrowRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			for range 1 << 18 {
				var x float32
				if f.name == "f16" {
					x = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(45)-28))
				} else {
					x = math.Float32frombits(rng.Uint32())
				}
				if math.IsNaN(float64(x)) {
					if !f.isNaN(f.fromF32(x)) {
						t.Fatalf("NaN %#08x narrowed to a number", math.Float32bits(x))
					}
					continue
				}
				if math.IsInf(float64(x), 0) {
					continue
				}
				if got, want := f.fromF32(x), f.roundRef(x); got != want {
					t.Fatalf("%v (%#08x): got %#04x, want %#04x", x, math.Float32bits(x), got, want)
				}
			}
		})
	}
}

// TestBF16Explicit pins down ties, overflow, infinities and NaNs with hand-computed expectations.
func TestBF16Explicit(t *testing.T) {
	tests := []struct {
		name string
		in   uint32
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"tie rounds down to even", 0x3f808000, 0x3f80},
		{"tie rounds up to even", 0x3f818000, 0x3f82},
		{"just above tie rounds up", 0x3f808001, 0x3f81},
		{"just below tie rounds down", 0x3f817fff, 0x3f81},
		{"negative tie to even", 0xbf808000, 0xbf80},
		{"carry into exponent", 0x3fffffff, 0x4000},
		{"largest finite stays", 0x7f7f7fff, 0x7f7f},
		{"tie at the top overflows to inf", 0x7f7f8000, 0x7f80},
		{"negative overflow", 0xff7fc000, 0xff80},
		{"subnormal tie to even zero", 0x00008000, 0x0000},
		{"subnormal tie up to even", 0x00018000, 0x0002},
		{"negative zero", 0x80000000, 0x8000},
		{"inf", 0x7f800000, 0x7f80},
		{"minus inf", 0xff800000, 0xff80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := F32ToBF16(math.Float32frombits(tc.in)); got != tc.want {
				t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
	nans := []uint32{0x7f800001, 0x7fc00000, 0xff800001, 0x7f80ffff, 0x7fffffff, 0xffc00001}
	for _, n := range nans {
		got := F32ToBF16(math.Float32frombits(n))
		if got&0x7f80 != 0x7f80 || got&0x7f == 0 {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not a NaN", n, got)
		}
		if got>>15 != uint16(n>>31) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x lost the sign", n, got)
		}
	}
}

// TestF16Explicit pins down binary16 ties and overflow with hand-computed expectations.
func TestF16Explicit(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3c00},
		{"tie 1+2^-11 rounds down to even", 1 + 1.0/2048, 0x3c00},
		{"tie 1+3*2^-11 rounds up to even", 1 + 3.0/2048, 0x3c02},
		{"largest finite", 65504, 0x7bff},
		{"below the overflow tie", 65519.99, 0x7bff},
		{"overflow tie rounds to inf", 65520, 0x7c00},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"half the smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"three halves of the smallest subnormal ties to two", 0x3p-25, 0x0002},
		{"negative", -2, 0xc000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := F32ToF16(tc.in); got != tc.want {
				t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
}

// TestBulk checks that the bulk codecs agree with the scalar conversions on little-endian bytes.
func TestBulk(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 1031
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * 100)
	}
	src[0], src[1] = float32(math.Inf(-1)), 0

	t.Run("f32", func(t *testing.T) {
		buf := make([]byte, 4*n)
		EncodeF32(buf, src)
		for i, v := range src {
			if math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])) != v {
				t.Fatalf("element %d not little-endian", i)
			}
		}
		got := make([]float32, n)
		DecodeF32(got, buf)
		for i := range got {
			if got[i] != src[i] {
				t.Fatalf("element %d: %v, want %v", i, got[i], src[i])
			}
		}
	})
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			buf := make([]byte, 2*n)
			got := make([]float32, n)
			if f.name == "bf16" {
				EncodeBF16(buf, src)
				DecodeBF16(got, buf)
			} else {
				EncodeF16(buf, src)
				DecodeF16(got, buf)
			}
			for i, v := range src {
				b := binary.LittleEndian.Uint16(buf[2*i:])
				if b != f.fromF32(v) {
					t.Fatalf("element %d: encoded %#04x, want %#04x", i, b, f.fromF32(v))
				}
				if got[i] != f.toF32(b) {
					t.Fatalf("element %d: decoded %v, want %v", i, got[i], f.toF32(b))
				}
			}
		})
	}
}

func TestBulkLengthMismatchPanics(t *testing.T) {
	tests := []struct {
		name string
		call func()
	}{
		{"DecodeBF16", func() { DecodeBF16(make([]float32, 2), make([]byte, 3)) }},
		{"DecodeF16", func() { DecodeF16(make([]float32, 2), make([]byte, 5)) }},
		{"DecodeF32", func() { DecodeF32(make([]float32, 2), make([]byte, 4)) }},
		{"EncodeBF16", func() { EncodeBF16(make([]byte, 3), make([]float32, 2)) }},
		{"EncodeF16", func() { EncodeF16(make([]byte, 2), make([]float32, 2)) }},
		{"EncodeF32", func() { EncodeF32(make([]byte, 9), make([]float32, 2)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.call()
		})
	}
}

func BenchmarkDecodeBF16(b *testing.B) {
	const n = 1 << 20
	src := make([]byte, 2*n)
	dst := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		DecodeBF16(dst, src)
	}
}

func BenchmarkDecodeF16(b *testing.B) {
	const n = 1 << 20
	src := make([]byte, 2*n)
	dst := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		DecodeF16(dst, src)
	}
}
