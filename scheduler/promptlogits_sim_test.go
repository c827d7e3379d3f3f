package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/kvcache"
)

// promptLogitRows returns the prompt positions of b whose logits the engine reads for prompt logprobs
// (engine.promptRows): in the chunks of sequences with Limits.PromptLogits and no output token yet,
// every prompt position but the last.
func promptLogitRows(b *Batch) [][2]int {
	var rows [][2]int // chunk index, position
	for i, c := range b.Chunks {
		seq := c.Seq
		if !seq.WantsPromptLogits() {
			continue
		}
		for pos := c.Start; pos < min(c.Start+c.Len, seq.numPrompt-1); pos++ {
			rows = append(rows, [2]int{i, pos})
		}
	}
	return rows
}

// checkPromptLogitsBudget checks a batch against MaxPromptLogitRows and the prefix-cache rule of
// sequences that still want their prompt's logits: the prefill tokens of such sequences stay within
// the cap, and one admitted in this batch (waiting before) starts at position 0.
func checkPromptLogitsBudget(t *testing.T, s *Scheduler, b *Batch, waitingBefore []*Sequence) (admitted int) {
	t.Helper()
	n := 0
	for i, c := range b.Chunks {
		seq := c.Seq
		if !seq.WantsPromptLogits() {
			continue
		}
		if i >= b.NumDecodes {
			n += c.Len
		}
		if slices.Contains(waitingBefore, seq) {
			admitted++
			if c.Start != 0 {
				t.Fatalf("%v, which wants its prompt's logits, admitted with %d tokens from the prefix cache", seq, c.Start)
			}
		}
	}
	if n > s.cfg.MaxPromptLogitRows {
		t.Fatalf("batch %q: %d prefill tokens of sequences wanting their prompt's logits, over %d", describe(b), n, s.cfg.MaxPromptLogitRows)
	}
	return admitted
}

// TestPromptLogitsPipelinedSimulation runs the pipelined equivalence workloads with half of the
// sequences wanting their prompt's logits and a small MaxPromptLogitRows, driven as the engine drives
// the scheduler: a step with prompt rows runs on the host and is not followed by ScheduleNext, and a
// ScheduleNext batch with prompt rows is cancelled (Discard before its predecessor's Update), the
// engine's pickParams refusing it. Every batch keeps to the cap, such a sequence never takes
// prefix-cache hits before its first token, every prompt position's logits are read (in a step that
// was not discarded) before that token, a cancelled batch leaves the queue and the pool's statistics
// as they were, and every sequence gets its reference output.
func TestPromptLogitsPipelinedSimulation(t *testing.T) {
	var refused, admissions, hostSteps, preemptions int
	for seed := range uint64(150) {
		r := rand.New(rand.NewPCG(seed, 0x91))
		w := randomWorkload(r, seed)
		w.sched.MaxPromptLogitRows = 1 + r.IntN(8)
		for i := range w.seqs {
			w.seqs[i].limits.PromptLogits = r.IntN(2) == 0
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			pool, err := kvcache.NewPool(w.pool)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(w.sched, pool)
			if err != nil {
				t.Fatal(err)
			}
			p := &pipeRun{t: t, w: w, pipelined: true, r: rand.New(rand.NewPCG(seed, 5)), s: s, pool: pool,
				kv: make([]int32, w.pool.NumBlocks*w.pool.BlockSize)}
			for _, ws := range w.seqs {
				p.seqs = append(p.seqs, NewSequence(ws.id, ws.prompt, ws.limits))
			}
			read := map[*Sequence][]bool{} // prompt positions whose logits were read
			for iter := 0; ; iter++ {
				if iter > 100000 {
					t.Fatalf("no progress: %d waiting, %d running", s.NumWaiting(), s.NumRunning())
				}
				for p.added < len(p.seqs) && w.seqs[p.added].addStep <= p.counts.steps {
					if err := s.Add(p.seqs[p.added]); err != nil && !errors.Is(err, ErrTooLong) {
						t.Fatalf("Add: %v", err)
					}
					p.added++
				}
				p.aborts()
				if p.added == len(p.seqs) && !s.HasUnfinished() {
					break
				}
				var decoding []*Sequence
				for _, seq := range s.running {
					if seq.NumTokens()-seq.NumComputed() == 1 {
						decoding = append(decoding, seq)
					}
				}
				waiting := slices.Clone(s.waiting)
				b := s.Schedule()
				p.counts.steps++
				preemptions += len(b.Preempted)
				checkBatch(t, s, b, decoding)
				admissions += checkPromptLogitsBudget(t, s, b, waiting)
				if b.Empty() {
					continue
				}
				p.launch(b, nil)
				rows := promptLogitRows(b)
				if len(rows) > 0 {
					hostSteps++
				} else {
					waiting := slices.Clone(s.waiting)
					before, used := pool.Stats(), pool.Stats().UsedBlocks
					if next := s.ScheduleNext(b); next != nil {
						admitted := p.checkNext(b, next, waiting)
						admissions += checkPromptLogitsBudget(t, s, next, waiting)
						if len(promptLogitRows(next)) > 0 {
							refused++
							if err := s.Discard(next); err != nil {
								t.Fatal(err)
							}
							after := pool.Stats()
							if !slices.Equal(s.waiting, waiting) || after.UsedBlocks != used ||
								after.QueriedTokens != before.QueriedTokens || after.HitTokens != before.HitTokens {
								t.Fatalf("after the refused batch %q: waiting %v, pool %+v; before %v, %+v",
									describe(next), s.waiting, after, waiting, before)
							}
							for _, seq := range admitted {
								if seq.Status() != StatusWaiting || seq.numReserved != 0 {
									t.Fatalf("refused admission of %v not undone", seq)
								}
							}
						} else {
							p.counts.steps++
							p.launch(next, p.flights[0].sampled)
							p.flights[1].admitted = admitted
						}
					}
				}
				p.aborts()
				outputs := map[*Sequence]int{}
				for _, seq := range p.seqs {
					outputs[seq] = seq.NumOutputTokens()
				}
				discards := p.counts.discards
				for len(p.flights) > 0 {
					p.handBack()
				}
				if p.counts.discards == discards { // the host step ran: its prompt rows were read
					for _, row := range rows {
						seq := b.Chunks[row[0]].Seq
						if read[seq] == nil {
							read[seq] = make([]bool, seq.numPrompt)
						}
						read[seq][row[1]] = true
					}
				}
				for _, seq := range p.seqs {
					if !seq.limits.PromptLogits || outputs[seq] != 0 || seq.NumOutputTokens() == 0 {
						continue
					}
					for pos := range seq.numPrompt - 1 {
						if read[seq] == nil || !read[seq][pos] {
							t.Fatalf("%v sampled its first token before the logits of prompt position %d were read", seq, pos)
						}
					}
				}
				if err := pool.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
			}
			for i, seq := range p.seqs {
				ws := w.seqs[i]
				if seq.arrival == 0 { // rejected by Add
					continue
				}
				if !seq.Finished() || seq.numAhead != 0 {
					t.Fatalf("%v did not finish cleanly", seq)
				}
				if ws.limits.PromptLogits && seq.NumCachedTokens() != 0 {
					t.Errorf("%v wants its prompt's logits but took %d cached tokens", seq, seq.NumCachedTokens())
				}
				switch seq.FinishReason() {
				case FinishStop, FinishLength:
					if want, reason := reference(ws.prompt, ws.limits); !slices.Equal(seq.Output(), want) || seq.FinishReason() != reason {
						t.Errorf("%v: %v (%s), reference %v (%s)", seq, seq.Output(), seq.FinishReason(), want, reason)
					}
				case FinishAbort:
					if seq.NumOutputTokens() != ws.abortAt {
						t.Errorf("%v aborted with %d output tokens, want %d", seq, seq.NumOutputTokens(), ws.abortAt)
					}
				}
			}
			if st := pool.Stats(); st.UsedBlocks != 0 || pool.NumSeqs() != 0 {
				t.Fatalf("leak after the run: %+v, %d sequences", st, pool.NumSeqs())
			}
		})
	}
	t.Logf("admissions wanting prompt logits %d, host steps %d, refused pipelined steps %d, preemptions %d",
		admissions, hostSteps, refused, preemptions)
	for name, n := range map[string]int{"admissions wanting prompt logits": admissions, "host steps": hostSteps,
		"refused pipelined steps": refused, "preemptions": preemptions} {
		if n == 0 {
			t.Errorf("no %s: the test does not exercise them", name)
		}
	}
}
