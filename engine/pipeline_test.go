package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Pipelined decode (a step queued before the previous step's tokens are read, fed from them on the
// model's side) gives exactly what the engine gives when every step's logits come to the host and each
// step waits for the last: for greedy and seeded requests, with stop tokens and MaxTokens ending
// sequences while the next step is already queued, stop strings, a KV pool small enough to preempt,
// and a waiting queue.
func TestPipelinedDecodeEqualsWaiting(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 3), 256, 4)
	rng := rand.New(rand.NewPCG(3, 4))
	base := make([]Request, 10)
	for i := range base {
		base[i] = Request{ID: fmt.Sprint("r", i), PromptIDs: randomPrompt(rng, 1+(i*13)%40), MaxTokens: 6 + (i*7)%25, IgnoreEOS: true}
		if i%3 == 1 {
			seed := uint64(40 + i)
			base[i].Sampling = SamplingParams{Temperature: 0.8, TopK: 40, Seed: &seed}
		}
	}
	// Stop tokens and strings the requests do produce: taken from a first run without them.
	free := newEngine(t, logitsOnly{m}, Config{})
	first := runConcurrent(t, free, base)
	closeAndCheckPool(t, free)
	stopping := make([]Request, len(base))
	for i, r := range base {
		stopping[i] = r
		out := first[i].ids
		switch i % 3 {
		case 0:
			stopping[i].StopTokenIDs = []int32{out[(i*5)%len(out)]}
		case 1:
			stopping[i].StopTokenIDs = []int32{out[len(out)/2]}
		case 2:
			if text := first[i].text; len(text) > 6 {
				stopping[i].Stop = []string{text[3:5]}
			}
		}
	}
	for _, tc := range []struct {
		name      string
		reqs      []Request
		numBlocks int // 0: the model's
		cfg       Config
	}{
		{"length", base, 0, Config{}},
		{"stops", stopping, 0, Config{}},
		{"queue", stopping, 0, Config{MaxNumSeqs: 3}},
		{"preempt", base, 24, Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mm := m
			if tc.numBlocks > 0 {
				mm = loadTinyModel(t, writeTinyModel(t, 3), tc.numBlocks, 4)
			}
			ref := newEngine(t, logitsOnly{mm}, tc.cfg)
			want := runConcurrent(t, ref, tc.reqs)
			closeAndCheckPool(t, ref)
			if n := ref.Stats().PipelinedSteps; n != 0 {
				t.Fatalf("the host-logits engine pipelined %d steps", n)
			}
			off := tc.cfg
			off.DisablePipelining = true
			plain := newEngine(t, mm, off)
			checkSame(t, runConcurrent(t, plain, tc.reqs), want)
			closeAndCheckPool(t, plain)
			if n := plain.Stats().PipelinedSteps; n != 0 {
				t.Fatalf("DisablePipelining: %d steps pipelined", n)
			}
			e := newEngine(t, mm, tc.cfg)
			got := runConcurrent(t, e, tc.reqs)
			closeAndCheckPool(t, e)
			checkSame(t, got, want)
			st := e.Stats()
			if st.PipelinedSteps == 0 {
				t.Errorf("no step was pipelined: %+v", st)
			}
			if tc.numBlocks > 0 && st.Preemptions == 0 {
				t.Errorf("the small pool preempted nobody: %+v", st)
			}
			t.Logf("steps %d, pipelined %d, preemptions %d", st.Steps, st.PipelinedSteps, st.Preemptions)
		})
	}
}
