package scheduler

import (
	"testing"

	"github.com/gollm/gollm/kvcache"
)

// arrival is a request of a policy scenario: Prompt tokens arriving before step At, generating Output.
type arrival struct {
	At, Prompt, Output int
}

// policyRun is what a scenario measured, in steps (the scheduler's unit of time; a step's cost grows
// with its tokens, which the budget bounds).
type policyRun struct {
	steps  int
	ttft   []int // per arrival: steps from its arrival to the step that sampled its first token (1: the next step)
	maxITL []int // per arrival: the most steps between two of its tokens
	tokens []int // per step: the batch's tokens
}

// runPolicy plays the arrivals through a scheduler with a pool they all fit, checking the rules that hold
// at every step:
//
//   - a step never exceeds the budget (Config.MaxNumBatchedTokens);
//   - every running sequence that has a token to decode gets it in the step (decodes are never starved
//     by prefill, whatever the prompts waiting or under way);
//   - prefill runs in arrival order: a prompt's chunk is never in a step while an earlier prompt still
//     has uncomputed tokens and got less than all that was left of the budget;
//   - the budget left after the decodes goes to prefill for as long as prompts have tokens to compute
//     (work conserving: the chunks are as large as the budget allows, which is what gives prefill its
//     throughput), within the sequence cap and, with Config.LongPrefillTokenThreshold, each chunk
//     within the threshold.
func runPolicy(t *testing.T, cfg Config, arrivals []arrival) policyRun {
	t.Helper()
	total := 0
	for _, a := range arrivals {
		total += a.Prompt + a.Output
	}
	s, _ := newTestScheduler(t, kvcache.Config{NumBlocks: total/16 + len(arrivals) + 1, BlockSize: 16}, cfg)
	seqs := make([]*Sequence, len(arrivals))
	first := make([]int, len(arrivals))
	last := make([]int, len(arrivals))
	run := policyRun{ttft: make([]int, len(arrivals)), maxITL: make([]int, len(arrivals))}
	for step := 0; ; step++ {
		for i, a := range arrivals {
			if a.At == step {
				seqs[i] = mustAdd(t, s, kvcache.SeqID(i), iota32(a.Prompt, 1), Limits{MaxTokens: a.Output})
			}
		}
		if !s.HasUnfinished() {
			if step > arrivals[len(arrivals)-1].At {
				break
			}
			continue
		}
		// What each sequence has to compute before the step, and the budget's share of decodes.
		decoding := map[*Sequence]bool{}
		pending := map[*Sequence]int{}
		for _, seq := range seqs {
			if seq == nil || seq.Finished() {
				continue
			}
			if seq.Status() == StatusRunning && seq.NumOutputTokens() > 0 {
				decoding[seq] = true
			}
			if rem := seq.NumPromptTokens() - seq.NumComputed(); rem > 0 {
				pending[seq] = rem
			}
		}
		b := s.Schedule()
		run.tokens = append(run.tokens, b.NumTokens)
		if b.NumTokens > cfg.MaxNumBatchedTokens {
			t.Fatalf("step %d: %d tokens, budget %d", step, b.NumTokens, cfg.MaxNumBatchedTokens)
		}
		if len(b.Preempted) > 0 || len(b.Finished) > 0 {
			t.Fatalf("step %d: preempted %v, finished %v with a pool that holds every sequence", step, b.Preempted, b.Finished)
		}
		got := map[*Sequence]int{}
		for _, c := range b.Chunks {
			got[c.Seq] = c.Len
		}
		for seq := range decoding {
			if got[seq] != 1 {
				t.Fatalf("step %d: decoding sequence %d got %d tokens, want 1", step, seq.ID(), got[seq])
			}
		}
		left := cfg.MaxNumBatchedTokens - b.NumDecodes
		capped := func(n int) int { // a chunk's most tokens, with the threshold
			if cfg.LongPrefillTokenThreshold > 0 {
				return min(n, cfg.LongPrefillTokenThreshold)
			}
			return n
		}
		prefilled, starved := 0, false
		for _, c := range b.Prefills() {
			if starved {
				t.Fatalf("step %d: sequence %d's chunk runs while an earlier prompt did not get the rest of the budget", step, c.Seq.ID())
			}
			if c.Len < capped(pending[c.Seq]) && c.Len < left-prefilled {
				starved = true
			}
			prefilled += c.Len
		}
		want := 0
		for _, rem := range pending {
			want += capped(rem)
		}
		if s.NumRunning() < cfg.MaxNumSeqs || s.NumWaiting() == 0 {
			if want = min(want, left); prefilled != want {
				t.Fatalf("step %d: %d prefill tokens, want %d (%d prompt tokens to compute, %d of the budget left after %d decodes)",
					step, prefilled, want, want, left, b.NumDecodes)
			}
		}
		var sampled []int32
		for _, c := range b.Chunks {
			if c.NeedsLogits {
				sampled = append(sampled, 1)
			}
		}
		if _, err := s.Update(b, sampled); err != nil {
			t.Fatal(err)
		}
		for i, seq := range seqs {
			if seq == nil || got[seq] == 0 || seq.NumOutputTokens() == 0 || last[i] == step+1 {
				continue
			}
			if seq.NumOutputTokens() == 1 {
				first[i] = step + 1
				run.ttft[i] = step + 1 - arrivals[i].At
			} else {
				run.maxITL[i] = max(run.maxITL[i], step+1-last[i])
			}
			last[i] = step + 1
		}
		run.steps = step + 1
	}
	for i, seq := range seqs {
		if seq.NumOutputTokens() != arrivals[i].Output {
			t.Fatalf("sequence %d: %d output tokens, want %d", i, seq.NumOutputTokens(), arrivals[i].Output)
		}
	}
	return run
}

// TestChunkedPrefillPolicy plays the scheduler's policy (package doc, Policy) through scenarios of long
// and short prompts beside running decodes: decodes first, every step; then the prompts under way and the
// admissions, in arrival order, each chunk as large as what is left of the budget. The figures each
// scenario checks follow from that rule: a prompt of P tokens takes ceil(P / (budget − decodes)) steps to
// its first token when it is alone in prefill, and a prompt arriving behind others waits for the prefill
// tokens ahead of it, at budget − decodes a step.
func TestChunkedPrefillPolicy(t *testing.T) {
	ceil := func(a, b int) int { return (a + b - 1) / b }
	for _, tc := range []struct {
		name     string
		cfg      Config
		arrivals []arrival
		check    func(t *testing.T, r policyRun)
	}{
		{
			// Four sequences decode while a 1000-token prompt arrives: they keep a token every step
			// (ITL 1), and the prompt takes the 60 tokens a step they leave.
			name: "decodes beside a long prompt",
			cfg:  Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 64},
			arrivals: []arrival{
				{At: 0, Prompt: 8, Output: 40}, {At: 0, Prompt: 8, Output: 40}, {At: 0, Prompt: 8, Output: 40},
				{At: 0, Prompt: 8, Output: 40}, {At: 3, Prompt: 1000, Output: 4},
			},
			check: func(t *testing.T, r policyRun) {
				for i := range 4 {
					if r.maxITL[i] != 1 {
						t.Errorf("decoding sequence %d waited %d steps between tokens", i, r.maxITL[i])
					}
				}
				if want := ceil(1000, 64-4); r.ttft[4] != want {
					t.Errorf("long prompt: first token after %d steps, want %d", r.ttft[4], want)
				}
			},
		},
		{
			// The budget no larger than the sequence cap: with every other sequence decoding, the long
			// prompt still gets a token a step, so it always progresses.
			name: "budget at the sequence cap",
			cfg:  Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 4},
			arrivals: []arrival{
				{At: 0, Prompt: 2, Output: 200}, {At: 0, Prompt: 2, Output: 200}, {At: 0, Prompt: 2, Output: 200},
				{At: 2, Prompt: 120, Output: 2},
			},
			check: func(t *testing.T, r policyRun) {
				if r.ttft[3] != 120 {
					t.Errorf("long prompt: first token after %d steps, want 120 (one token a step beside 3 decodes)", r.ttft[3])
				}
				for i := range 3 {
					if r.maxITL[i] != 1 {
						t.Errorf("decoding sequence %d waited %d steps between tokens", i, r.maxITL[i])
					}
				}
			},
		},
		{
			// A short prompt arriving behind a long one waits for the long one's chunks, no longer:
			// first come, first served, in chunks of the budget; it then decodes beside the long one.
			name: "short prompt behind a long one",
			cfg:  Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 128},
			arrivals: []arrival{
				{At: 0, Prompt: 1000, Output: 30}, {At: 2, Prompt: 10, Output: 30},
			},
			check: func(t *testing.T, r policyRun) {
				// At its arrival the long prompt has 1000 − 2 × 128 tokens left: those and its own 10
				// at 128 a step.
				if want := ceil(1000-2*128+10, 128); r.ttft[1] > want {
					t.Errorf("short prompt: first token after %d steps, want at most %d", r.ttft[1], want)
				}
				if r.ttft[0] != ceil(1000, 128) {
					t.Errorf("long prompt: first token after %d steps, want %d", r.ttft[0], ceil(1000, 128))
				}
				if r.maxITL[0] != 1 || r.maxITL[1] != 1 {
					t.Errorf("max steps between tokens %v, want 1 for both", r.maxITL)
				}
			},
		},
		{
			// With a threshold below the budget the long prompt takes at most 64 tokens a step, and the
			// short one behind it is admitted beside it at once: its first token after one step. The long
			// prompt pays for it, 64 tokens a step even while alone.
			name: "short prompt behind a long one, with a threshold",
			cfg:  Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 128, LongPrefillTokenThreshold: 64},
			arrivals: []arrival{
				{At: 0, Prompt: 1000, Output: 30}, {At: 2, Prompt: 10, Output: 30},
			},
			check: func(t *testing.T, r policyRun) {
				if r.ttft[1] != 1 {
					t.Errorf("short prompt: first token after %d steps, want 1", r.ttft[1])
				}
				if want := ceil(1000, 64); r.ttft[0] != want {
					t.Errorf("long prompt: first token after %d steps, want %d", r.ttft[0], want)
				}
				if r.maxITL[1] != 1 {
					t.Errorf("short prompt: %d steps between tokens, want 1", r.maxITL[1])
				}
			},
		},
		{
			// Short prompts arriving together with a long one ahead of them share the budget in
			// arrival order: the long prompt's chunks first, then theirs in the same step once it is
			// done; the step after it has started decoding carries them all.
			name: "burst of short prompts behind a long one",
			cfg:  Config{MaxNumSeqs: 16, MaxNumBatchedTokens: 256},
			arrivals: []arrival{
				{At: 0, Prompt: 600, Output: 8}, {At: 1, Prompt: 40, Output: 8}, {At: 1, Prompt: 40, Output: 8},
				{At: 1, Prompt: 40, Output: 8}, {At: 1, Prompt: 40, Output: 8},
			},
			check: func(t *testing.T, r policyRun) {
				if r.ttft[0] != ceil(600, 256) {
					t.Errorf("long prompt: first token after %d steps, want %d", r.ttft[0], ceil(600, 256))
				}
				// At step 1 the long prompt has 600 − 256 left; the four short ones follow.
				bound := ceil(600-256+4*40, 256-1)
				for i := 1; i <= 4; i++ {
					if r.ttft[i] > bound {
						t.Errorf("short prompt %d: first token after %d steps, want at most %d", i, r.ttft[i], bound)
					}
				}
			},
		},
		{
			// A larger budget trades the decodes' step size for the prompt's steps: with 8 decoding, a
			// 4096-token prompt's first token comes after ceil(4096/(B−8)) steps, each step carrying B
			// tokens (the decodes' inter-token latency is that step's time).
			name: "large budget",
			cfg:  Config{MaxNumSeqs: 16, MaxNumBatchedTokens: 2048},
			arrivals: []arrival{
				{At: 0, Prompt: 4, Output: 64}, {At: 0, Prompt: 4, Output: 64}, {At: 0, Prompt: 4, Output: 64},
				{At: 0, Prompt: 4, Output: 64}, {At: 0, Prompt: 4, Output: 64}, {At: 0, Prompt: 4, Output: 64},
				{At: 0, Prompt: 4, Output: 64}, {At: 0, Prompt: 4, Output: 64}, {At: 1, Prompt: 4096, Output: 2},
			},
			check: func(t *testing.T, r policyRun) {
				if want := ceil(4096, 2048-8); r.ttft[8] != want {
					t.Errorf("long prompt: first token after %d steps, want %d", r.ttft[8], want)
				}
				for step := 1; step < 1+ceil(4096, 2048-8)-1; step++ {
					if r.tokens[step] != 2048 {
						t.Errorf("step %d: %d tokens while the prompt prefills, want the whole budget", step, r.tokens[step])
					}
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runPolicy(t, tc.cfg, tc.arrivals)
			if testing.Verbose() {
				t.Logf("%d steps; TTFT %v steps; max ITL %v steps", r.steps, r.ttft, r.maxITL)
			}
			tc.check(t, r)
		})
	}
}
