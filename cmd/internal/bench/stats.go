package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of xs by linear interpolation between the
// closest ranks (numpy's default), or 0 for no samples. xs is not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedPercentile(s, p)
}

func sortedPercentile(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	p = min(max(p, 0), 100)
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (rank-float64(lo))*(s[hi]-s[lo])
}

// Summary describes a sample of durations in milliseconds.
type Summary struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Min   float64 `json:"min_ms"`
	Max   float64 `json:"max_ms"`
}

// Summarize returns the summary of ds (all zero for none).
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	ms := make([]float64, len(ds))
	var sum float64
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	slices.Sort(ms)
	return Summary{
		Count: len(ms),
		Mean:  sum / float64(len(ms)),
		P50:   sortedPercentile(ms, 50),
		P90:   sortedPercentile(ms, 90),
		P99:   sortedPercentile(ms, 99),
		Min:   ms[0],
		Max:   ms[len(ms)-1],
	}
}

// Range is a length drawn uniformly from [Min, Max] for each request; Min == Max is a fixed length.
type Range struct {
	Min, Max int
}

// ParseRange reads "128" (fixed) or "128:1024" (uniform, both ends included).
func ParseRange(s string) (Range, error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), ":")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil {
		return Range{}, fmt.Errorf("length %q: want N or MIN:MAX: %w", s, ErrInvalidOptions)
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
			return Range{}, fmt.Errorf("length %q: want N or MIN:MAX: %w", s, ErrInvalidOptions)
		}
	}
	r := Range{a, b}
	return r, r.validate()
}

func (r Range) validate() error {
	if r.Min <= 0 || r.Max < r.Min {
		return fmt.Errorf("length range %v: want 0 < min ≤ max: %w", r, ErrInvalidOptions)
	}
	return nil
}

// String is the form ParseRange reads.
func (r Range) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return fmt.Sprintf("%d:%d", r.Min, r.Max)
}

// MarshalText makes a Range a JSON string like "128:1024".
func (r Range) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// draw returns a length from the range.
func (r Range) draw(rng *rand.Rand) int {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + rng.IntN(r.Max-r.Min+1)
}

// randomPrompt returns n token ids drawn uniformly from [0, vocab).
func randomPrompt(rng *rand.Rand, n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	return ids
}

// ParseBatches reads a comma-separated list of batch sizes ("1,2,4,8").
func ParseBatches(s string) ([]int, error) { return parsePositives(s, "batch size") }

// ParseLengths parses a comma-separated list of token counts ("8192,32768"), each positive.
func ParseLengths(s string) ([]int, error) { return parsePositives(s, "length") }

// parsePositives parses a comma-separated list of positive integers, what naming one in errors.
func parsePositives(s, what string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		b, err := strconv.Atoi(f)
		if err != nil || b <= 0 {
			return nil, fmt.Errorf("%s %q: want a positive integer: %w", what, f, ErrInvalidOptions)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %ss in %q: %w", what, s, ErrInvalidOptions)
	}
	return out, nil
}
