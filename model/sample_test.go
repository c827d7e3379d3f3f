package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
)

// refKept is a sort-based float64 reference of the filters: temperature, min-p (p_i ≥ min_p·p_max),
// top-k (ties by lower index), top-p over what is left (keep while the mass before a token is below
// top_p of the total), as vLLM and the engine's host sampler define them. It returns the kept tokens
// best first with their probabilities renormalised.
func refKept(x []float32, p SampleParams) ([]int32, []float64) {
	ids := make([]int32, 0, len(x))
	for i, v := range x {
		if v == v {
			ids = append(ids, int32(i))
		}
	}
	sort.SliceStable(ids, func(a, b int) bool { return x[ids[a]] > x[ids[b]] })
	if p.Temperature < sampleGreedyEpsilon {
		return ids[:1], []float64{1}
	}
	mx := float64(x[ids[0]])
	w := make([]float64, 0, len(ids))
	for _, id := range ids {
		wi := math.Exp((float64(x[id]) - mx) / p.Temperature)
		if wi < p.MinP || wi == 0 {
			break
		}
		w = append(w, wi)
	}
	ids = ids[:len(w)]
	if p.TopK > 0 && p.TopK < len(ids) {
		ids, w = ids[:p.TopK], w[:p.TopK]
	}
	total := 0.0
	for _, v := range w {
		total += v
	}
	if p.TopP > 0 && p.TopP < 1 {
		cum := 0.0
		for i, v := range w {
			if cum >= p.TopP*total {
				ids, w = ids[:i], w[:i]
				break
			}
			cum += v
		}
		total = cum
	}
	probs := make([]float64, len(w))
	for i, v := range w {
		probs[i] = v / total
	}
	return ids, probs
}

// randomSampleParams draws parameters over the ranges that matter, filters on and off.
func randomSampleParams(rng *rand.Rand, vocab int) SampleParams {
	p := SampleParams{Temperature: []float64{0, 0.3, 0.7, 1, 1.5}[rng.IntN(5)], Seed: rng.Uint64(), Step: rng.Uint64N(1000)}
	p.TopK = []int{0, 1, 2, 5, 40, vocab - 1, vocab, vocab + 7}[rng.IntN(8)]
	p.TopP = []float64{0, 0.1, 0.5, 0.9, 0.99, 1}[rng.IntN(6)]
	p.MinP = []float64{0, 0, 0.01, 0.1, 0.5, 1}[rng.IntN(6)]
	return p
}

// randomLogits fills a row with normal logits of the given spread; with ties, some values repeat.
func randomLogits(rng *rand.Rand, n int, spread float64, ties bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * spread)
		if ties && i > 0 && rng.IntN(4) == 0 {
			x[i] = x[rng.IntN(i)]
		}
	}
	return x
}

// The CPU twin keeps exactly the reference's set on random logits (ties included) for random parameters.
func TestSampleKeptSetMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name   string
		vocab  int
		spread float64
		ties   bool
	}{
		{"small", 17, 1, false}, {"ties", 64, 2, true}, {"wide", 3000, 3, false}, {"wide ties", 3000, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for trial := range 200 {
				x := randomLogits(rng, tc.vocab, tc.spread, tc.ties)
				p := randomSampleParams(rng, tc.vocab)
				want, _ := refKept(x, p)
				slices.Sort(want)
				got := KeptTokens(x, p)
				if !slices.Equal(got, want) {
					t.Fatalf("trial %d %+v: kept %d tokens %v, reference %d %v", trial, p, len(got), head(got), len(want), head(want))
				}
				tok := SampleLogits(x, p)
				if _, ok := slices.BinarySearch(want, tok); !ok {
					t.Fatalf("trial %d %+v: drew %d, not kept", trial, p, tok)
				}
			}
		})
	}
}

func head(xs []int32) []int32 { return xs[:min(len(xs), 12)] }

// Draws over many steps of one seed follow the renormalised kept distribution (a fixed seed: the
// check is deterministic); a chi-square statistic stays under its 99.9% quantile.
func TestSampleFrequencies(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := randomLogits(rng, 50, 1.5, false)
	for _, p := range []SampleParams{
		{Temperature: 1},
		{Temperature: 0.7, TopK: 6},
		{Temperature: 1.3, TopP: 0.8},
		{Temperature: 1, MinP: 0.2},
		{Temperature: 0.9, TopK: 10, TopP: 0.7, MinP: 0.05},
	} {
		p.Seed = 42
		ids, probs := refKept(x, p)
		const n = 40000
		counts := map[int32]int{}
		for step := range uint64(n) {
			p.Step = step
			counts[SampleLogits(x, p)]++
		}
		chi := 0.0
		for i, id := range ids {
			e := probs[i] * n
			d := float64(counts[id]) - e
			chi += d * d / e
			delete(counts, id)
		}
		if len(counts) != 0 {
			t.Errorf("%+v: drew tokens outside the kept set: %v", p, counts)
		}
		// 99.9% quantile of chi-square with k-1 degrees of freedom, Wilson–Hilferty approximation.
		k := float64(len(ids) - 1)
		limit := k * math.Pow(1-2/(9*k)+3.09*math.Sqrt(2/(9*k)), 3)
		if len(ids) > 1 && chi > limit {
			t.Errorf("%+v: chi-square %.1f over %d kept tokens, limit %.1f", p, chi, len(ids), limit)
		}
	}
}

// The uniform depends on (seed, step) alone, spreads over [0, 1), and a draw is reproducible.
func TestSampleUniform(t *testing.T) {
	const n = 1 << 16
	var buckets [16]int
	for step := range uint64(n) {
		u := sampleUniform(7, step)
		if u < 0 || u >= 1 {
			t.Fatalf("uniform %v outside [0, 1)", u)
		}
		buckets[int(u*16)]++
	}
	for i, c := range buckets {
		if c < n/16*9/10 || c > n/16*11/10 {
			t.Errorf("bucket %d holds %d of %d draws", i, c, n)
		}
	}
	if sampleUniform(1, 2) == sampleUniform(2, 2) || sampleUniform(1, 2) == sampleUniform(1, 3) {
		t.Error("uniform ignores its seed or step")
	}
}

// Greedy rows and rows of -Inf take the argmax; a row holding NaN or +Inf names no token.
func TestSampleDegenerateRows(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name string
		x    []float32
		p    SampleParams
		want int32
	}{
		{"greedy ties", []float32{1, 3, 3, 2}, SampleParams{}, 1},
		{"all -inf", []float32{-inf, -inf}, SampleParams{Temperature: 1}, 0},
		{"nan and +inf", []float32{nan, 1, inf, inf}, SampleParams{Temperature: 1}, NonFinitePick},
		{"+inf", []float32{0, 1, inf}, SampleParams{}, NonFinitePick},
		{"nan, greedy", []float32{nan, 1, 2}, SampleParams{}, NonFinitePick},
		{"-inf competes no more", []float32{-inf, 1, -inf, 0}, SampleParams{Temperature: 1, TopK: 1}, 1},
		{"min_p 1 keeps the max", []float32{0, 5, 1}, SampleParams{Temperature: 2, MinP: 1}, 1},
		{"top_k 1", []float32{0, 5, 5.5, 1}, SampleParams{Temperature: 5, TopK: 1, Seed: 3}, 2},
		{"nan with top_p", []float32{nan, 2, nan}, SampleParams{Temperature: 1, TopP: 0.5}, NonFinitePick},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SampleLogits(tc.x, tc.p); got != tc.want {
				t.Errorf("drew %d, want %d", got, tc.want)
			}
			if kept := KeptTokens(tc.x, tc.p); (tc.want == NonFinitePick) != (len(kept) == 0) {
				t.Errorf("kept %v for a pick of %d", kept, tc.want)
			}
		})
	}
}

// Argmax is the one host greedy pick: lowest index on ties, NaN never wins, even in the first slot
// (the open-coded loop it replaced in ForwardGreedy's fallback let a leading NaN win).
func TestArgmax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name string
		row  []float32
		want int32
	}{
		{"plain", []float32{1, 3, 2}, 1},
		{"tie takes lowest", []float32{5, 1, 5}, 0},
		{"leading NaN", []float32{nan, 2, 7}, 2},
		{"NaN between", []float32{1, nan, 0.5}, 0},
		{"+Inf", []float32{1, inf, 2}, 1},
		{"all -Inf", []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Argmax(tc.row); got != tc.want {
				t.Fatalf("Argmax(%v) = %d, want %d", tc.row, got, tc.want)
			}
		})
	}
}

// BenchmarkPickRows samples 64 rows of Llama-3's vocabulary on the host (temperature 0.8, top-k 50,
// top-p 0.9): a sampled step's pick on a backend without PickBackend (the CPU, a tensor-parallel model).
func BenchmarkPickRows(b *testing.B) {
	const vocab, batch = 128256, 64
	rng := rand.New(rand.NewPCG(3, 4))
	rows := make([][]float32, batch)
	params := make([]SampleParams, batch)
	for i := range rows {
		rows[i] = make([]float32, vocab)
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64() * 3)
		}
		params[i] = SampleParams{Temperature: 0.8, TopK: 50, TopP: 0.9, Seed: uint64(i)}
	}
	m := &Model{}
	for b.Loop() {
		m.pickRows(rows, params)
	}
}

// TestPickRowsParallel checks that pickRows, which shares rows out among goroutines once they are many
// and long enough, picks each row as pickRowCPU does alone: greedy, sampled and masked rows in one call.
func TestPickRowsParallel(t *testing.T) {
	const vocab, batch = 5000, 24
	rng := rand.New(rand.NewPCG(5, 6))
	rows := make([][]float32, batch)
	params := make([]SampleParams, batch)
	want := make([]int32, batch)
	for i := range rows {
		rows[i] = make([]float32, vocab)
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64() * 2)
		}
		switch i % 3 {
		case 0: // greedy
		case 1:
			params[i] = SampleParams{Temperature: 0.7, TopP: 0.8, Seed: uint64(i), Step: 3}
		case 2:
			mask := make([]uint64, maskWords(vocab))
			for j := range mask {
				mask[j] = rng.Uint64()
			}
			params[i] = SampleParams{Temperature: 1.1, TopK: 20, Mask: mask, Seed: uint64(i)}
		}
		row := slices.Clone(rows[i])
		if params[i].Mask != nil {
			MaskLogits(row, params[i].Mask)
		}
		want[i] = pickRowCPU(row, prepareSample(params[i]))
	}
	m := &Model{}
	if got := m.pickRows(rows, params); !slices.Equal(got, want) {
		t.Errorf("picks %v, one row at a time %v", got, want)
	}
}

// TestForRows checks that forRows visits every row once, serially or on goroutines.
func TestForRows(t *testing.T) {
	for _, tc := range []struct{ n, cols, workers, grain int }{
		{0, 10, 4, 1}, {1, 1 << 20, 8, 1}, {7, 100, 3, 1}, {64, 4096, 16, 1 << 12}, {64, 4096, 16, 1 << 19}, {5, 10, 0, 1},
	} {
		var seen [64]atomic.Int32
		forRows(tc.n, tc.cols, tc.workers, tc.grain, func(i int) { seen[i].Add(1) })
		for i := range seen {
			if want := int32(0); i < tc.n {
				want = 1
				if got := seen[i].Load(); got != want {
					t.Errorf("%+v: row %d visited %d times", tc, i, got)
				}
			} else if got := seen[i].Load(); got != want {
				t.Errorf("%+v: row %d past the rows visited %d times", tc, i, got)
			}
		}
	}
}
