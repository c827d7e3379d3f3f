package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// poisonToken is the token whose embedding row TestNonFiniteLogits makes NaN: a request that reads it
// gets NaN logits from there on, and no other request does.
const poisonToken = 7

// loadPoisonedModel writes tinyConfig with embedding row poisonToken NaN and loads it without the weight
// check (which would refuse it), as --skip-weight-check does.
func loadPoisonedModel(t *testing.T) *model.Model {
	t.Helper()
	dir := t.TempDir()
	cfg := weightstest.WriteLlamaEdited(t, dir, tinyConfig, 3, func(name string, v []float32) {
		if name == "model.embed_tokens.weight" {
			h := tinyConfig["hidden_size"].(int)
			for i := range h {
				v[poisonToken*h+i] = float32(math.NaN())
			}
		}
	})
	if cfg.TieWordEmbeddings {
		t.Fatal("the poisoned row must not be the LM head's too")
	}
	f, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := model.Load(f, model.Options{NumBlocks: 64, BlockSize: 4}); !errors.Is(err, model.ErrNonFiniteWeight) {
		t.Fatalf("Load with the weight check: %v, want ErrNonFiniteWeight", err)
	}
	m, err := model.Load(f, model.Options{NumBlocks: 64, BlockSize: 4, SkipWeightCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestNonFiniteLogits runs requests whose logits turn NaN (their prompt reads the NaN embedding row, or
// their output would) beside requests that never see it, on every path a draw takes: greedy and
// sampled on the model's pick (PickModel, pipelined or not), logprobs and penalties on the host, and
// prompt logprobs. The poisoned requests must end with FinishError wrapping ErrNonFiniteLogits, never
// with garbage tokens; the others must get exactly the tokens they get alone; the engine must count
// them and serve the next request; and no KV block may leak.
func TestNonFiniteLogits(t *testing.T) {
	m := loadPoisonedModel(t)
	seed := uint64(5)
	for _, tc := range []struct {
		name     string
		req      Request
		pipeline bool
	}{
		{"greedy", Request{MaxTokens: 6}, true},
		{"greedy, not pipelined", Request{MaxTokens: 6}, false},
		{"sampled", Request{MaxTokens: 6, Sampling: SamplingParams{Temperature: 0.9, TopK: 40, Seed: &seed}}, true},
		{"logprobs", Request{MaxTokens: 6, Logprobs: true, TopLogprobs: 2}, true},
		{"penalties", Request{MaxTokens: 6, Sampling: SamplingParams{Temperature: 0.7, PresencePenalty: 0.5, Seed: &seed}}, true},
		{"min tokens", Request{MaxTokens: 6, MinTokens: 3}, true},
		{"prompt logprobs", Request{MaxTokens: 6, PromptLogprobs: true, PromptTopLogprobs: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, m, Config{DisablePipelining: !tc.pipeline})
			run := func(prompt []int32) *Stream {
				req := tc.req
				req.PromptIDs = prompt
				st, err := e.Add(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			// A clean prompt is one whose continuation never reads the poisoned token either (a request
			// that draws it ends with the error at the next step, as it should).
			var clean []int32
			var alone result
			for k := int32(10); ; k++ {
				clean = []int32{1, 2, 3, k}
				if alone = collect(t, run(clean)); !slices.Contains(alone.ids, poisonToken) {
					break
				}
				if !errors.Is(alone.err, ErrNonFiniteLogits) {
					t.Fatalf("a request that drew the poisoned token: %+v", alone)
				}
			}
			if alone.reason == FinishError || len(alone.ids) == 0 {
				t.Fatalf("clean request alone: %+v", alone)
			}
			poisoned := []int32{1, poisonToken, 3, 4}
			bad, good := run(poisoned), run(clean)
			got, gotBad := collect(t, good), collect(t, bad)
			if !errors.Is(gotBad.err, ErrNonFiniteLogits) || gotBad.reason != FinishError {
				t.Errorf("poisoned request: reason %q, err %v, want FinishError with ErrNonFiniteLogits", gotBad.reason, gotBad.err)
			}
			if len(gotBad.ids) != 0 || len(gotBad.logprobs) != 0 {
				t.Errorf("poisoned request streamed tokens %v, logprobs %v", gotBad.ids, gotBad.logprobs)
			}
			if !slices.Equal(got.ids, alone.ids) || got.reason != alone.reason {
				t.Errorf("clean request beside it: %v (%s), alone %v (%s)", got.ids, got.reason, alone.ids, alone.reason)
			}
			if n, want := e.Stats().NonFiniteLogits, e.Stats().Finished[FinishError]; n != want || n == 0 {
				t.Errorf("Stats().NonFiniteLogits = %d, want the %d requests that finished with an error", n, want)
			}
			if after := collect(t, run(clean)); !slices.Equal(after.ids, alone.ids) {
				t.Errorf("next request: %v, want %v", after.ids, alone.ids)
			}
			closeAndCheckPool(t, e)
		})
	}
}
