package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/kvcache"
)

// seqState is what ScheduleNext must leave untouched when it returns nil.
type seqState struct {
	tokens                                      []int32 // internal, placeholder included
	numAhead, numComputed, numReserved, poolLen int
	status                                      Status
}

type schedState struct {
	stats       kvcache.Stats
	seqs        map[kvcache.SeqID]seqState
	outstanding int
	step        uint64
}

func snapshot(t *testing.T, s *Scheduler) schedState {
	t.Helper()
	st := schedState{stats: s.pool.Stats(), seqs: map[kvcache.SeqID]seqState{}, outstanding: len(s.outstanding), step: s.step}
	for id, seq := range s.live {
		n, _ := s.pool.NumTokens(id)
		st.seqs[id] = seqState{slices.Clone(seq.tokens), seq.numAhead, seq.numComputed, seq.numReserved, n, seq.status}
	}
	if err := s.pool.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return st
}

func (a schedState) diff(b schedState) string {
	if a.stats != b.stats || a.outstanding != b.outstanding || a.step != b.step || len(a.seqs) != len(b.seqs) {
		return fmt.Sprintf("%+v, %d outstanding, step %d -> %+v, %d outstanding, step %d",
			a.stats, a.outstanding, a.step, b.stats, b.outstanding, b.step)
	}
	for id, x := range a.seqs {
		y := b.seqs[id]
		if !slices.Equal(x.tokens, y.tokens) || x.numAhead != y.numAhead || x.numComputed != y.numComputed ||
			x.numReserved != y.numReserved || x.poolLen != y.poolLen || x.status != y.status {
			return fmt.Sprintf("sequence %d: %+v -> %+v", id, x, y)
		}
	}
	return ""
}

// sampleAll samples with the simulation's fake model for every chunk that needs logits. Not for
// ScheduleNext batches, whose input tokens are not in their sequences yet.
func sampleAll(b *Batch) []int32 {
	var sampled []int32
	for _, c := range b.Chunks {
		if c.NeedsLogits {
			sampled = append(sampled, modelSample(c))
		}
	}
	return sampled
}

func mustUpdate(t *testing.T, s *Scheduler, b *Batch, sampled []int32) []*Sequence {
	t.Helper()
	updated, err := s.Update(b, sampled)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	return updated
}

func TestScheduleNextRefuses(t *testing.T) {
	tests := []struct {
		name  string
		pool  kvcache.Config
		sched Config
		// setup returns the batch to pass to ScheduleNext, outstanding as setup leaves it.
		setup func(t *testing.T, s *Scheduler) *Batch
	}{{
		name:  "Update of the previous batch missing",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			next := s.ScheduleNext(b)
			if next == nil {
				t.Fatal("ScheduleNext of a plain decode step returned nil")
			}
			return next
		},
	}, {
		name:  "two batches outstanding",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			if s.ScheduleNext(b) == nil {
				t.Fatal("ScheduleNext of a plain decode step returned nil")
			}
			return b
		},
	}, {
		name:  "prev already updated",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			return b
		},
	}, {
		name: "pool exhausted",
		// Seq 1 (2 tokens in 1 block) decodes at position 2 into the last free block, so its
		// placeholder at 3 needs no block; seq 2 (4 tokens, 2 blocks) needs a block for its
		// placeholder at 4 and there is none. Nothing may change, seq 1 included.
		pool:  kvcache.Config{NumBlocks: 4, BlockSize: 2},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(2, 0), Limits{MaxTokens: 10})
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			if st := s.pool.Stats(); st.FreeBlocks+st.CachedBlocks != 0 {
				t.Fatalf("pool not exhausted: %+v", st)
			}
			return b
		},
	}, {
		name: "pool exhausted, a sequence waiting",
		// As above, with a short prompt waiting that would fit once a block is free: the decodes
		// come first, and ScheduleNext never preempts for them.
		pool:  kvcache.Config{NumBlocks: 4, BlockSize: 2},
		sched: Config{MaxNumSeqs: 3, MaxNumBatchedTokens: 8},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(2, 0), Limits{MaxTokens: 10})
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			mustAdd(t, s, 3, iota32(1, 20), Limits{MaxTokens: 10})
			return b
		},
	}, {
		name:  "every sequence reaches MaxTokens with prev's token",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 2})
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 2})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			return s.Schedule()
		},
	}, {
		name:  "every sequence of prev finished",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			if err := s.Abort(1); err != nil {
				t.Fatal(err)
			}
			return b
		},
	}, {
		name:  "nil prev",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch { return nil },
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestScheduler(t, tc.pool, tc.sched)
			prev := tc.setup(t, s)
			before := snapshot(t, s)
			if next := s.ScheduleNext(prev); next != nil {
				t.Fatalf("ScheduleNext = %+v, want nil", next.Chunks)
			}
			if d := before.diff(snapshot(t, s)); d != "" {
				t.Errorf("ScheduleNext returned nil but changed the state: %s", d)
			}
		})
	}
}

func TestScheduleNextBatch(t *testing.T) {
	const bs = 2
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 16, BlockSize: bs}, Config{MaxNumSeqs: 3, MaxNumBatchedTokens: 16})
	a := mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
	short := mustAdd(t, s, 2, iota32(2, 10), Limits{MaxTokens: 2}) // one output left after prev
	c := mustAdd(t, s, 3, iota32(4, 20), Limits{MaxTokens: 10})
	b := s.Schedule()
	mustUpdate(t, s, b, sampleAll(b))
	mustAdd(t, s, 4, iota32(2, 30), Limits{MaxTokens: 10}) // waits: MaxNumSeqs run

	prev := s.Schedule()
	if prev.NumDecodes != 3 {
		t.Fatalf("prev: %+v", prev.Chunks)
	}
	before := map[*Sequence][]int32{a: slices.Clone(a.Tokens()), c: slices.Clone(c.Tokens())}
	next := s.ScheduleNext(prev)
	if next == nil {
		t.Fatal("ScheduleNext = nil")
	}
	if got, want := next.InputFrom, []int32{0, 2}; !slices.Equal(got, want) {
		t.Fatalf("InputFrom %v, want %v (seq 2 reaches MaxTokens with prev's token)", got, want)
	}
	if next.NumDecodes != 2 || next.NumLogits != 2 || next.NumTokens != 2 || len(next.Chunks) != 2 ||
		!slices.Equal(next.TokenIDs, []int32{0, 0}) || !slices.Equal(next.LogitIndices, []int32{0, 1}) {
		t.Fatalf("next batch %+v", next)
	}
	for i, ch := range next.Chunks {
		p := prev.Chunks[next.InputFrom[i]]
		seq := ch.Seq
		table, _ := pool.BlockTable(seq.ID())
		want := Chunk{
			Seq: p.Seq, Start: p.Start + 1, Len: 1, Offset: i, ContextLen: p.Start + 2, NeedsLogits: true,
		}
		if ch.Seq != want.Seq || ch.Start != want.Start || ch.Len != 1 || ch.Offset != i || ch.ContextLen != want.ContextLen ||
			!ch.NeedsLogits || !slices.Equal(ch.Tokens, []int32{0}) || !slices.Equal(ch.BlockTable, table) ||
			!slices.Equal(ch.SlotMapping, []int32{kvcache.Slot(table, bs, ch.Start)}) || next.Positions[i] != int32(ch.Start) {
			t.Errorf("chunk %d: %+v, want %+v", i, ch, want)
		}
		// The placeholder is hidden, but holds a slot in the pool.
		if n, _ := pool.NumTokens(seq.ID()); n != seq.NumTokens()+1 || !slices.Equal(seq.Tokens(), before[seq]) ||
			seq.NumOutputTokens() != 1 || len(seq.Output()) != 1 || seq.LastToken() != before[seq][len(before[seq])-1] {
			t.Errorf("%v: pool holds %d tokens, tokens %v (before %v), output %v, last %d",
				seq, n, seq.Tokens(), before[seq], seq.Output(), seq.LastToken())
		}
		if got, want := seq.String(), fmt.Sprintf("seq %d (running, %d+1 tokens, %d computed)", seq.ID(), seq.NumPromptTokens(), p.Start); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	if err := pool.CheckInvariants(); err != nil {
		t.Fatal(err)
	}

	// Batches go back oldest first.
	if _, err := s.Update(next, []int32{1, 2}); !errors.Is(err, ErrStaleBatch) {
		t.Errorf("Update of the later batch first = %v, want ErrStaleBatch", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Schedule with two batches outstanding did not panic")
			}
		}()
		s.Schedule()
	}()

	sampled := []int32{7, 8, 9}
	updated := mustUpdate(t, s, prev, sampled)
	if len(updated) != 3 || short.FinishReason() != FinishLength {
		t.Fatalf("updated %v; %v", updated, short)
	}
	for i, ch := range next.Chunks {
		seq := ch.Seq
		if seq.numAhead != 0 || seq.LastToken() != sampled[next.InputFrom[i]] || seq.NumTokens() != ch.Start+1 {
			t.Errorf("%v after Update(prev): last token %d, %d tokens", seq, seq.LastToken(), seq.NumTokens())
		}
	}
	// The next batch runs with the sampled tokens as inputs; its Update is a plain one.
	updated = mustUpdate(t, s, next, []int32{5, 6})
	if len(updated) != 2 || !slices.Equal(a.Output()[1:], []int32{7, 5}) || !slices.Equal(c.Output()[1:], []int32{9, 6}) {
		t.Fatalf("after Update(next): %v %v", a.Output(), c.Output())
	}
	if a.NumComputed() != a.NumTokens()-1 || c.NumComputed() != c.NumTokens()-1 {
		t.Errorf("computed: %v, %v", a, c)
	}
	// Back to normal scheduling: seq 4 is admitted now that seq 2 left.
	b = s.Schedule()
	if len(b.Chunks) != 3 || b.Chunks[2].Seq.ID() != 4 {
		t.Fatalf("after the pipelined steps: %+v", b.Chunks)
	}
	if b.InputFrom != nil {
		t.Errorf("Schedule's batch has InputFrom %v", b.InputFrom)
	}
	mustUpdate(t, s, b, sampleAll(b))
	for _, id := range []kvcache.SeqID{1, 3, 4} {
		if err := s.Abort(id); err != nil {
			t.Fatal(err)
		}
	}
	checkNoLeak(t, pool)
}

// TestScheduleNextEvictsCachedBlocks: evictable prefix-cache blocks count as available, as they do
// for Append.
func TestScheduleNextEvictsCachedBlocks(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 4, BlockSize: 2, PrefixCaching: true},
		Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8})
	mustAdd(t, s, 1, iota32(5, 50), Limits{MaxTokens: 1})
	b := s.Schedule()
	mustUpdate(t, s, b, sampleAll(b)) // seq 1 finishes; its 2 full blocks stay cached
	mustAdd(t, s, 2, iota32(3, 0), Limits{MaxTokens: 10})
	b = s.Schedule()
	mustUpdate(t, s, b, sampleAll(b)) // seq 2: 4 tokens in 2 blocks
	prev := s.Schedule()
	if st := pool.Stats(); st.FreeBlocks != 0 || st.CachedBlocks != 2 {
		t.Fatalf("setup: %+v", st)
	}
	next := s.ScheduleNext(prev)
	if next == nil {
		t.Fatal("ScheduleNext = nil with evictable blocks")
	}
	if st := pool.Stats(); st.CachedBlocks != 1 || st.UsedBlocks != 3 {
		t.Errorf("after ScheduleNext: %+v", st)
	}
	mustUpdate(t, s, prev, []int32{1})
	mustUpdate(t, s, next, []int32{2})
	if err := s.Abort(2); err != nil {
		t.Fatal(err)
	}
	checkNoLeak(t, pool)
}

// TestPlaceholderFinishes covers sequences that finish while they hold a placeholder, or whose
// pipelined step is thrown away.
func TestPlaceholderFinishes(t *testing.T) {
	const stop = 99
	type result struct {
		updatedPrev, updatedNext []kvcache.SeqID
		output1                  []int32
		reason1                  FinishReason
		used                     int // blocks held after the second Update
	}
	tests := []struct {
		name string
		// between runs after ScheduleNext; returns prev's sampled tokens. after runs after
		// Update(prev), before Update(next).
		between func(t *testing.T, s *Scheduler, seq1 *Sequence) []int32
		after   func(t *testing.T, s *Scheduler, seq1 *Sequence)
		want    result
	}{{
		name:    "stop token replaces the placeholder",
		between: func(t *testing.T, s *Scheduler, seq1 *Sequence) []int32 { return []int32{stop, 5} },
		want:    result{[]kvcache.SeqID{1, 2}, []kvcache.SeqID{2}, []int32{3, stop}, FinishStop, 3},
	}, {
		name: "aborted before Update(prev)",
		between: func(t *testing.T, s *Scheduler, seq1 *Sequence) []int32 {
			if err := s.Abort(1); err != nil {
				t.Fatal(err)
			}
			if seq1.NumTokens() != 4 || len(seq1.tokens) != 4 {
				t.Errorf("aborted %v keeps %d tokens", seq1, len(seq1.tokens))
			}
			return []int32{4, 5}
		},
		want: result{[]kvcache.SeqID{2}, []kvcache.SeqID{2}, []int32{3}, FinishAbort, 3},
	}, {
		name:    "finished by the engine after Update(prev)",
		between: func(t *testing.T, s *Scheduler, seq1 *Sequence) []int32 { return []int32{4, 5} },
		after: func(t *testing.T, s *Scheduler, seq1 *Sequence) {
			if err := s.Finish(seq1, FinishStop); err != nil {
				t.Fatal(err)
			}
		},
		want: result{[]kvcache.SeqID{1, 2}, []kvcache.SeqID{2}, []int32{3, 4}, FinishStop, 3},
	}, {
		name:    "both run",
		between: func(t *testing.T, s *Scheduler, seq1 *Sequence) []int32 { return []int32{4, 5} },
		want:    result{[]kvcache.SeqID{1, 2}, []kvcache.SeqID{1, 2}, []int32{3, 4, 6}, FinishNone, 6},
	}}
	ids := func(seqs []*Sequence) []kvcache.SeqID {
		var out []kvcache.SeqID
		for _, seq := range seqs {
			out = append(out, seq.ID())
		}
		return out
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: 2}, Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8})
			seq1 := mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10, StopTokenIDs: []int32{stop}})
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, []int32{3, 3}) // 4 tokens each, in 2 blocks each
			prev := s.Schedule()
			next := s.ScheduleNext(prev) // placeholders at position 4: a third block each
			if next == nil || pool.Stats().UsedBlocks != 6 {
				t.Fatalf("ScheduleNext = %v, %+v", next, pool.Stats())
			}
			sampled := tc.between(t, s, seq1)
			got := result{updatedPrev: ids(mustUpdate(t, s, prev, sampled))}
			if tc.after != nil {
				tc.after(t, s, seq1)
			}
			if err := pool.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if seq1.Finished() && pool.Stats().UsedBlocks != 3 {
				t.Errorf("finished seq 1 still holds blocks: %+v", pool.Stats())
			}
			got.updatedNext = ids(mustUpdate(t, s, next, []int32{6, 7}))
			got.output1, got.reason1, got.used = seq1.Output(), seq1.FinishReason(), pool.Stats().UsedBlocks
			if !slices.Equal(got.updatedPrev, tc.want.updatedPrev) || !slices.Equal(got.updatedNext, tc.want.updatedNext) ||
				!slices.Equal(got.output1, tc.want.output1) || got.reason1 != tc.want.reason1 || got.used != tc.want.used {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			for _, id := range []kvcache.SeqID{1, 2} {
				if _, live := s.Sequence(id); live {
					if err := s.Abort(id); err != nil {
						t.Fatal(err)
					}
				}
			}
			checkNoLeak(t, pool)
		})
	}
}

func TestDiscardPipelined(t *testing.T) {
	const bs = 2
	tests := []struct {
		name string
		// run hands prev and next back; it returns the sequence's expected output and number of
		// computed tokens.
		run        func(t *testing.T, s *Scheduler, prev, next *Batch) ([]int32, int)
		wantStart  int // of the decode the next Schedule plans
		wantBlocks int // held by the sequence before that Schedule
		wantSlots  int // tokens holding a slot then
	}{{
		name: "discarding prev drops next and the placeholder",
		run: func(t *testing.T, s *Scheduler, prev, next *Batch) ([]int32, int) {
			if err := s.Discard(prev); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(next, []int32{1}); !errors.Is(err, ErrStaleBatch) {
				t.Errorf("Update of the dropped later batch = %v, want ErrStaleBatch", err)
			}
			if err := s.Discard(next); !errors.Is(err, ErrStaleBatch) {
				t.Errorf("Discard of the dropped later batch = %v, want ErrStaleBatch", err)
			}
			return []int32{3}, 3
		},
		wantStart: 3, wantBlocks: 2, wantSlots: 4,
	}, {
		name: "discarding next before Update(prev) cancels it",
		run: func(t *testing.T, s *Scheduler, prev, next *Batch) ([]int32, int) {
			if err := s.Discard(next); err != nil {
				t.Fatal(err)
			}
			if n, _ := s.pool.NumTokens(1); n != 4 || s.pool.Stats().UsedBlocks != 2 {
				t.Errorf("after the cancel the pool holds %d tokens, %+v", n, s.pool.Stats())
			}
			if _, err := s.Update(next, []int32{1}); !errors.Is(err, ErrStaleBatch) {
				t.Errorf("Update of the cancelled batch = %v, want ErrStaleBatch", err)
			}
			if again := s.ScheduleNext(prev); again == nil {
				t.Error("ScheduleNext after a cancel = nil")
			} else if err := s.Discard(again); err != nil {
				t.Fatal(err)
			}
			mustUpdate(t, s, prev, []int32{8})
			return []int32{3, 8}, 4
		},
		wantStart: 4, wantBlocks: 2, wantSlots: 4,
	}, {
		name: "discarding next after Update(prev) keeps prev's token",
		run: func(t *testing.T, s *Scheduler, prev, next *Batch) ([]int32, int) {
			mustUpdate(t, s, prev, []int32{8})
			if err := s.Discard(next); err != nil {
				t.Fatal(err)
			}
			return []int32{3, 8}, 4
		},
		wantStart: 4, wantBlocks: 3, wantSlots: 5,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: bs, PrefixCaching: true},
				Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8})
			seq := mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, []int32{3}) // 4 tokens, 2 blocks
			prev := s.Schedule()
			next := s.ScheduleNext(prev) // placeholder at 4: a third block
			if next == nil {
				t.Fatal("ScheduleNext = nil")
			}
			wantOut, wantComputed := tc.run(t, s, prev, next)
			if !slices.Equal(seq.Output(), wantOut) || seq.NumComputed() != wantComputed || seq.numAhead != 0 {
				t.Errorf("%v: output %v, want %v, %d computed", seq, seq.Output(), wantOut, wantComputed)
			}
			if n, _ := pool.NumTokens(1); n != tc.wantSlots || pool.Stats().UsedBlocks != tc.wantBlocks {
				t.Errorf("pool holds %d tokens in %d blocks, want %d in %d", n, pool.Stats().UsedBlocks, tc.wantSlots, tc.wantBlocks)
			}
			if err := pool.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			// The thrown-away decode is scheduled again.
			b = s.Schedule()
			if len(b.Chunks) != 1 || b.Chunks[0].Start != tc.wantStart || b.Chunks[0].Len != 1 {
				t.Fatalf("after Discard: %+v", b.Chunks)
			}
			mustUpdate(t, s, b, []int32{9})
			if err := s.Abort(1); err != nil {
				t.Fatal(err)
			}
			checkNoLeak(t, pool)
		})
	}
}

// TestPipelinedPrefixCacheHit: a block completed by a token that was a placeholder when its slot
// was reserved enters the prefix cache with the sampled token, so a later prompt repeating the
// sequence hits it.
func TestPipelinedPrefixCacheHit(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 16, BlockSize: 2, PrefixCaching: true},
		Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8})
	seq := mustAdd(t, s, 1, []int32{10, 11, 12}, Limits{MaxTokens: 10})
	b := s.Schedule()
	mustUpdate(t, s, b, []int32{13}) // [10 11 12 13]
	prev := s.Schedule()             // decode at 3
	// Pipelined from here on: every new token is a placeholder when its slot is reserved.
	for _, tok := range []int32{14, 15, 16} {
		next := s.ScheduleNext(prev)
		if next == nil {
			t.Fatal("ScheduleNext = nil")
		}
		mustUpdate(t, s, prev, []int32{tok})
		prev = next
	}
	mustUpdate(t, s, prev, []int32{17})
	if got, want := seq.Tokens(), []int32{10, 11, 12, 13, 14, 15, 16, 17}; !slices.Equal(got, want) {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	if err := s.Finish(seq, FinishStop); err != nil { // 7 computed: blocks [14 15] and [12 13] full
		t.Fatal(err)
	}
	again := mustAdd(t, s, 2, []int32{10, 11, 12, 13, 14, 15, 16, 99}, Limits{MaxTokens: 1})
	b = s.Schedule()
	if len(b.Chunks) != 1 || b.Chunks[0].Start != 6 || again.NumCachedTokens() != 6 {
		t.Fatalf("later prompt: chunks %+v, %d cached tokens, want 6", b.Chunks, again.NumCachedTokens())
	}
	mustUpdate(t, s, b, []int32{1})
	checkNoLeak(t, pool)
}

// describe describes a batch like step does: "d<id>:<start>+<len>" for decodes, "p<id>:..." for
// prefill chunks, "*" marking chunks that need logits.
func describe(b *Batch) string {
	var parts []string
	for i, c := range b.Chunks {
		kind := "p"
		if i < b.NumDecodes {
			kind = "d"
		}
		desc := fmt.Sprintf("%s%d:%d+%d", kind, c.Seq.ID(), c.Start, c.Len)
		if c.NeedsLogits {
			desc += "*"
		}
		parts = append(parts, desc)
	}
	return strings.Join(parts, " ")
}

func waitingIDs(s *Scheduler) []kvcache.SeqID {
	var ids []kvcache.SeqID
	for _, seq := range s.waiting {
		ids = append(ids, seq.ID())
	}
	return ids
}

// TestScheduleNextPlans checks what ScheduleNext plans beside the decodes (prefills under way,
// admissions), the per-row InputFrom, and that running both batches, then plain steps, gives every
// sequence the output it has alone.
func TestScheduleNextPlans(t *testing.T) {
	tests := []struct {
		name  string
		pool  kvcache.Config
		sched Config
		// setup adds sequences and returns prev, outstanding.
		setup       func(t *testing.T, s *Scheduler) *Batch
		wantPrev    string // sanity check of the setup
		want        string
		wantFrom    []int32
		wantWaiting []kvcache.SeqID
	}{{
		name:  "admission beside the decodes",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 10})
			return b
		},
		wantPrev: "d1:3+1*",
		want:     "d1:4+1* p2:0+3*",
		wantFrom: []int32{0, -1, -1, -1},
	}, {
		name:  "prompt ends in prev",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(5, 0), Limits{MaxTokens: 10})
			return s.Schedule()
		},
		wantPrev: "p1:0+5*",
		want:     "d1:5+1*",
		wantFrom: []int32{0},
	}, {
		name:  "decodes beside an unfinished prefill",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 4},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			mustAdd(t, s, 2, iota32(9, 10), Limits{MaxTokens: 10})
			b := s.Schedule() // p1:0+3* p2:0+1
			mustUpdate(t, s, b, sampleAll(b))
			return s.Schedule()
		},
		wantPrev: "d1:3+1* p2:1+3",
		want:     "d1:4+1* p2:4+3",
		wantFrom: []int32{0, -1, -1, -1},
	}, {
		name:  "prefill continues alone",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 1, MaxNumBatchedTokens: 4},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(10, 0), Limits{MaxTokens: 3})
			return s.Schedule()
		},
		wantPrev: "p1:0+4",
		want:     "p1:4+4",
		wantFrom: []int32{-1, -1, -1, -1},
	}, {
		name:  "budget: decodes, then the prefill, none left to admit",
		pool:  kvcache.Config{NumBlocks: 32, BlockSize: 4},
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 6},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(2, 0), Limits{MaxTokens: 10})
			mustAdd(t, s, 2, iota32(2, 10), Limits{MaxTokens: 10})
			b := s.Schedule() // p1:0+2* p2:0+2*
			mustUpdate(t, s, b, sampleAll(b))
			mustAdd(t, s, 3, iota32(10, 20), Limits{MaxTokens: 10})
			b = s.Schedule()
			mustAdd(t, s, 4, iota32(2, 40), Limits{MaxTokens: 10})
			return b
		},
		wantPrev:    "d1:2+1* d2:2+1* p3:0+4",
		want:        "d1:3+1* d2:3+1* p3:4+4",
		wantFrom:    []int32{0, 1, -1, -1, -1, -1},
		wantWaiting: []kvcache.SeqID{4},
	}, {
		name:  "budget: decodes, the prefill's end, an admission",
		pool:  kvcache.Config{NumBlocks: 32, BlockSize: 4},
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 8},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(2, 0), Limits{MaxTokens: 10})
			mustAdd(t, s, 2, iota32(2, 10), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			mustAdd(t, s, 3, iota32(10, 20), Limits{MaxTokens: 10})
			b = s.Schedule()
			mustAdd(t, s, 4, iota32(3, 40), Limits{MaxTokens: 10})
			mustAdd(t, s, 5, iota32(1, 50), Limits{MaxTokens: 10})
			return b
		},
		wantPrev:    "d1:2+1* d2:2+1* p3:0+6",
		want:        "d1:3+1* d2:3+1* p3:6+4* p4:0+2",
		wantFrom:    []int32{0, 1, -1, -1, -1, -1, -1, -1},
		wantWaiting: []kvcache.SeqID{5},
	}, {
		name: "admission stopped by blocks",
		// Seq 1 holds 2 blocks and its placeholder a third; seq 2 needs 4 of the 3 left, and seq 3,
		// which would fit, does not overtake it.
		pool:  kvcache.Config{NumBlocks: 6, BlockSize: 2},
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 4})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			mustAdd(t, s, 2, iota32(7, 10), Limits{MaxTokens: 4})
			mustAdd(t, s, 3, iota32(1, 20), Limits{MaxTokens: 10})
			return b
		},
		wantPrev:    "d1:3+1*",
		want:        "d1:4+1*",
		wantFrom:    []int32{0},
		wantWaiting: []kvcache.SeqID{2, 3},
	}, {
		name:  "admission cap",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 10})
			mustAdd(t, s, 3, iota32(3, 20), Limits{MaxTokens: 10})
			return b
		},
		wantPrev:    "d1:3+1*",
		want:        "d1:4+1* p2:0+3*",
		wantFrom:    []int32{0, -1, -1, -1},
		wantWaiting: []kvcache.SeqID{3},
	}, {
		name:  "every sequence of prev finished, one waiting",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			if err := s.Abort(1); err != nil {
				t.Fatal(err)
			}
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 10})
			return b
		},
		wantPrev: "d1:3+1*",
		want:     "p2:0+3*",
		wantFrom: []int32{-1, -1, -1},
	}, {
		name:  "the prompt's last token left out of prev",
		pool:  kvcache.Config{NumBlocks: 16, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 16},
		setup: func(t *testing.T, s *Scheduler) *Batch {
			// Schedule never leaves a running sequence's last token out (ScheduleNext may, when
			// the budget runs out), so cut it out of the batch by hand.
			mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 10})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			b = s.Schedule()
			b.Chunks, b.NumDecodes, b.NumLogits = b.Chunks[:1], 1, 1
			return b
		},
		wantPrev: "d1:3+1*",
		want:     "d1:4+1* p2:3+1*",
		wantFrom: []int32{0, -1},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, tc.pool, tc.sched)
			prev := tc.setup(t, s)
			if got := describe(prev); got != tc.wantPrev {
				t.Fatalf("setup: prev %q, want %q", got, tc.wantPrev)
			}
			var seqs []*Sequence
			for _, seq := range s.live {
				seqs = append(seqs, seq)
			}
			next := s.ScheduleNext(prev)
			if next == nil {
				t.Fatal("ScheduleNext = nil")
			}
			if got := describe(next); got != tc.want {
				t.Errorf("next %q, want %q", got, tc.want)
			}
			if !slices.Equal(next.InputFrom, tc.wantFrom) || len(next.InputFrom) != next.NumTokens {
				t.Errorf("InputFrom %v, want %v", next.InputFrom, tc.wantFrom)
			}
			if got := waitingIDs(s); !slices.Equal(got, tc.wantWaiting) {
				t.Errorf("waiting %v, want %v", got, tc.wantWaiting)
			}
			for i, c := range next.Chunks {
				if i < next.NumDecodes && !slices.Equal(c.Tokens, []int32{0}) ||
					i >= next.NumDecodes && !slices.Equal(c.Tokens, c.Seq.Tokens()[c.Start:c.Start+c.Len]) {
					t.Errorf("chunk %d of %v: tokens %v", i, c.Seq, c.Tokens)
				}
			}
			if err := pool.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			// Run both (next's inputs are in its sequences once prev is updated), then plainly.
			mustUpdate(t, s, prev, sampleAll(prev))
			mustUpdate(t, s, next, sampleAll(next))
			for range 100 {
				if !s.HasUnfinished() {
					break
				}
				step(t, s, modelSample)
			}
			for _, seq := range seqs {
				if seq.FinishReason() == FinishAbort {
					continue
				}
				want, reason := reference(seq.Prompt(), seq.Limits())
				if !slices.Equal(seq.Output(), want) || seq.FinishReason() != reason {
					t.Errorf("%v: output %v (%s), alone %v (%s)", seq, seq.Output(), seq.FinishReason(), want, reason)
				}
			}
			checkNoLeak(t, pool)
		})
	}
}

// TestScheduleNextUndoAdmission: a ScheduleNext batch that admitted sequences and is discarded
// before its predecessor's Update (cancelled, or dropped with the predecessor) puts them back at the
// head of the waiting queue, blocks freed, as if never admitted; discarded after the predecessor's
// Update, it leaves them running.
func TestScheduleNextUndoAdmission(t *testing.T) {
	shared := iota32(6, 100)
	tests := []struct {
		name        string
		discard     func(t *testing.T, s *Scheduler, prev, next *Batch)
		wantRunning bool // seq 2 and 3 still admitted
	}{{
		name: "cancel",
		discard: func(t *testing.T, s *Scheduler, prev, next *Batch) {
			if err := s.Discard(next); err != nil {
				t.Fatal(err)
			}
			mustUpdate(t, s, prev, sampleAll(prev))
		},
	}, {
		name: "discard of prev",
		discard: func(t *testing.T, s *Scheduler, prev, next *Batch) {
			if err := s.Discard(prev); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "discard after Update(prev)",
		discard: func(t *testing.T, s *Scheduler, prev, next *Batch) {
			mustUpdate(t, s, prev, sampleAll(prev))
			if err := s.Discard(next); err != nil {
				t.Fatal(err)
			}
		},
		wantRunning: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 16, BlockSize: 2, PrefixCaching: true},
				Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 32})
			mustAdd(t, s, 9, append(slices.Clone(shared), 1), Limits{MaxTokens: 1})
			b := s.Schedule()
			mustUpdate(t, s, b, sampleAll(b)) // seq 9 finishes; blocks of shared stay cached
			seq1 := mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 10})
			b = s.Schedule()
			mustUpdate(t, s, b, sampleAll(b))
			prev := s.Schedule()
			seq2 := mustAdd(t, s, 2, append(slices.Clone(shared), 7, 8), Limits{MaxTokens: 10})
			seq3 := mustAdd(t, s, 3, iota32(3, 20), Limits{MaxTokens: 10})
			before := pool.Stats()
			next := s.ScheduleNext(prev)
			if got, want := describe(next), "d1:4+1* p2:6+2* p3:0+3*"; got != want {
				t.Fatalf("next %q, want %q", got, want)
			}
			if seq2.NumCachedTokens() != 6 || seq2.Status() != StatusRunning || s.NumWaiting() != 0 {
				t.Fatalf("admitted %v with %d cached tokens", seq2, seq2.NumCachedTokens())
			}
			seq4 := mustAdd(t, s, 4, iota32(2, 30), Limits{MaxTokens: 10}) // arrives meanwhile
			tc.discard(t, s, prev, next)
			if err := pool.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if tc.wantRunning {
				if seq2.Status() != StatusRunning || seq3.Status() != StatusRunning || seq2.NumComputed() != 6 ||
					seq2.NumCachedTokens() != 6 || !slices.Equal(waitingIDs(s), []kvcache.SeqID{4}) {
					t.Fatalf("%v, %v; waiting %v", seq2, seq3, waitingIDs(s))
				}
			} else {
				for _, seq := range []*Sequence{seq2, seq3} {
					if _, err := pool.NumTokens(seq.ID()); seq.Status() != StatusWaiting || seq.NumComputed() != 0 ||
						seq.NumCachedTokens() != 0 || seq.admitted || seq.numReserved != 0 || !errors.Is(err, kvcache.ErrUnknownSeq) {
						t.Errorf("%v not back as new: %d cached, pool: %v", seq, seq.NumCachedTokens(), err)
					}
				}
				if got := waitingIDs(s); !slices.Equal(got, []kvcache.SeqID{2, 3, 4}) {
					t.Errorf("waiting %v, want [2 3 4]", got)
				}
				if after := pool.Stats(); after.UsedBlocks != before.UsedBlocks ||
					after.CachedBlocks != before.CachedBlocks {
					t.Errorf("pool %+v after the undo, %+v before ScheduleNext", after, before)
				}
			}
			// Admitted again by plain steps, with the same prefix-cache hit; outputs as alone.
			for range 100 {
				if !s.HasUnfinished() {
					break
				}
				step(t, s, modelSample)
			}
			if seq2.NumCachedTokens() != 6 {
				t.Errorf("%v: %d cached tokens at its admission, want 6", seq2, seq2.NumCachedTokens())
			}
			for _, seq := range []*Sequence{seq1, seq2, seq3, seq4} {
				want, reason := reference(seq.Prompt(), seq.Limits())
				if !slices.Equal(seq.Output(), want) || seq.FinishReason() != reason {
					t.Errorf("%v: output %v (%s), alone %v (%s)", seq, seq.Output(), seq.FinishReason(), want, reason)
				}
			}
			checkNoLeak(t, pool)
		})
	}
}

// TestScheduleNextPromptLogits: a pipelined step keeps to MaxPromptLogitRows as Schedule does, and
// admits a sequence that wants its prompt's logits without prefix-cache hits.
func TestScheduleNextPromptLogits(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 32, BlockSize: 4, PrefixCaching: true},
		Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, MaxPromptLogitRows: 5})
	mustAdd(t, s, 1, iota32(12, 100), Limits{MaxTokens: 2, PromptLogits: true})
	b1 := s.Schedule()
	if got := describe(b1); got != "p1:0+5" {
		t.Fatalf("Schedule: %q", got)
	}
	// Another with a prompt sharing a computed block would hit it, if it did not want logits.
	mustAdd(t, s, 2, iota32(9, 100), Limits{MaxTokens: 1, PromptLogits: true})
	b2 := s.ScheduleNext(b1)
	if got := describe(b2); got != "p1:5+5" {
		t.Fatalf("ScheduleNext: %q, want seq 1's next 5 and seq 2 waiting for the cap", got)
	}
	mustUpdate(t, s, b1, sampleAll(b1))
	mustUpdate(t, s, b2, sampleAll(b2))
	b3 := s.Schedule()
	if got := describe(b3); got != "p1:10+2* p2:0+3" {
		t.Fatalf("Schedule: %q", got)
	}
	b4 := s.ScheduleNext(b3)
	if got := describe(b4); got != "d1:12+1* p2:3+5" {
		t.Fatalf("ScheduleNext: %q", got)
	}
	mustUpdate(t, s, b3, sampleAll(b3))
	mustUpdate(t, s, b4, sampleAll(b4))
	for s.HasUnfinished() {
		b := s.Schedule()
		mustUpdate(t, s, b, sampleAll(b))
	}
	if st := pool.Stats(); st.QueriedTokens != 0 {
		t.Errorf("queried %d tokens; want none (both skip the cache)", st.QueriedTokens)
	}
	checkNoLeak(t, pool)
}
