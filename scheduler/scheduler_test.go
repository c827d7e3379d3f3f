package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/kvcache"
)

func newTestScheduler(t *testing.T, pc kvcache.Config, sc Config) (*Scheduler, *kvcache.Pool) {
	t.Helper()
	pool, err := kvcache.NewPool(pc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(sc, pool)
	if err != nil {
		t.Fatal(err)
	}
	return s, pool
}

func mustAdd(t *testing.T, s *Scheduler, id kvcache.SeqID, prompt []int32, limits Limits) *Sequence {
	t.Helper()
	seq := NewSequence(id, prompt, limits)
	if err := s.Add(seq); err != nil {
		t.Fatalf("Add(%v): %v", seq, err)
	}
	return seq
}

func iota32(n int, first int32) []int32 {
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = first + int32(i)
	}
	return tokens
}

// modelSample samples with the simulation's fake model.
func modelSample(c Chunk) int32 { return nextToken(c.Seq.Tokens()[:c.ContextLen]) }

// step runs one Schedule/Update round and describes the batch as "d<id>:<start>+<len>" for decodes
// and "p<id>:..." for prefill chunks, "*" marking chunks that need logits, then "!<id>" for
// preempted and "x<id>" for sequences finished by the scheduler.
func step(t *testing.T, s *Scheduler, sample func(Chunk) int32) (string, []*Sequence) {
	t.Helper()
	b := s.Schedule()
	var parts []string
	if d := describe(b); d != "" {
		parts = append(parts, d)
	}
	var sampled []int32
	for _, c := range b.Chunks {
		if c.NeedsLogits {
			sampled = append(sampled, sample(c))
		}
	}
	for _, seq := range b.Preempted {
		parts = append(parts, fmt.Sprintf("!%d", seq.ID()))
	}
	for _, seq := range b.Finished {
		parts = append(parts, fmt.Sprintf("x%d", seq.ID()))
	}
	updated, err := s.Update(b, sampled)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	return strings.Join(parts, " "), updated
}

func checkSteps(t *testing.T, s *Scheduler, want []string) {
	t.Helper()
	for i, w := range want {
		if got, _ := step(t, s, modelSample); got != w {
			t.Fatalf("step %d: %q, want %q", i+1, got, w)
		}
	}
	if s.HasUnfinished() {
		t.Fatalf("unfinished sequences after %d steps", len(want))
	}
}

func checkNoLeak(t *testing.T, pool *kvcache.Pool) {
	t.Helper()
	if st := pool.Stats(); st.UsedBlocks != 0 || pool.NumSeqs() != 0 {
		t.Errorf("blocks leaked: %+v, %d sequences", st, pool.NumSeqs())
	}
	if err := pool.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

func TestNewValidates(t *testing.T) {
	pool, err := kvcache.NewPool(kvcache.Config{NumBlocks: 4, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		pool *kvcache.Pool
		ok   bool
	}{
		{"ok", Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 4}, pool, true},
		{"nil pool", Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 4}, nil, false},
		{"no sequences", Config{MaxNumSeqs: 0, MaxNumBatchedTokens: 4}, pool, false},
		{"budget below cap", Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 4}, pool, false},
		{"threshold", Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 4, LongPrefillTokenThreshold: 2}, pool, true},
		{"negative threshold", Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 4, LongPrefillTokenThreshold: -1}, pool, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg, tc.pool); (err == nil) != tc.ok {
				t.Errorf("New(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
			}
		})
	}
}

func TestAddValidates(t *testing.T) {
	s, _ := newTestScheduler(t, kvcache.Config{NumBlocks: 4, BlockSize: 4}, Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8})
	mustAdd(t, s, 1, []int32{1, 2}, Limits{MaxTokens: 1})
	finished := mustAdd(t, s, 2, []int32{1}, Limits{MaxTokens: 1})
	if err := s.Abort(2); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		seq  *Sequence
		want error
	}{
		{"nil", nil, ErrInvalidSequence},
		{"empty prompt", NewSequence(3, nil, Limits{MaxTokens: 1}), ErrInvalidSequence},
		{"no output allowed", NewSequence(3, []int32{1}, Limits{}), ErrInvalidSequence},
		{"duplicate id", NewSequence(1, []int32{1}, Limits{MaxTokens: 1}), ErrDuplicateSeq},
		{"prompt larger than the pool", NewSequence(3, iota32(17, 0), Limits{MaxTokens: 1}), ErrTooLong},
		{"re-added", finished, ErrInvalidSequence},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Add(tc.seq); !errors.Is(err, tc.want) {
				t.Errorf("Add = %v, want %v", err, tc.want)
			}
		})
	}
	if s.NumWaiting() != 1 {
		t.Errorf("%d waiting, want 1", s.NumWaiting())
	}
	// A prompt exactly filling the pool is accepted (its output needs no slot until it decodes).
	mustAdd(t, s, 4, iota32(16, 0), Limits{MaxTokens: 1})
}

func TestStepPlans(t *testing.T) {
	type add struct {
		id     kvcache.SeqID
		prompt int
		max    int
	}
	tests := []struct {
		name  string
		pool  kvcache.Config
		sched Config
		adds  []add
		want  []string
	}{{
		name:  "chunked prefill alongside decodes",
		pool:  kvcache.Config{NumBlocks: 64, BlockSize: 4},
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 8},
		adds:  []add{{1, 3, 4}, {2, 20, 2}},
		want: []string{
			"p1:0+3* p2:0+5",
			"d1:3+1* p2:5+7",
			"d1:4+1* p2:12+7",
			"d1:5+1* d2:19+1*", // the last prompt token runs as a decode
			"d2:20+1*",
		},
	}, {
		name:  "sequence cap",
		pool:  kvcache.Config{NumBlocks: 64, BlockSize: 4},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 64},
		adds:  []add{{1, 2, 2}, {2, 2, 3}, {3, 2, 1}},
		want: []string{
			"p1:0+2* p2:0+2*",
			"d1:2+1* d2:2+1*",
			"d2:3+1* p3:0+2*",
		},
	}, {
		name: "preemption by recompute of the latest arrival",
		// 4 blocks of 2 slots; both prompts take 2 blocks; seq 1's fifth token needs a third.
		pool:  kvcache.Config{NumBlocks: 4, BlockSize: 2},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8},
		adds:  []add{{1, 3, 3}, {2, 3, 3}},
		want: []string{
			"p1:0+3* p2:0+3*",
			"d1:3+1* d2:3+1*",
			"d1:4+1* !2", // no admission in a step that preempted
			"p2:0+5*",    // prompt and 2 outputs recomputed, third output sampled
		},
	}, {
		name:  "recompute reuses the preempted sequence's cached blocks",
		pool:  kvcache.Config{NumBlocks: 4, BlockSize: 2, PrefixCaching: true},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8},
		adds:  []add{{1, 3, 3}, {2, 3, 3}},
		want: []string{
			"p1:0+3* p2:0+3*",
			"d1:3+1* d2:3+1*",
			"d1:4+1* !2", // seq 1's new block evicts seq 2's tail block, freed first
			"p2:2+3*",    // seq 2's first block is still cached
		},
	}, {
		name:  "the latest arrival preempts itself",
		pool:  kvcache.Config{NumBlocks: 4, BlockSize: 2},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8},
		adds:  []add{{1, 3, 3}, {2, 4, 2}},
		want: []string{
			"p1:0+3* p2:0+4*",
			"d1:3+1* !2", // seq 2's fifth token needs a block; it is the latest arrival
			"d1:4+1*",    // seq 2 (3 blocks) does not fit beside seq 1 (3 blocks)
			"p2:0+5*",
		},
	}, {
		name:  "a sequence outgrowing the pool finishes with an error",
		pool:  kvcache.Config{NumBlocks: 2, BlockSize: 2},
		sched: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8},
		adds:  []add{{1, 3, 10}},
		want: []string{
			"p1:0+3*",
			"d1:3+1*",
			"x1", // its fifth token needs a third block; the pool has two
		},
	}, {
		name:  "the waiting head is never overtaken",
		pool:  kvcache.Config{NumBlocks: 4, BlockSize: 4},
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16},
		// seq 2 needs 3 blocks, only 2 are free while seq 1 runs; seq 3 would fit but waits.
		adds: []add{{1, 8, 2}, {2, 12, 1}, {3, 2, 1}},
		want: []string{
			"p1:0+8*",
			"d1:8+1*",
			"p2:0+12* p3:0+2*",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, tc.pool, tc.sched)
			for _, a := range tc.adds {
				mustAdd(t, s, a.id, iota32(a.prompt, int32(a.id)*100), Limits{MaxTokens: a.max})
			}
			checkSteps(t, s, tc.want)
			checkNoLeak(t, pool)
		})
	}
}

func TestAbortAndFinishReleaseBlocksAtOnce(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: 2}, Config{MaxNumSeqs: 1, MaxNumBatchedTokens: 8})
	running := mustAdd(t, s, 1, iota32(5, 0), Limits{MaxTokens: 10})
	waiting := mustAdd(t, s, 2, iota32(3, 0), Limits{MaxTokens: 10})
	step(t, s, modelSample)
	if running.Status() != StatusRunning || waiting.Status() != StatusWaiting || pool.Stats().UsedBlocks != 3 {
		t.Fatalf("after one step: %v, %v, %+v", running, waiting, pool.Stats())
	}
	if err := s.Abort(1); err != nil {
		t.Fatal(err)
	}
	if st := pool.Stats(); st.UsedBlocks != 0 || running.FinishReason() != FinishAbort || running.Status() != StatusFinished {
		t.Fatalf("after abort: %v, %+v", running, st)
	}
	if err := s.Abort(1); !errors.Is(err, ErrUnknownSeq) {
		t.Errorf("second Abort = %v, want ErrUnknownSeq", err)
	}
	if err := s.Finish(running, FinishStop); !errors.Is(err, ErrFinished) {
		t.Errorf("Finish of a finished sequence = %v, want ErrFinished", err)
	}
	if err := s.Finish(waiting, FinishNone); err == nil {
		t.Error("Finish with FinishNone succeeded")
	}
	// The waiting sequence is admitted in the very next step.
	if got, _ := step(t, s, modelSample); got != "p2:0+3*" {
		t.Errorf("step after abort: %q", got)
	}
	if err := s.Finish(waiting, FinishStop); err != nil {
		t.Fatal(err)
	}
	if s.HasUnfinished() {
		t.Error("unfinished sequences left")
	}
	checkNoLeak(t, pool)

	t.Run("abort a waiting sequence", func(t *testing.T) {
		s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: 2}, Config{MaxNumSeqs: 1, MaxNumBatchedTokens: 8})
		mustAdd(t, s, 1, iota32(2, 0), Limits{MaxTokens: 1})
		mustAdd(t, s, 2, iota32(2, 0), Limits{MaxTokens: 1})
		if err := s.Abort(1); err != nil {
			t.Fatal(err)
		}
		checkSteps(t, s, []string{"p2:0+2*"})
		checkNoLeak(t, pool)
	})
}

func TestAbortBetweenScheduleAndUpdate(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: 2}, Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 8})
	a := mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 2})
	b := mustAdd(t, s, 2, iota32(3, 10), Limits{MaxTokens: 2})
	batch := s.Schedule()
	if err := s.Abort(1); err != nil {
		t.Fatal(err)
	}
	updated, err := s.Update(batch, []int32{7, 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(updated) != 1 || updated[0] != b || !slices.Equal(b.Output(), []int32{8}) || len(a.Output()) != 0 {
		t.Fatalf("updated %v; outputs %v, %v", updated, a.Output(), b.Output())
	}
	checkSteps(t, s, []string{"d2:3+1*"})
	checkNoLeak(t, pool)
}

func TestBatchProtocol(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: 2}, Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 8})
	if b := s.Schedule(); !b.Empty() {
		t.Fatalf("batch with nothing to run: %+v", b)
	} else if _, err := s.Update(b, nil); err != nil {
		t.Fatalf("Update of an empty batch: %v", err)
	}
	seq := mustAdd(t, s, 1, iota32(3, 0), Limits{MaxTokens: 3})

	b := s.Schedule()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Schedule with a batch outstanding did not panic")
			}
		}()
		s.Schedule()
	}()
	if _, err := s.Update(b, []int32{1, 2}); err == nil {
		t.Error("Update with too many sampled tokens succeeded")
	}
	if err := s.Discard(b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(b, []int32{1}); !errors.Is(err, ErrStaleBatch) {
		t.Errorf("Update after Discard = %v, want ErrStaleBatch", err)
	}
	if seq.NumComputed() != 0 || seq.NumOutputTokens() != 0 {
		t.Errorf("discarded batch changed %v", seq)
	}
	// The discarded work is scheduled again.
	b2 := s.Schedule()
	if len(b2.Chunks) != 1 || b2.Chunks[0].Start != 0 || b2.Chunks[0].Len != 3 ||
		!slices.Equal(b2.Chunks[0].SlotMapping, b.Chunks[0].SlotMapping) {
		t.Fatalf("after Discard: %+v", b2.Chunks)
	}
	if _, err := s.Update(b2, []int32{5}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(b2, []int32{5}); !errors.Is(err, ErrStaleBatch) {
		t.Errorf("second Update = %v, want ErrStaleBatch", err)
	}
	if err := s.Discard(b2); !errors.Is(err, ErrStaleBatch) {
		t.Errorf("Discard of an updated batch = %v, want ErrStaleBatch", err)
	}
	c := s.Schedule()
	if got := c.Chunks[0].AppendPositions(nil); !slices.Equal(got, []int32{3}) || c.Chunks[0].ContextLen != 4 {
		t.Errorf("decode positions %v, context %d", got, c.Chunks[0].ContextLen)
	}
	if err := s.Discard(c); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(1); err != nil {
		t.Fatal(err)
	}
	checkNoLeak(t, pool)
}

func TestPrefixCacheSkipsCachedTokens(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 16, BlockSize: 4, PrefixCaching: true},
		Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 32})
	prompt := iota32(10, 0)
	first := mustAdd(t, s, 1, prompt, Limits{MaxTokens: 3})
	step(t, s, modelSample)
	// While the first still runs, a second with the same prompt shares its 2 computed full blocks.
	second := mustAdd(t, s, 2, prompt, Limits{MaxTokens: 3})
	if got, _ := step(t, s, modelSample); got != "d1:10+1* p2:8+2*" {
		t.Fatalf("step 2: %q", got)
	}
	for s.HasUnfinished() {
		step(t, s, modelSample)
	}
	if first.NumCachedTokens() != 0 || second.NumCachedTokens() != 8 {
		t.Errorf("cached tokens %d, %d; want 0, 8", first.NumCachedTokens(), second.NumCachedTokens())
	}
	if !slices.Equal(first.Output(), second.Output()) {
		t.Errorf("outputs differ: %v, %v", first.Output(), second.Output())
	}
	if st := pool.Stats(); st.HitRate() != 8.0/20 {
		t.Errorf("hit rate %v, want 0.4", st.HitRate())
	}
	checkNoLeak(t, pool)
}

func TestStopTokens(t *testing.T) {
	// The sampler emits 5, 6, 7, ... in order.
	sampleCount := func() func(Chunk) int32 {
		n := int32(4)
		return func(Chunk) int32 { n++; return n }
	}
	tests := []struct {
		name       string
		limits     Limits
		wantOut    []int32
		wantReason FinishReason
	}{
		{"length", Limits{MaxTokens: 3}, []int32{5, 6, 7}, FinishLength},
		{"stop token", Limits{MaxTokens: 5, StopTokenIDs: []int32{6}}, []int32{5, 6}, FinishStop},
		{"stop token first", Limits{MaxTokens: 5, StopTokenIDs: []int32{9, 5}}, []int32{5}, FinishStop},
		{"min tokens defer stop", Limits{MaxTokens: 5, MinTokens: 3, StopTokenIDs: []int32{6, 7}}, []int32{5, 6, 7}, FinishStop},
		{"stop and length together", Limits{MaxTokens: 2, StopTokenIDs: []int32{6}}, []int32{5, 6}, FinishStop},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: 2}, Config{MaxNumSeqs: 1, MaxNumBatchedTokens: 8})
			seq := mustAdd(t, s, 1, []int32{1, 2}, tc.limits)
			sample := sampleCount()
			for s.HasUnfinished() {
				step(t, s, sample)
			}
			if !slices.Equal(seq.Output(), tc.wantOut) || seq.FinishReason() != tc.wantReason {
				t.Errorf("output %v (%s), want %v (%s)", seq.Output(), seq.FinishReason(), tc.wantOut, tc.wantReason)
			}
			checkNoLeak(t, pool)
		})
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{StatusWaiting.String(), "waiting"}, {StatusRunning.String(), "running"}, {StatusFinished.String(), "finished"},
		{FinishNone.String(), ""}, {FinishStop.String(), "stop"}, {FinishLength.String(), "length"},
		{FinishAbort.String(), "abort"}, {FinishError.String(), "error"}, {Status(9).String(), "Status(9)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}

func BenchmarkScheduleDecodeStep(b *testing.B) {
	// 256 sequences decoding with 1k-token contexts: the bookkeeping cost of planning one step
	// (Schedule, then Discard so that every iteration plans the same step).
	pool, _ := kvcache.NewPool(kvcache.Config{NumBlocks: 256 * 72, BlockSize: 16, PrefixCaching: true})
	s, _ := New(Config{MaxNumSeqs: 256, MaxNumBatchedTokens: 8192}, pool)
	for i := range 256 {
		if err := s.Add(NewSequence(kvcache.SeqID(i), iota32(1000, int32(i)*1000), Limits{MaxTokens: 100})); err != nil {
			b.Fatal(err)
		}
	}
	for {
		batch := s.Schedule()
		if batch.Empty() || len(batch.Preempted) > 0 {
			b.Fatal("the pool is too small for the benchmark")
		}
		if batch.NumDecodes == 256 {
			if err := s.Discard(batch); err != nil {
				b.Fatal(err)
			}
			break
		}
		if _, err := s.Update(batch, make([]int32, batch.NumLogits)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		batch := s.Schedule()
		if batch.NumDecodes != 256 {
			b.Fatalf("%d decodes", batch.NumDecodes)
		}
		if err := s.Discard(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPromptLogitsPlans: a sequence that wants its prompt's logits runs its prompt in chunks within
// MaxPromptLogitRows a step, shared by all such sequences, and waits at the head of the queue (no
// one overtakes it) while the step has none left; other sequences are not held back by the cap.
func TestPromptLogitsPlans(t *testing.T) {
	type add struct {
		id      kvcache.SeqID
		prompt  int
		max     int
		logits  bool
		tokens0 int32 // first prompt token
	}
	tests := []struct {
		name  string
		sched Config
		adds  []add
		want  []string
	}{{
		name:  "chunks within the cap beside a plain prompt",
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, MaxPromptLogitRows: 5},
		adds:  []add{{1, 12, 1, true, 100}, {2, 6, 1, false, 200}},
		want:  []string{"p1:0+5 p2:0+6*", "p1:5+5", "p1:10+2*"},
	}, {
		name:  "the cap is shared, and the head waits for it",
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, MaxPromptLogitRows: 4},
		adds:  []add{{1, 4, 2, true, 100}, {2, 3, 1, true, 200}, {3, 2, 1, false, 300}},
		want:  []string{"p1:0+4*", "d1:4+1* p2:0+3* p3:0+2*"},
	}, {
		name:  "no cap: the token budget alone",
		sched: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 8},
		adds:  []add{{1, 12, 1, true, 100}},
		want:  []string{"p1:0+8", "p1:8+4*"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 64, BlockSize: 4}, tc.sched)
			for _, a := range tc.adds {
				mustAdd(t, s, a.id, iota32(a.prompt, a.tokens0), Limits{MaxTokens: a.max, PromptLogits: a.logits})
			}
			checkSteps(t, s, tc.want)
			if s.HasUnfinished() {
				t.Errorf("sequences left after the planned steps")
			}
			checkNoLeak(t, pool)
		})
	}
	if _, err := New(Config{MaxNumSeqs: 1, MaxNumBatchedTokens: 1, MaxPromptLogitRows: -1}, mustNewPool(t)); err == nil {
		t.Error("New accepted a negative MaxPromptLogitRows")
	}
}

func mustNewPool(t *testing.T) *kvcache.Pool {
	t.Helper()
	pool, err := kvcache.NewPool(kvcache.Config{NumBlocks: 4, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestPromptLogitsSkipPrefixCache: a sequence that wants its prompt's logits computes its whole
// prompt even where the prefix cache holds it, and its lookup is not counted as a miss.
func TestPromptLogitsSkipPrefixCache(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 16, BlockSize: 4, PrefixCaching: true},
		Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 32})
	prompt := iota32(10, 0)
	first := mustAdd(t, s, 1, prompt, Limits{MaxTokens: 3})
	step(t, s, modelSample)
	second := mustAdd(t, s, 2, prompt, Limits{MaxTokens: 3, PromptLogits: true})
	if got, _ := step(t, s, modelSample); got != "d1:10+1* p2:0+10*" {
		t.Fatalf("step 2: %q, want the whole prompt of 2", got)
	}
	third := mustAdd(t, s, 3, prompt, Limits{MaxTokens: 3})
	for s.HasUnfinished() {
		step(t, s, modelSample)
	}
	if first.NumCachedTokens() != 0 || second.NumCachedTokens() != 0 || third.NumCachedTokens() != 8 {
		t.Errorf("cached tokens %d, %d, %d; want 0, 0, 8", first.NumCachedTokens(), second.NumCachedTokens(), third.NumCachedTokens())
	}
	if !slices.Equal(first.Output(), second.Output()) || !slices.Equal(first.Output(), third.Output()) {
		t.Errorf("outputs differ: %v, %v, %v", first.Output(), second.Output(), third.Output())
	}
	if st := pool.Stats(); st.QueriedTokens != 20 || st.HitTokens != 8 {
		t.Errorf("queried %d, hit %d tokens; want 20 (the second not counted), 8", st.QueriedTokens, st.HitTokens)
	}
	checkNoLeak(t, pool)
}

// TestPromptLogitsRecomputeAfterFirstToken: once a sequence with Limits.PromptLogits has its first
// output token, its prompt's logits have been read (the engine hands the prompt logprobs over with
// that token and reads no prompt rows again: engine.request.prompt), so the recompute after a
// preemption needs none of them. It should be planned like any recompute: from its prefix-cache
// hits, in one chunk within the token budget, leaving MaxPromptLogitRows to a sequence that does want
// its prompt's logits. Here sequence 2 (prompt logits, 1 output token) is preempted while sequence 1
// finishes, which leaves all of sequence 2's full blocks in the cache; sequence 3 (prompt logits)
// arrives behind it.
func TestPromptLogitsRecomputeAfterFirstToken(t *testing.T) {
	tests := []struct {
		name   string
		prefix bool
		want   string // the step that readmits sequence 2
	}{
		{"prefix cache", true, "p2:8+1* p3:0+2"},
		{"no prefix cache", false, "p2:0+9* p3:0+2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 8, BlockSize: 2, PrefixCaching: tc.prefix},
				Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, MaxPromptLogitRows: 2})
			mustAdd(t, s, 1, iota32(2, 10), Limits{MaxTokens: 7})
			seq2 := mustAdd(t, s, 2, iota32(4, 100), Limits{MaxTokens: 12, PromptLogits: true})
			for seq2.NumPreemptions() == 0 {
				if !s.HasUnfinished() || seq2.Finished() {
					t.Fatal("sequence 2 was never preempted: the test does not test what it claims")
				}
				step(t, s, modelSample)
			}
			if seq2.NumOutputTokens() == 0 || s.NumRunning() != 0 || seq2.Status() != StatusWaiting {
				t.Fatalf("setup: %v preempted with %d output tokens, %d running", seq2, seq2.NumOutputTokens(), s.NumRunning())
			}
			if cached := pool.Stats().CachedBlocks; tc.prefix && cached != pool.NumBlocks() {
				t.Fatalf("setup: %d blocks cached after the preemption, want all %d", cached, pool.NumBlocks())
			}
			mustAdd(t, s, 3, iota32(3, 200), Limits{MaxTokens: 1, PromptLogits: true})
			if got, _ := step(t, s, modelSample); got != tc.want {
				t.Errorf("readmission of %v after its first token: %q, want %q "+
					"(its recompute needs no prompt logits: no MaxPromptLogitRows cap, prefix-cache hits allowed)", seq2, got, tc.want)
			}
			for s.HasUnfinished() {
				step(t, s, modelSample)
			}
			checkNoLeak(t, pool)
		})
	}
}

// TestSamePromptsShareTheirPages checks that sequences arriving together with one prompt (n > 1 choices,
// requests behind one preamble) compute its full pages once: the others wait until the first has
// computed them and then take them from the prefix cache, in Schedule and in ScheduleNext; a sequence
// with another prompt behind them waits its turn (first come, first served), and one that shares less
// than a page is not held back.
func TestSamePromptsShareTheirPages(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 64, BlockSize: 4, PrefixCaching: true},
				Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 64})
			prompt := iota32(10, 0)
			var seqs []*Sequence
			for id := range 3 {
				seqs = append(seqs, mustAdd(t, s, kvcache.SeqID(id+1), prompt, Limits{MaxTokens: 3}))
			}
			other := mustAdd(t, s, 4, append(iota32(3, 0), 99, 98, 97), Limits{MaxTokens: 3})
			if !pipelined {
				if got, _ := step(t, s, modelSample); got != "p1:0+10*" {
					t.Fatalf("step 1: %q, want the first alone", got)
				}
				if got, _ := step(t, s, modelSample); got != "d1:10+1* p2:8+2* p3:8+2* p4:0+6*" {
					t.Fatalf("step 2: %q", got)
				}
			} else {
				b := s.Schedule()
				if d := describe(b); d != "p1:0+10*" {
					t.Fatalf("step 1: %q, want the first alone", d)
				}
				if next := s.ScheduleNext(b); next != nil {
					if d := describe(next); strings.Contains(d, "p2:0") || strings.Contains(d, "p3:0") {
						t.Fatalf("ScheduleNext admits a copy of the prompt being computed: %q", d)
					}
					s.Discard(next)
				}
				if _, err := s.Update(b, []int32{modelSample(b.Chunks[0])}); err != nil {
					t.Fatal(err)
				}
			}
			for s.HasUnfinished() {
				step(t, s, modelSample)
			}
			for i, seq := range seqs {
				want := 8
				if i == 0 {
					want = 0
				}
				if seq.NumCachedTokens() != want {
					t.Errorf("sequence %d: %d cached tokens, want %d", i+1, seq.NumCachedTokens(), want)
				}
				if !slices.Equal(seq.Output(), seqs[0].Output()) {
					t.Errorf("outputs differ: %v, %v", seq.Output(), seqs[0].Output())
				}
			}
			if other.NumCachedTokens() != 0 {
				t.Errorf("the other prompt took %d cached tokens", other.NumCachedTokens())
			}
			checkNoLeak(t, pool)
		})
	}
}

// TestSamePromptsWithoutPrefixCache: without the prefix cache nothing is shared, so nothing waits.
func TestSamePromptsWithoutPrefixCache(t *testing.T) {
	s, pool := newTestScheduler(t, kvcache.Config{NumBlocks: 64, BlockSize: 4}, Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 64})
	prompt := iota32(10, 0)
	mustAdd(t, s, 1, prompt, Limits{MaxTokens: 2})
	mustAdd(t, s, 2, prompt, Limits{MaxTokens: 2})
	checkSteps(t, s, []string{"p1:0+10* p2:0+10*", "d1:10+1* d2:10+1*"})
	checkNoLeak(t, pool)
}
