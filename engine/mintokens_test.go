package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestMinTokensMasksStops: min_tokens as vLLM defines it — the first MinTokens output tokens are never
// EOS or a stop token id (their logits are masked), and the token after them may stop the request.
// The model wants to stop at every step; with MinTokens 3 the output is three other tokens and then
// the stop, whichever path draws the tokens (greedy on the model's side or on the host, sampled,
// penalised, with logprobs) and with the step pipeline on or off. Before, the stop token was drawn at
// once and, being under min_tokens, kept in the output and fed back.
func TestMinTokensMasksStops(t *testing.T) {
	const eos, stopID = 257, 5
	seed := uint64(7)
	for _, tc := range []struct {
		name  string
		stop  int32 // what the model wants to emit
		req   Request
		noPip bool
	}{
		{"greedy eos", eos, Request{}, false},
		{"greedy eos, no pipeline", eos, Request{}, true},
		{"greedy stop id", stopID, Request{StopTokenIDs: []int32{stopID}, IgnoreEOS: true}, false},
		{"sampled", eos, Request{Sampling: SamplingParams{Temperature: 0.5, Seed: &seed}}, false},
		{"penalised", eos, Request{Sampling: SamplingParams{RepetitionPenalty: 1.2}}, false},
		{"logprobs", eos, Request{Logprobs: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.MaxTokens = 8
			r := minTokensRun(t, req, tc.noPip, eos, tc.stop) // every step wants to stop
			desc := fmt.Sprintf("ids %v, reason %s, usage %+v", r.ids, r.reason, r.usage)
			if len(r.ids) != 4 || slices.Contains(r.ids[:3], tc.stop) || r.ids[3] != tc.stop {
				t.Errorf("%s: want three other tokens, then %d", desc, tc.stop)
			}
			if r.reason != FinishStop || r.usage.CompletionTokens != 4 {
				t.Errorf("%s: want finish stop after 4 tokens", desc)
			}
		})
	}
}

// TestMinTokensDrawsOnHost: with a model that draws tokens itself (PickModel), a request's draws under
// min_tokens go through the host (where its stop ids are masked) and the rest stay on the model's side.
func TestMinTokensDrawsOnHost(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 9), 256, 8)
	seed := uint64(42)
	cm := &sampleCountingModel{Model: m, steps: map[uint64][]uint64{}}
	e := newEngine(t, cm, Config{})
	// A stop id the tiny model is unlikely to reach, so that the request runs its 12 tokens.
	req := Request{PromptIDs: []int32{1, 2, 3, 4}, MaxTokens: 12, MinTokens: 5, IgnoreEOS: true,
		StopTokenIDs: []int32{7}, Sampling: SamplingParams{Temperature: 0.8, Seed: &seed}}
	got := runConcurrent(t, e, []Request{req})[0]
	closeAndCheckPool(t, e)
	if slices.Contains(got.ids[:min(5, len(got.ids))], 7) {
		t.Errorf("a stop id among the first 5 tokens: %v", got.ids)
	}
	if cm.forward.Load() == 0 {
		t.Errorf("no step ran on the host; the draws under min_tokens must")
	}
	for _, step := range cm.steps[seed] {
		if step < 5 {
			t.Errorf("output token %d drawn on the model's side (draws %v); under min_tokens it must be the host's", step, cm.steps[seed])
		}
	}
	if len(got.ids) == 12 && len(cm.steps[seed]) == 0 {
		t.Errorf("no draw after min_tokens ran on the model's side")
	}
}

// TestMinTokensMasksEOSDespiteIgnoreEOS: as in vLLM, whose min_tokens masks all_stop_token_ids (the
// EOS ids whether or not EOS is ignored, and the stop token ids), the first MinTokens tokens are
// never EOS even when IgnoreEOS lets EOS through afterwards. The model wants EOS at every step.
func TestMinTokensMasksEOSDespiteIgnoreEOS(t *testing.T) {
	const eos = 257
	seed := uint64(7)
	for _, tc := range []struct {
		name  string
		req   Request
		noPip bool
	}{
		{"greedy", Request{}, false},
		{"greedy, no pipeline", Request{}, true},
		{"sampled", Request{Sampling: SamplingParams{Temperature: 0.5, Seed: &seed}}, false},
		{"penalised", Request{Sampling: SamplingParams{RepetitionPenalty: 1.2}}, false},
		{"logprobs", Request{Logprobs: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.MaxTokens, req.IgnoreEOS = 6, true
			r := minTokensRun(t, req, tc.noPip, eos, eos)
			desc := fmt.Sprintf("ids %v, reason %s", r.ids, r.reason)
			if len(r.ids) != 6 || r.reason != FinishLength {
				t.Fatalf("%s: want 6 tokens, finish length (EOS is ignored)", desc)
			}
			if slices.Contains(r.ids[:3], eos) || r.ids[3] != eos {
				t.Errorf("%s: want three tokens other than EOS, then EOS", desc)
			}
		})
	}
}

// minTokensRun runs req (prompt [10], MinTokens 3) on a counting model whose every step wants token
// want, with EOS eos, and returns its result.
func minTokensRun(t *testing.T, req Request, noPip bool, eos, want int32) result {
	t.Helper()
	m := newCountingModel(300, 512, 4, 64)
	m.cfg.EOSTokenIDs = []int32{eos}
	for tok := range int32(300) {
		m.script[tok] = want
	}
	e := newEngine(t, m, Config{DisablePipelining: noPip})
	req.PromptIDs, req.MinTokens = []int32{10}, 3
	s, err := e.Add(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r
}
