package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gollm/gollm/model"
)

// sampleCountingModel counts the entry points the engine used (Forward, Start without parameters: a
// greedy pick, Start with them: a draw) and records, per seed, the output indices it was asked to draw.
type sampleCountingModel struct {
	*model.Model
	forward, greedy, sample atomic.Int64
	mu                      sync.Mutex
	steps                   map[uint64][]uint64
}

func (m *sampleCountingModel) Forward(s *model.Step) ([][]float32, error) {
	m.forward.Add(1)
	return m.Model.Forward(s)
}

func (m *sampleCountingModel) Start(s *model.Step, params []model.SampleParams) (*model.Pick, error) {
	if params == nil {
		m.greedy.Add(1)
		return m.Model.Start(s, nil)
	}
	m.sample.Add(1)
	m.mu.Lock()
	for _, p := range params {
		m.steps[p.Seed] = append(m.steps[p.Seed], p.Step)
	}
	m.mu.Unlock()
	return m.Model.Start(s, params)
}

func toModelParams(p SamplingParams) model.SampleParams {
	return model.SampleParams{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP}
}

// The model's sampler keeps exactly the tokens the host sampler's filter keeps (temperature, min-p,
// top-k, top-p; ties by lower id) on random logits, repeated values included, for random parameters.
func TestDeviceSampleKeptSetMatchesHostFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, vocab := range []int{5, 300, 4000} {
		t.Run(fmt.Sprint("vocab=", vocab), func(t *testing.T) {
			for trial := range 300 {
				x := make([]float32, vocab)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * 2)
					if i > 0 && trial%2 == 1 && rng.IntN(3) == 0 {
						x[i] = x[rng.IntN(i)] // repeated values: the tie rules matter
					}
				}
				p := SamplingParams{
					Temperature: []float64{0.5, 0.8, 1, 1.5}[rng.IntN(4)],
					TopK:        []int{-1, 0, 1, 3, 20, vocab - 1, vocab, vocab + 1}[rng.IntN(8)],
					TopP:        []float64{0, 0.2, 0.5, 0.9, 0.999, 1}[rng.IntN(6)],
					MinP:        []float64{0, 0, 0.02, 0.3, 1}[rng.IntN(5)],
				}
				s := sampler{params: p}
				kept, _ := s.filter(x)
				want := make([]int32, len(kept))
				for i, c := range kept {
					want[i] = c.id
				}
				slices.Sort(want)
				got := model.KeptTokens(x, toModelParams(p))
				if !slices.Equal(got, want) {
					t.Fatalf("trial %d %+v: model keeps %d %v, host filter %d %v", trial, p, len(got), got[:min(len(got), 10)], len(want), want[:min(len(want), 10)])
				}
			}
		})
	}
}

// Steps whose sequences need neither penalties nor logprobs end on the model's device
// (ForwardSample); a seeded request gives the same tokens alone, twice, and in any company, and each
// of its draws is named by its output index.
func TestDeviceSamplePath(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 9), 256, 8)
	rng := rand.New(rand.NewPCG(9, 10))
	sampled := []SamplingParams{
		{Temperature: 0.8},
		{Temperature: 1.2, TopK: 20},
		{Temperature: 0.7, TopP: 0.9},
		{Temperature: 1, TopK: 50, TopP: 0.95, MinP: 0.05},
	}
	var reqs []Request
	for i, p := range sampled {
		seed := uint64(100 + i)
		p.Seed = &seed
		reqs = append(reqs, Request{ID: fmt.Sprint("s", i), PromptIDs: randomPrompt(rng, 4+5*i), MaxTokens: 12, IgnoreEOS: true, Sampling: p})
	}
	greedy := Request{ID: "g", PromptIDs: randomPrompt(rng, 9), MaxTokens: 12, IgnoreEOS: true}

	alone := make([]result, len(reqs))
	for i, req := range reqs {
		cm := &sampleCountingModel{Model: m, steps: map[uint64][]uint64{}}
		e := newEngine(t, cm, Config{})
		alone[i] = runConcurrent(t, e, []Request{req})[0]
		closeAndCheckPool(t, e)
		if cm.forward.Load() != 0 || cm.sample.Load() == 0 {
			t.Errorf("%s alone: Forward %d steps, ForwardSample %d; want 0 and > 0", req.ID, cm.forward.Load(), cm.sample.Load())
		}
		if got, want := cm.steps[*req.Sampling.Seed], []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(got, want) {
			t.Errorf("%s alone: draws named by output indices %v, want %v", req.ID, got, want)
		}
		if len(alone[i].ids) != req.MaxTokens {
			t.Fatalf("%s alone: %d tokens, want %d", req.ID, len(alone[i].ids), req.MaxTokens)
		}
	}
	greedyAlone := runConcurrent(t, newEngine(t, logitsOnly{m}, Config{}), []Request{greedy})[0]

	tests := []struct {
		name      string
		reqs      []Request
		onDevice  bool // every step may end in ForwardSample or ForwardGreedy
		sameAsAll bool // the sampled requests' tokens equal their runs alone
	}{
		{"sampled together", reqs, true, true},
		{"with a greedy one", append(slices.Clone(reqs), greedy), true, true},
		{"with a penalised one", append(slices.Clone(reqs), Request{ID: "pen", PromptIDs: []int32{1, 2, 3}, MaxTokens: 12, IgnoreEOS: true, Sampling: SamplingParams{Temperature: 1, RepetitionPenalty: 1.2}}), false, false},
		{"with a logprobs one", append(slices.Clone(reqs), Request{ID: "lp", PromptIDs: []int32{1, 2, 3}, MaxTokens: 12, IgnoreEOS: true, Logprobs: true}), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for run := range 2 { // twice: reproducible
				cm := &sampleCountingModel{Model: m, steps: map[uint64][]uint64{}}
				e := newEngine(t, cm, Config{MaxNumBatchedTokens: 512})
				got := runConcurrent(t, e, tc.reqs)
				closeAndCheckPool(t, e)
				if tc.onDevice && cm.forward.Load() != 0 {
					t.Errorf("run %d: Forward ran %d steps, want none", run, cm.forward.Load())
				}
				if !tc.onDevice && cm.forward.Load() == 0 {
					t.Errorf("run %d: Forward never ran, want the host path for the penalised or logprobs request", run)
				}
				if cm.sample.Load() == 0 && tc.onDevice {
					t.Errorf("run %d: ForwardSample never ran", run)
				}
				for i := range reqs {
					if tc.sameAsAll && !slices.Equal(got[i].ids, alone[i].ids) {
						t.Errorf("run %d %s: tokens %v, alone %v", run, reqs[i].ID, got[i].ids, alone[i].ids)
					}
					if len(got[i].ids) != reqs[i].MaxTokens {
						t.Errorf("run %d %s: %d tokens", run, reqs[i].ID, len(got[i].ids))
					}
				}
				if last := got[len(got)-1]; tc.reqs[len(tc.reqs)-1].ID == "g" && !slices.Equal(last.ids, greedyAlone.ids) {
					t.Errorf("run %d: greedy request among sampled ones gave %v, alone %v", run, last.ids, greedyAlone.ids)
				}
			}
		})
	}
}

// Sampled tokens are not all the same: the device path does draw (a run of temperature 1.5 over a
// random model's flat distribution gives several distinct tokens).
func TestDeviceSampleDraws(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 4), 256, 8)
	seed := uint64(1)
	req := Request{ID: "hot", PromptIDs: []int32{5, 6, 7}, MaxTokens: 24, IgnoreEOS: true, Sampling: SamplingParams{Temperature: 1.5, Seed: &seed}}
	e := newEngine(t, m, Config{})
	got := runConcurrent(t, e, []Request{req})[0]
	closeAndCheckPool(t, e)
	distinct := map[int32]bool{}
	for _, id := range got.ids {
		distinct[id] = true
	}
	if len(distinct) < 4 {
		t.Errorf("24 draws at temperature 1.5 gave %d distinct tokens: %v", len(distinct), got.ids)
	}
}
