package dtype

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ocpE4M3 is the value of e4m3 bit pattern b by the OCP 8-bit floating point specification (v1.0,
// E4M3): sign s = b[7], exponent field E = b[6:3], mantissa field M = b[2:0], bias 7;
// E = 0 is subnormal, (-1)^s · 2^(1-7) · (0 + M/8); otherwise (-1)^s · 2^(E-7) · (1 + M/8); the one
// exception is E = 15, M = 7 (S.1111.111), which is NaN. There are no infinities. The second result
// says whether b is NaN.
func ocpE4M3(b uint8) (float64, bool) {
	s, e, m := int(b>>7), int(b>>3)&15, float64(b&7)
	if e == 15 && m == 7 {
		return math.NaN(), true
	}
	sign := 1.0
	if s == 1 {
		sign = -1
	}
	if e == 0 {
		return sign * math.Pow(2, 1-7) * (m / 8), false
	}
	return sign * math.Pow(2, float64(e-7)) * (1 + m/8), false
}

// ocpFinite lists the non-negative finite e4m3 patterns in increasing order of value (0x00 to 0x7E).
func ocpFinite() []uint8 {
	var codes []uint8
	for b := range 0x80 {
		if _, nan := ocpE4M3(uint8(b)); !nan {
			codes = append(codes, uint8(b))
		}
	}
	slices.SortFunc(codes, func(a, b uint8) int {
		va, _ := ocpE4M3(a)
		vb, _ := ocpE4M3(b)
		switch {
		case va < vb:
			return -1
		case va > vb:
			return 1
		}
		return 0
	})
	return codes
}

// roundE4M3Ref rounds x to e4m3 by the definition, with no arithmetic shared with the code under test:
// the nearest of the finite values, ties to the one with an even mantissa; beyond 448 the value
// saturates to 448 (sat) or, when it is nearer 480 than 448 (or ties and 480's mantissa 111 is odd),
// overflows to NaN. It returns the pattern, or 0xFF for "NaN" without a sign (the caller checks NaNs
// by their exponent and mantissa bits).
func roundE4M3Ref(x float64, sat bool) uint8 {
	if math.IsNaN(x) {
		return 0xFF
	}
	var sign uint8
	if math.Signbit(x) {
		sign = 0x80
	}
	a := math.Abs(x)
	if math.IsInf(a, 1) {
		if sat {
			return sign | 0x7E
		}
		return 0xFF
	}
	codes := ocpFinite()
	best := codes[0]
	bestDist := math.Inf(1)
	for _, c := range codes {
		v, _ := ocpE4M3(c)
		d := math.Abs(v - a)
		if d < bestDist || (d == bestDist && c&1 == 0) {
			best, bestDist = c, d
		}
	}
	if a > E4M3Max {
		// The grid continues past 448 with 480 (S.1111.111's place): a tie at 464 goes to 448's even
		// mantissa 110.
		if !sat && a-448 > 480-a {
			return 0xFF
		}
		return sign | 0x7E
	}
	return sign | best
}

func isE4M3NaN(b uint8) bool { return b&0x7F == 0x7F }

// TestE4M3AllCodes widens all 256 patterns and checks them against the OCP definition: ±0, the
// subnormals, 448 at the top, NaN at 0x7F and 0xFF only; and that narrowing each finite value in either
// mode gives its pattern back.
func TestE4M3AllCodes(t *testing.T) {
	nans := 0
	for i := range 256 {
		b := uint8(i)
		want, nan := ocpE4M3(b)
		got := E4M3ToF32(b)
		if nan {
			nans++
			if !math.IsNaN(float64(got)) {
				t.Errorf("%#02x: widened to %v, want NaN", b, got)
			}
			if math.Signbit(float64(got)) != (b&0x80 != 0) {
				t.Errorf("%#02x: NaN lost its sign", b)
			}
			for _, f := range []func(float32) uint8{F32ToE4M3, F32ToE4M3Sat} {
				if back := f(got); back != b {
					t.Errorf("%#02x: NaN narrows to %#02x", b, back)
				}
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Errorf("%#02x: widened to %v, want %v", b, got, want)
		}
		if back := F32ToE4M3(got); back != b {
			t.Errorf("%#02x (%v): F32ToE4M3 gives %#02x", b, got, back)
		}
		if back := F32ToE4M3Sat(got); back != b {
			t.Errorf("%#02x (%v): F32ToE4M3Sat gives %#02x", b, got, back)
		}
	}
	if nans != 2 {
		t.Errorf("%d NaN patterns, want 2 (0x7F, 0xFF)", nans)
	}
	for _, c := range []struct {
		b    uint8
		want float64
	}{
		{0x00, 0}, {0x01, 0x1p-9}, {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6}, {0x38, 1}, {0x7E, 448},
		{0xFE, -448}, {0x80, math.Copysign(0, -1)},
	} {
		if got := E4M3ToF32(c.b); float64(got) != c.want || math.Signbit(float64(got)) != math.Signbit(c.want) {
			t.Errorf("%#02x: %v, want %v", c.b, got, c.want)
		}
	}
}

// TestE4M3Ties checks rounding at, just below and just above every midpoint between neighbouring finite
// values (both signs, subnormals and the boundary to the normals included), and around the top: the
// midpoint 464 between 448 and 480, and values beyond, in both modes.
func TestE4M3Ties(t *testing.T) {
	codes := ocpFinite()
	checked := 0
	check := func(x float32) {
		t.Helper()
		for _, mode := range []struct {
			name string
			sat  bool
			f    func(float32) uint8
		}{{"F32ToE4M3", false, F32ToE4M3}, {"F32ToE4M3Sat", true, F32ToE4M3Sat}} {
			got, want := mode.f(x), roundE4M3Ref(float64(x), mode.sat)
			if want == 0xFF {
				if !isE4M3NaN(got) {
					t.Fatalf("%s(%v) = %#02x, want NaN", mode.name, x, got)
				}
				continue
			}
			if got != want {
				t.Fatalf("%s(%v) (%#08x) = %#02x, want %#02x", mode.name, x, math.Float32bits(x), got, want)
			}
			checked++
		}
	}
	for i := 0; i+1 < len(codes); i++ {
		lo, _ := ocpE4M3(codes[i])
		hi, _ := ocpE4M3(codes[i+1])
		for _, sign := range []float64{1, -1} {
			mid := float32(sign * (lo + hi) / 2)
			if float64(mid) != sign*(lo+hi)/2 {
				t.Fatalf("midpoint of %#02x and %#02x not exact in float32", codes[i], codes[i+1])
			}
			check(mid)
			check(math.Nextafter32(mid, 0))
			check(math.Nextafter32(mid, float32(math.Inf(int(sign)))))
		}
	}
	for _, x := range []float32{448, 448.5, 463.99997, 464, 464.00003, 479.99997, 480, 1e6, 3.4e38} {
		check(x)
		check(-x)
	}
	t.Logf("%d conversions checked", checked)
}

// TestE4M3Explicit pins the documented cases by hand: ties to even, saturation and overflow, infinities
// and NaN in both modes.
func TestE4M3Explicit(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	tests := []struct {
		name      string
		in        float32
		sat, plus uint8 // F32ToE4M3Sat, F32ToE4M3
	}{
		{"one", 1, 0x38, 0x38},
		{"tie 1+1/16 to even 1", 1 + 1.0/16, 0x38, 0x38},
		{"tie 1+3/16 to even 1.25", 1 + 3.0/16, 0x3A, 0x3A},
		{"subnormal tie 2^-10 to zero", 0x1p-10, 0x00, 0x00},
		{"subnormal tie 3·2^-10 to 2·2^-9", 0x3p-10, 0x02, 0x02},
		{"below half the smallest subnormal", 0x1p-11, 0x00, 0x00},
		{"negative zero", float32(math.Copysign(0, -1)), 0x80, 0x80},
		{"largest finite", 448, 0x7E, 0x7E},
		{"tie 464 to 448", 464, 0x7E, 0x7E},
		{"above 464", 465, 0x7E, 0x7F},
		{"480", 480, 0x7E, 0x7F},
		{"negative overflow", -1000, 0xFE, 0xFF},
		{"+inf", inf, 0x7E, 0x7F},
		{"-inf", -inf, 0xFE, 0xFF},
		{"NaN", nan, 0x7F, 0x7F},
		{"-NaN", -nan, 0xFF, 0xFF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := F32ToE4M3Sat(tc.in); got != tc.sat {
				t.Errorf("F32ToE4M3Sat(%v) = %#02x, want %#02x", tc.in, got, tc.sat)
			}
			if got := F32ToE4M3(tc.in); got != tc.plus {
				t.Errorf("F32ToE4M3(%v) = %#02x, want %#02x", tc.in, got, tc.plus)
			}
		})
	}
}

// TestE4M3Sweep narrows float32 values spread over every exponent (a stride through all bit patterns)
// and random values in e4m3's range, in both modes, against roundE4M3Ref.
func TestE4M3Sweep(t *testing.T) {
	if testing.Short() {
		t.Skip("a sweep of float32 patterns")
	}
	codes := ocpFinite()
	values := make([]float64, len(codes))
	for i, c := range codes {
		values[i], _ = ocpE4M3(c)
	}
	// A faster reference for the sweep: binary search of the sorted values, ties to even.
	ref := func(x float32, sat bool) uint8 {
		a := math.Abs(float64(x))
		if math.IsNaN(a) || (!sat && a > 464) || (!sat && math.IsInf(a, 1)) {
			return 0xFF
		}
		var sign uint8
		if math.Signbit(float64(x)) {
			sign = 0x80
		}
		if a >= E4M3Max {
			return sign | 0x7E
		}
		i, _ := slices.BinarySearch(values, a) // values[i-1] < a <= values[i]
		if values[i] == a {
			return sign | codes[i]
		}
		lo, hi := values[i-1], values[i]
		switch {
		case a-lo < hi-a:
			return sign | codes[i-1]
		case a-lo > hi-a:
			return sign | codes[i]
		case codes[i-1]&1 == 0:
			return sign | codes[i-1]
		}
		return sign | codes[i]
	}
	check := func(x float32) {
		for _, sat := range []bool{false, true} {
			f := F32ToE4M3
			if sat {
				f = F32ToE4M3Sat
			}
			got, want := f(x), ref(x, sat)
			if want == 0xFF {
				if !isE4M3NaN(got) {
					t.Fatalf("sat %v: %v (%#08x) = %#02x, want NaN", sat, x, math.Float32bits(x), got)
				}
				continue
			}
			if got != want {
				t.Fatalf("sat %v: %v (%#08x) = %#02x, want %#02x", sat, x, math.Float32bits(x), got, want)
			}
		}
	}
	for bits := uint64(0); bits < 1<<32; bits += 1021 {
		check(math.Float32frombits(uint32(bits)))
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1 << 18 {
		check(float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(22)-12)))
	}
}

func TestE4M3Bulk(t *testing.T) {
	src := []float32{0, 1, -1.5, 300, 1000, float32(math.NaN()), 0.001}
	enc := make([]byte, len(src))
	EncodeE4M3Sat(enc, src, 2)
	for i, v := range src {
		if want := F32ToE4M3Sat(v / 2); enc[i] != want {
			t.Errorf("EncodeE4M3Sat[%d] = %#02x, want %#02x", i, enc[i], want)
		}
	}
	dec := make([]float32, len(enc))
	DecodeE4M3(dec, enc, 2)
	for i, b := range enc {
		want := E4M3ToF32(b) * 2
		if dec[i] != want && !(math.IsNaN(float64(dec[i])) && math.IsNaN(float64(want))) {
			t.Errorf("DecodeE4M3[%d] = %v, want %v", i, dec[i], want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("length mismatch did not panic")
		}
	}()
	DecodeE4M3(make([]float32, 2), make([]byte, 3), 1)
}

func BenchmarkF32ToE4M3Sat(b *testing.B) {
	src := make([]float32, 1<<16)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range src {
		src[i] = float32(rng.NormFloat64() * 100)
	}
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		EncodeE4M3Sat(dst, src, 1)
	}
}
