package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// logitsOnly hides Start, so every step's logits come to the host.
type logitsOnly struct{ Model }

// A step whose sequences are all plain greedy ends with the model's greedy pick (Start without
// parameters) and gives the same tokens as sampling on the host; penalties or logprobs anywhere in the
// step send it through Forward, a temperature through the model's draw.
func TestGreedyFastPath(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 7), 256, 8)
	rng := rand.New(rand.NewPCG(7, 8))
	greedyReqs := make([]Request, 6)
	for i := range greedyReqs {
		greedyReqs[i] = Request{ID: fmt.Sprint("g", i), PromptIDs: randomPrompt(rng, 3+7*i), MaxTokens: 6, IgnoreEOS: true}
	}
	seed := uint64(3)
	tests := []struct {
		name      string
		extra     *Request // added to the greedy requests, if any
		allGreedy bool     // every step may end with the greedy pick
		onHost    bool     // the extra request's steps bring the logits to the host
	}{
		{"all greedy", nil, true, false},
		{"one asks logprobs", &Request{ID: "lp", PromptIDs: []int32{1, 2, 3}, MaxTokens: 6, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}, false, true},
		{"one penalised", &Request{ID: "pen", PromptIDs: []int32{1, 2, 3}, MaxTokens: 6, IgnoreEOS: true, Sampling: SamplingParams{RepetitionPenalty: 1.3}}, false, true},
		{"one samples", &Request{ID: "t", PromptIDs: []int32{1, 2, 3}, MaxTokens: 6, IgnoreEOS: true, Sampling: SamplingParams{Temperature: 0.7, Seed: &seed}}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs := append([]Request(nil), greedyReqs...)
			if tc.extra != nil {
				reqs = append(reqs, *tc.extra)
			}
			ref := newEngine(t, logitsOnly{m}, Config{})
			want := runConcurrent(t, ref, reqs)
			closeAndCheckPool(t, ref)

			cm := &sampleCountingModel{Model: m, steps: map[uint64][]uint64{}}
			// One step admits every request (the prompts fit the token budget), so a non-greedy
			// request shares every step with the greedy ones.
			e := newEngine(t, cm, Config{MaxNumBatchedTokens: 512})
			got := make([]result, len(reqs))
			streams := make([]*Stream, len(reqs))
			for i, req := range reqs {
				s, err := e.Add(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				streams[i] = s
			}
			for i, s := range streams {
				got[i] = collect(t, s)
			}
			closeAndCheckPool(t, e)
			for i := range reqs {
				if fmt.Sprint(got[i].ids) != fmt.Sprint(want[i].ids) {
					t.Errorf("request %s: tokens %v, host sampling gave %v", reqs[i].ID, got[i].ids, want[i].ids)
				}
			}
			// The extra request may join a step or two late (Add is asynchronous), so only its own
			// steps are sure to go through Forward.
			if tc.allGreedy && (cm.forward.Load() != 0 || cm.sample.Load() != 0 || cm.greedy.Load() == 0) {
				t.Errorf("all greedy: Forward %d steps, draws %d, greedy picks %d; want 0, 0 and > 0", cm.forward.Load(), cm.sample.Load(), cm.greedy.Load())
			}
			if tc.onHost && cm.forward.Load() < int64(tc.extra.MaxTokens) {
				t.Errorf("Forward ran %d steps, want at least the %d of the request that needs logits", cm.forward.Load(), tc.extra.MaxTokens)
			}
			if !tc.allGreedy && !tc.onHost && (cm.forward.Load() != 0 || cm.sample.Load() < int64(tc.extra.MaxTokens)) {
				t.Errorf("Forward %d steps, draws %d; want 0 and at least the %d of the sampled request", cm.forward.Load(), cm.sample.Load(), tc.extra.MaxTokens)
			}
			if last := got[len(got)-1]; tc.extra != nil && tc.extra.Logprobs && len(last.logprobs) != len(last.ids) {
				t.Errorf("logprobs request got %d logprobs for %d tokens", len(last.logprobs), len(last.ids))
			}
		})
	}
}
