package bench

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	// Expected values are numpy.percentile's (linear interpolation).
	for _, tc := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{nil, 50, 0},
		{[]float64{7}, 99, 7},
		{[]float64{4, 1, 3, 2}, 50, 2.5},
		{[]float64{4, 1, 3, 2}, 90, 3.7},
		{[]float64{4, 1, 3, 2}, 99, 3.97},
		{[]float64{4, 1, 3, 2}, 0, 1},
		{[]float64{4, 1, 3, 2}, 100, 4},
		{[]float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110}, 90, 100},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 9.91},
	} {
		in := append([]float64(nil), tc.xs...)
		if got := Percentile(tc.xs, tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.xs[i] {
				t.Fatalf("Percentile modified its input")
			}
		}
	}
}

func TestSummarize(t *testing.T) {
	ds := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	s := Summarize(ds)
	want := Summary{Count: 4, Mean: 2.5, P50: 2.5, P90: 3.7, P99: 3.97, Min: 1, Max: 4}
	if math.Abs(s.P90-want.P90) > 1e-9 || math.Abs(s.P99-want.P99) > 1e-9 {
		t.Errorf("got %+v, want %+v", s, want)
	}
	s.P90, s.P99 = want.P90, want.P99
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("empty summary not zero")
	}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Range
		ok   bool
	}{
		{"128", Range{128, 128}, true},
		{"128:1024", Range{128, 1024}, true},
		{" 5 : 5 ", Range{5, 5}, true},
		{"0", Range{}, false},
		{"-3", Range{}, false},
		{"10:5", Range{}, false},
		{"a:5", Range{}, false},
		{"5:", Range{}, false},
		{"", Range{}, false},
	} {
		got, err := ParseRange(tc.in)
		if tc.ok != (err == nil) || (tc.ok && got != tc.want) {
			t.Errorf("ParseRange(%q) = %v, %v", tc.in, got, err)
		}
		if !tc.ok && !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ParseRange(%q): error %v does not wrap ErrInvalidOptions", tc.in, err)
		}
		if tc.ok {
			again, err := ParseRange(got.String())
			if err != nil || again != got {
				t.Errorf("round trip of %v: %v, %v", got, again, err)
			}
		}
	}
}

func TestRangeDraw(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := Range{3, 6}
	seen := map[int]bool{}
	for range 400 {
		n := r.draw(rng)
		if n < 3 || n > 6 {
			t.Fatalf("draw %d outside %v", n, r)
		}
		seen[n] = true
	}
	if len(seen) != 4 {
		t.Errorf("draws cover %v, want all of 3..6", seen)
	}
	if (Range{7, 7}).draw(rng) != 7 {
		t.Error("fixed range")
	}
}

func TestParseBatches(t *testing.T) {
	got, err := ParseBatches("1, 2,4,,8")
	if err != nil || len(got) != 4 || got[3] != 8 {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-2"} {
		if _, err := ParseBatches(bad); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ParseBatches(%q): %v", bad, err)
		}
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"128", "1:2", "::", "9999999999999999999", " 3:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			return
		}
		if r.Min <= 0 || r.Max < r.Min {
			t.Fatalf("ParseRange(%q) accepted %v", s, r)
		}
		if again, err := ParseRange(r.String()); err != nil || again != r {
			t.Fatalf("round trip of %v: %v, %v", r, again, err)
		}
	})
}
