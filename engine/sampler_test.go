package engine

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

func seed(s uint64) *uint64 { return &s }

// logitsOf returns the logits log(p) of a distribution, so filters can be checked by hand.
func logitsOf(probs ...float64) []float32 {
	out := make([]float32, len(probs))
	for i, p := range probs {
		out[i] = float32(math.Log(p))
	}
	return out
}

func TestSampleGreedy(t *testing.T) {
	tests := []struct {
		name   string
		params SamplingParams
		prompt []int32
		output []int32 // tokens accepted before the draw
		logits []float32
		want   int32
	}{
		{"argmax", SamplingParams{}, nil, nil, []float32{1, 3, 2}, 1},
		{"tie goes to lower id", SamplingParams{}, nil, nil, []float32{2, 5, 5}, 1},
		{"negative logits", SamplingParams{}, nil, nil, []float32{-3, -1, -2}, 1},
		{"tiny temperature is greedy", SamplingParams{Temperature: 1e-6}, nil, nil, []float32{0, 0.1, 0.05}, 1},
		{"NaN never wins", SamplingParams{}, nil, nil, []float32{float32(math.NaN()), 1, 0}, 1},
		// Repetition 2 on the prompt's tokens 0 and 1: [2, -1, 1.5] → [1, -2, 1.5].
		{"repetition penalty divides positive", SamplingParams{RepetitionPenalty: 2}, []int32{0, 1}, nil, []float32{2, -1, 1.5}, 2},
		// Repetition 2 on token 1 only: [-0.9, -0.5, -0.8] → [-0.9, -1, -0.8]: 2 wins instead of 1.
		{"repetition penalty multiplies negative", SamplingParams{RepetitionPenalty: 2}, []int32{1}, nil, []float32{-0.9, -0.5, -0.8}, 2},
		{"repetition penalty counts output", SamplingParams{RepetitionPenalty: 3}, nil, []int32{0}, []float32{3, 1.5, 0}, 1},
		// Frequency 0.5 with token 0 twice in the output: 2 - 1 = 1 < 1.2.
		{"frequency penalty per occurrence", SamplingParams{FrequencyPenalty: 0.5}, nil, []int32{0, 0}, []float32{2, 1.2, 0}, 1},
		{"frequency penalty once is not enough", SamplingParams{FrequencyPenalty: 0.5}, nil, []int32{0}, []float32{2, 1.2, 0}, 0},
		// Presence 1 once however many times: 2 - 1 = 1 < 1.2, but 3 - 1 = 2 > 1.2.
		{"presence penalty", SamplingParams{PresencePenalty: 1}, nil, []int32{0, 0, 0}, []float32{2, 1.2, 0}, 1},
		{"presence penalty once", SamplingParams{PresencePenalty: 1}, nil, []int32{0, 0, 0}, []float32{3, 1.2, 0}, 0},
		{"presence ignores the prompt", SamplingParams{PresencePenalty: 2}, []int32{0}, nil, []float32{2, 1.2, 0}, 0},
		{"negative presence rewards", SamplingParams{PresencePenalty: -1}, nil, []int32{2}, []float32{2, 1.2, 1.5}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSampler(tc.params, 1, tc.prompt)
			for _, tok := range tc.output {
				s.accept(tok)
			}
			in := slices.Clone(tc.logits)
			if got := s.sample(tc.logits); got != tc.want {
				t.Fatalf("sample = %d, want %d", got, tc.want)
			}
			if !slices.EqualFunc(in, tc.logits, func(a, b float32) bool { return a == b || (a != a && b != b) }) {
				t.Fatalf("sample modified its input: %v → %v", in, tc.logits)
			}
		})
	}
}

// TestFilterByHand checks the kept set and its probabilities on distributions small enough to do
// on paper. probs: 0.5, 0.3, 0.15, 0.05.
func TestFilterByHand(t *testing.T) {
	base := logitsOf(0.5, 0.3, 0.15, 0.05)
	tests := []struct {
		name   string
		params SamplingParams
		want   map[int32]float64 // token → probability after filtering
	}{
		{"no filter", SamplingParams{Temperature: 1}, map[int32]float64{0: 0.5, 1: 0.3, 2: 0.15, 3: 0.05}},
		{"top-k 2", SamplingParams{Temperature: 1, TopK: 2}, map[int32]float64{0: 0.625, 1: 0.375}},
		{"top-k 1", SamplingParams{Temperature: 1, TopK: 1}, map[int32]float64{0: 1}},
		{"top-k beyond vocab", SamplingParams{Temperature: 1, TopK: 10}, map[int32]float64{0: 0.5, 1: 0.3, 2: 0.15, 3: 0.05}},
		// Mass before token 1 is 0.5 < 0.7 (kept); before token 2 it is 0.8 ≥ 0.7 (dropped).
		{"top-p 0.7", SamplingParams{Temperature: 1, TopP: 0.7}, map[int32]float64{0: 0.625, 1: 0.375}},
		{"top-p 0.9", SamplingParams{Temperature: 1, TopP: 0.9}, map[int32]float64{0: 0.5 / 0.95, 1: 0.3 / 0.95, 2: 0.15 / 0.95}},
		{"top-p 0.1 keeps the best", SamplingParams{Temperature: 1, TopP: 0.1}, map[int32]float64{0: 1}},
		{"top-p 1 is off", SamplingParams{Temperature: 1, TopP: 1}, map[int32]float64{0: 0.5, 1: 0.3, 2: 0.15, 3: 0.05}},
		// Top-k 3 renormalises to 0.5/0.95, 0.3/0.95, 0.15/0.95; top-p 0.8 then keeps 0 and 1
		// (0.526 < 0.8, then 0.842 ≥ 0.8).
		{"top-k then top-p", SamplingParams{Temperature: 1, TopK: 3, TopP: 0.8}, map[int32]float64{0: 0.625, 1: 0.375}},
		// Threshold 0.4·0.5 = 0.2: keeps 0.5 and 0.3.
		{"min-p 0.4", SamplingParams{Temperature: 1, MinP: 0.4}, map[int32]float64{0: 0.625, 1: 0.375}},
		// Threshold 0.2·0.5 = 0.1: keeps 0.5, 0.3, 0.15.
		{"min-p 0.2", SamplingParams{Temperature: 1, MinP: 0.2}, map[int32]float64{0: 0.5 / 0.95, 1: 0.3 / 0.95, 2: 0.15 / 0.95}},
		{"min-p 1 keeps the best", SamplingParams{Temperature: 1, MinP: 1}, map[int32]float64{0: 1}},
		// Temperature 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 over 0.365.
		{"temperature 0.5", SamplingParams{Temperature: 0.5}, map[int32]float64{0: 0.25 / 0.365, 1: 0.09 / 0.365, 2: 0.0225 / 0.365, 3: 0.0025 / 0.365}},
		// Temperature 2 takes square roots; min-p 0.5 then keeps sqrt(p) ≥ 0.5·sqrt(0.5)=0.354: 0, 1, 2.
		{"temperature before min-p", SamplingParams{Temperature: 2, MinP: 0.5}, sqrtDist(0.5, 0.3, 0.15)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSampler(tc.params, 1, nil)
			kept, total := s.filter(slices.Clone(base))
			got := map[int32]float64{}
			for _, c := range kept {
				got[c.id] += c.w / total
			}
			if len(got) != len(tc.want) {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
			for id, p := range tc.want {
				if math.Abs(got[id]-p) > 1e-6 {
					t.Fatalf("token %d: p = %v, want %v (kept %v)", id, got[id], p, got)
				}
			}
		})
	}
}

func sqrtDist(ps ...float64) map[int32]float64 {
	sum := 0.0
	for _, p := range ps {
		sum += math.Sqrt(p)
	}
	out := map[int32]float64{}
	for i, p := range ps {
		out[int32(i)] = math.Sqrt(p) / sum
	}
	return out
}

// referenceFilter is the filter written the obvious way in float64: full sort, then each rule as
// vLLM states it. It is the specification filter is checked against.
func referenceFilter(logits []float32, p SamplingParams) map[int32]float64 {
	type tok struct {
		id int32
		p  float64
	}
	maxL := math.Inf(-1)
	for _, l := range logits {
		maxL = math.Max(maxL, float64(l)/p.Temperature)
	}
	toks := make([]tok, len(logits))
	sum := 0.0
	for i, l := range logits {
		e := math.Exp(float64(l)/p.Temperature - maxL)
		toks[i] = tok{int32(i), e}
		sum += e
	}
	for i := range toks {
		toks[i].p /= sum
	}
	sort.SliceStable(toks, func(i, j int) bool { return toks[i].p > toks[j].p })
	if p.MinP > 0 {
		th := p.MinP * toks[0].p
		toks = slices.DeleteFunc(toks, func(t tok) bool { return t.p < th })
	}
	if p.TopK > 0 && p.TopK < len(toks) {
		toks = toks[:p.TopK]
	}
	if p.TopP > 0 && p.TopP < 1 {
		mass := 0.0
		for _, t := range toks {
			mass += t.p
		}
		cum := 0.0
		for i, t := range toks {
			if cum/mass >= p.TopP {
				toks = toks[:i]
				break
			}
			cum += t.p
		}
	}
	mass := 0.0
	for _, t := range toks {
		mass += t.p
	}
	out := map[int32]float64{}
	for _, t := range toks {
		out[t.id] = t.p / mass
	}
	return out
}

func TestFilterMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 300 {
		vocab := 1 + rng.IntN(200)
		logits := make([]float32, vocab)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
		}
		p := SamplingParams{Temperature: 0.2 + 2*rng.Float64()}
		if rng.IntN(2) == 0 {
			p.TopK = 1 + rng.IntN(vocab+5)
		}
		if rng.IntN(2) == 0 {
			p.TopP = 0.05 + 0.95*rng.Float64()
		}
		if rng.IntN(2) == 0 {
			p.MinP = 0.3 * rng.Float64()
		}
		want := referenceFilter(logits, p)
		s := newSampler(p, 1, nil)
		kept, total := s.filter(slices.Clone(logits))
		got := map[int32]float64{}
		for _, c := range kept {
			got[c.id] = c.w / total
		}
		if len(got) != len(want) {
			t.Fatalf("trial %d %+v: kept %d tokens, reference %d", trial, p, len(got), len(want))
		}
		for id, pw := range want {
			if math.Abs(got[id]-pw) > 1e-9 {
				t.Fatalf("trial %d %+v: token %d p = %v, reference %v", trial, p, id, got[id], pw)
			}
		}
	}
}

// TestSampleFrequencies draws many times with a fixed seed and checks what is drawn against the
// filtered distribution: never outside the kept set, and frequencies within 5 standard errors.
func TestSampleFrequencies(t *testing.T) {
	logits := logitsOf(0.4, 0.25, 0.15, 0.1, 0.06, 0.04)
	tests := []struct {
		name   string
		params SamplingParams
	}{
		{"temperature 1", SamplingParams{Temperature: 1}},
		{"temperature 0.7", SamplingParams{Temperature: 0.7}},
		{"top-k 3", SamplingParams{Temperature: 1, TopK: 3}},
		{"top-p 0.75", SamplingParams{Temperature: 1, TopP: 0.75}},
		{"min-p 0.3", SamplingParams{Temperature: 1, MinP: 0.3}},
		{"all filters", SamplingParams{Temperature: 1.3, TopK: 4, TopP: 0.9, MinP: 0.1}},
	}
	const draws = 20000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.params.Seed = seed(42)
			want := referenceFilter(logits, tc.params)
			s := newSampler(tc.params, 42, nil)
			counts := map[int32]int{}
			for range draws {
				counts[s.sample(logits)]++
			}
			for id, n := range counts {
				if _, ok := want[id]; !ok {
					t.Fatalf("drew token %d (%d times), outside the kept set %v", id, n, want)
				}
			}
			for id, p := range want {
				freq := float64(counts[id]) / draws
				se := math.Sqrt(p * (1 - p) / draws)
				if math.Abs(freq-p) > 5*se+1e-9 {
					t.Errorf("token %d: frequency %.4f, want %.4f ± %.4f", id, freq, p, 5*se)
				}
			}
		})
	}
}

func TestSampleSeeded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 500)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	draw := func(seed uint64) []int32 {
		s := newSampler(SamplingParams{Temperature: 1, TopP: 0.95}, seed, nil)
		out := make([]int32, 50)
		for i := range out {
			out[i] = s.sample(logits)
			s.accept(out[i])
		}
		return out
	}
	a, b, c := draw(5), draw(5), draw(6)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different draws:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 5 and 6 drew the same 50 tokens: %v", a)
	}
}

func TestTemperatureToZeroIsGreedy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		logits := make([]float32, 100)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 2)
		}
		want := model.Argmax(logits)
		// At T = 0.01 the runner-up is at least e^(gap/0.01) less likely; the gap between normal
		// samples is rarely below 0.2, so the argmax must win with overwhelming probability.
		for _, temp := range []float64{0, 1e-6, 0.001} {
			s := newSampler(SamplingParams{Temperature: temp}, uint64(trial), nil)
			if got := s.sample(logits); got != want {
				t.Fatalf("trial %d T=%v: sampled %d, argmax %d", trial, temp, got, want)
			}
		}
	}
}

func TestComputeLogprobs(t *testing.T) {
	// log-softmax of [0, ln 3, ln 2, ln 2] = log([1, 3, 2, 2]/8).
	logits := []float32{0, float32(math.Log(3)), float32(math.Log(2)), float32(math.Log(2))}
	tests := []struct {
		name     string
		chosen   int32
		n        int
		wantLP   float64
		wantRank int
		wantTop  []int32
	}{
		{"best, no top", 1, 0, math.Log(3.0 / 8), 1, nil},
		{"worst with top 2", 0, 2, math.Log(1.0 / 8), 4, []int32{1, 2}},
		{"tie ranks by id", 3, 3, math.Log(2.0 / 8), 3, []int32{1, 2, 3}},
		{"top beyond vocab", 2, 10, math.Log(2.0 / 8), 2, []int32{1, 2, 3, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := computeLogprobs(logits, tc.chosen, tc.n)
			if got.ID != tc.chosen || math.Abs(float64(got.Logprob)-tc.wantLP) > 1e-6 || got.Rank != tc.wantRank {
				t.Fatalf("got %+v, want id %d logprob %v rank %d", got, tc.chosen, tc.wantLP, tc.wantRank)
			}
			ids := make([]int32, len(got.Top))
			for i, tl := range got.Top {
				ids[i] = tl.ID
				if want := float64(logits[tl.ID]) - math.Log(8); math.Abs(float64(tl.Logprob)-want) > 1e-6 {
					t.Fatalf("top %d: logprob %v, want %v", tl.ID, tl.Logprob, want)
				}
			}
			if !slices.Equal(ids, tc.wantTop) {
				t.Fatalf("top ids %v, want %v", ids, tc.wantTop)
			}
		})
	}
}

func TestSamplingParamsValidate(t *testing.T) {
	tests := []struct {
		name string
		p    SamplingParams
		ok   bool
	}{
		{"zero value", SamplingParams{}, true},
		{"typical", SamplingParams{Temperature: 0.7, TopP: 0.9, TopK: 50, MinP: 0.05, RepetitionPenalty: 1.1, PresencePenalty: 0.5, FrequencyPenalty: -0.5}, true},
		{"top-k -1", SamplingParams{TopK: -1}, true},
		{"negative temperature", SamplingParams{Temperature: -1}, false},
		{"NaN temperature", SamplingParams{Temperature: math.NaN()}, false},
		{"infinite temperature", SamplingParams{Temperature: math.Inf(1)}, false},
		{"infinite repetition", SamplingParams{RepetitionPenalty: math.Inf(1)}, false},
		{"top-p above 1", SamplingParams{TopP: 1.5}, false},
		{"top-k -2", SamplingParams{TopK: -2}, false},
		{"min-p above 1", SamplingParams{MinP: 2}, false},
		{"negative repetition", SamplingParams{RepetitionPenalty: -1}, false},
		{"presence out of range", SamplingParams{PresencePenalty: 3}, false},
		{"frequency out of range", SamplingParams{FrequencyPenalty: -2.5}, false},
		{"logit bias", SamplingParams{LogitBias: map[int32]float32{3: -100, 4: 100}}, true},
		{"NaN logit bias", SamplingParams{LogitBias: map[int32]float32{3: float32(math.NaN())}}, false},
		{"infinite logit bias", SamplingParams{LogitBias: map[int32]float32{3: float32(math.Inf(-1))}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func BenchmarkSample(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	logits := make([]float32, 128256)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	for _, bc := range []struct {
		name string
		p    SamplingParams
	}{
		{"greedy", SamplingParams{}},
		{"temperature", SamplingParams{Temperature: 0.8}},
		{"top-k 50", SamplingParams{Temperature: 0.8, TopK: 50}},
		{"top-p 0.9", SamplingParams{Temperature: 0.8, TopP: 0.9}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := newSampler(bc.p, 1, nil)
			for b.Loop() {
				s.sample(logits)
			}
		})
	}
}

func TestDefaultSampling(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	k := 40
	tests := []struct {
		name string
		g    *weights.GenerationConfig
		want SamplingParams
	}{
		{"nil", nil, SamplingParams{Temperature: 1}},
		{"empty", &weights.GenerationConfig{}, SamplingParams{Temperature: 1}},
		{"llama 3 style", &weights.GenerationConfig{Temperature: f(0.6), TopP: f(0.9)}, SamplingParams{Temperature: 0.6, TopP: 0.9}},
		{"everything", &weights.GenerationConfig{Temperature: f(0.7), TopP: f(0.8), TopK: &k, MinP: f(0.05), RepetitionPenalty: f(1.1)},
			SamplingParams{Temperature: 0.7, TopP: 0.8, TopK: 40, MinP: 0.05, RepetitionPenalty: 1.1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultSampling(tc.g); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
