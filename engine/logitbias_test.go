package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
)

// TestLogitBias: OpenAI's logit_bias on the tiny model, whose greedy continuation is known. A bias of
// 100 makes a token win every draw (greedy, sampled, penalised, with logprobs, with min_tokens' mask,
// beside requests the model's side draws for); −100 on the greedy continuation's first token bans it
// (the output changes there and never shows it); logprobs stay those of the raw logits. Each request
// with a bias draws on the host, since the model's pick applies none (the CPU model's Start draws
// without it, so a misrouted request would show the unbiased tokens).
func TestLogitBias(t *testing.T) {
	dir := writeTinyModel(t, 21)
	prompt := []int32{256, 'f', 'u', 'n', 'c'}
	plain := Request{PromptIDs: prompt, MaxTokens: 6, IgnoreEOS: true}
	m := loadTinyModel(t, dir, 256, 8)
	e := newEngine(t, m, Config{})
	base := runConcurrent(t, e, []Request{plain})[0]
	if len(base.ids) != 6 {
		t.Fatalf("plain run: %v", base.ids)
	}
	const forced = 'x'
	seed := uint64(3)
	tests := []struct {
		name string
		req  Request
	}{
		{"greedy", Request{}},
		{"sampled", Request{Sampling: SamplingParams{Temperature: 1, Seed: &seed}}},
		{"penalised", Request{Sampling: SamplingParams{Temperature: 0.7, FrequencyPenalty: 2, Seed: &seed}}},
		{"logprobs", Request{Logprobs: true, TopLogprobs: 2}},
		{"min_tokens", Request{MinTokens: 3, StopTokenIDs: []int32{forced + 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.PromptIDs, req.MaxTokens, req.IgnoreEOS = prompt, 6, true
			req.Sampling.LogitBias = map[int32]float32{forced: 100}
			// Two unbiased greedy neighbours keep the model's own pick busy in the same steps.
			got := runConcurrent(t, e, []Request{plain, req, plain})
			if want := slices.Repeat([]int32{forced}, 6); !slices.Equal(got[1].ids, want) {
				t.Errorf("biased ids %v, want %v", got[1].ids, want)
			}
			for _, k := range []int{0, 2} {
				if !slices.Equal(got[k].ids, base.ids) {
					t.Errorf("unbiased neighbour %d: %v, want %v", k, got[k].ids, base.ids)
				}
			}
			if req.Logprobs {
				if len(got[1].logprobs) != 6 {
					t.Fatalf("%d logprobs", len(got[1].logprobs))
				}
				// Raw logprobs: the forced token is not the model's own favourite, so it is not ~0.
				if lp := got[1].logprobs[0]; lp.ID != forced || lp.Logprob > -0.01 || lp.Rank == 1 {
					t.Errorf("first logprob %+v: want the raw (unbiased) logprob of %d", lp, forced)
				}
			}
		})
	}
	t.Run("ban", func(t *testing.T) {
		req := plain
		req.Sampling.LogitBias = map[int32]float32{base.ids[0]: -100}
		got := runConcurrent(t, e, []Request{req})[0]
		if slices.Contains(got.ids, base.ids[0]) {
			t.Errorf("banned token %d in %v", base.ids[0], got.ids)
		}
	})
	for _, bad := range []map[int32]float32{{300: 1}, {-1: 1}, {5: float32(math.NaN())}} {
		req := plain
		req.Sampling.LogitBias = bad
		if _, err := e.Add(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("logit_bias %v: %v, want ErrInvalidRequest", bad, err)
		}
	}
	closeAndCheckPool(t, e)
}
