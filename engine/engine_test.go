package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/kvcache"
)

// randomPrompt returns n byte tokens drawn from rng.
func randomPrompt(rng *rand.Rand, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(rng.IntN(256))
	}
	return p
}

// runAlone runs each request by itself, one after the other, on a fresh engine without prefix
// caching: the reference the batched runs must reproduce.
func runAlone(t *testing.T, m Model, reqs []Request) []result {
	t.Helper()
	e := newEngine(t, m, Config{DisablePrefixCaching: true})
	out := make([]result, len(reqs))
	for i, req := range reqs {
		// The top two logprobs let checkSame say whether a mismatch is a near-tie.
		req.Logprobs, req.TopLogprobs = true, 2
		s, err := e.Add(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = collect(t, s)
	}
	closeAndCheckPool(t, e)
	return out
}

// runConcurrent adds every request at once (each from its own goroutine) and collects the results.
func runConcurrent(t *testing.T, e *Engine, reqs []Request) []result {
	t.Helper()
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			s, err := e.Add(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			out[i] = collect(t, s)
		})
	}
	wg.Wait()
	return out
}

// checkSame compares batched results with the reference, token for token. On a mismatch it reports
// the reference's gap between its two best logits at that position: a gap near float32 rounding
// would mean batching changed the arithmetic order (tolerable), a large one a real bug.
func checkSame(t *testing.T, got, want []result) {
	t.Helper()
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) || got[i].reason != want[i].reason {
			gap := "n/a"
			for k := range min(len(got[i].ids), len(want[i].ids)) {
				if got[i].ids[k] != want[i].ids[k] && k < len(want[i].logprobs) && len(want[i].logprobs[k].Top) == 2 {
					top := want[i].logprobs[k].Top
					gap = fmt.Sprintf("%.3g at token %d", top[0].Logprob-top[1].Logprob, k)
					break
				}
			}
			t.Errorf("request %d: got %v (%s), alone %v (%s); reference top-2 logit gap %s",
				i, got[i].ids, got[i].reason, want[i].ids, want[i].reason, gap)
		}
		if got[i].text != want[i].text {
			t.Errorf("request %d: text %q, alone %q", i, got[i].text, want[i].text)
		}
		if got[i].usage.CompletionTokens != len(got[i].ids) || got[i].usage.PromptTokens != want[i].usage.PromptTokens {
			t.Errorf("request %d: usage %+v for %d tokens", i, got[i].usage, len(got[i].ids))
		}
	}
}

// TestConcurrentGreedyEqualsAlone: batching must not change a greedy request's output, so 32 concurrent
// greedy requests of different prompt lengths give exactly the tokens each gives alone, through chunked
// prefill mixed with decodes and a waiting queue.
func TestConcurrentGreedyEqualsAlone(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 1), 256, 8)
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]Request, 32)
	for i := range reqs {
		reqs[i] = Request{
			ID:        fmt.Sprint("r", i),
			PromptIDs: randomPrompt(rng, 1+(i*37)%70),
			MaxTokens: 4 + i%7,
			IgnoreEOS: true,
		}
	}
	want := runAlone(t, m, reqs)
	e := newEngine(t, m, Config{MaxNumSeqs: 12, MaxNumBatchedTokens: 48})
	got := runConcurrent(t, e, reqs)
	checkSame(t, got, want)
	total := 0
	for i, r := range got {
		total += len(r.ids)
		if r.reason != FinishLength || len(r.ids) != reqs[i].MaxTokens {
			t.Errorf("request %d: %d tokens, finish %q; want %d, length", i, len(r.ids), r.reason, reqs[i].MaxTokens)
		}
	}
	closeAndCheckPool(t, e)
	// Batching happened: far fewer steps than tokens.
	if st := e.Stats(); st.GenerationTokens != int64(total) || st.Steps >= int64(total)/2 || st.Finished[FinishLength] != 32 || st.Running != 0 {
		t.Errorf("stats %+v for %d tokens", st, total)
	}
}

// TestPrefixCachingEquivalence: prompts sharing long prefixes give the same tokens with prefix caching
// on and off, and the cache is hit when it is on.
func TestPrefixCachingEquivalence(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 2), 256, 8)
	rng := rand.New(rand.NewPCG(3, 4))
	prefixes := [][]int32{randomPrompt(rng, 70), randomPrompt(rng, 45)}
	var reqs []Request
	for i := range 12 {
		p := slices.Concat(prefixes[i%2], randomPrompt(rng, 1+i*3%11))
		reqs = append(reqs, Request{PromptIDs: p, MaxTokens: 10, IgnoreEOS: true})
	}
	want := runAlone(t, m, reqs)
	for _, caching := range []bool{true, false} {
		t.Run(fmt.Sprintf("prefix caching %v", caching), func(t *testing.T) {
			e := newEngine(t, m, Config{MaxNumSeqs: 6, MaxNumBatchedTokens: 40, DisablePrefixCaching: !caching})
			// The first two go alone so that their prefixes are cached before the crowd arrives;
			// the crowd then also shares among itself as its members are admitted step by step.
			got := runConcurrent(t, e, reqs[:2])
			got = append(got, runConcurrent(t, e, reqs[2:])...)
			checkSame(t, got, want)
			st := e.Stats()
			if caching && (st.PrefixHitRate <= 0 || st.PrefixHitTokens < 10*40) {
				t.Errorf("prefix caching on: hit rate %.3f (%d of %d tokens), want hits on the shared prefixes",
					st.PrefixHitRate, st.PrefixHitTokens, st.PrefixQueriedTokens)
			}
			if !caching && st.PrefixHitTokens != 0 {
				t.Errorf("prefix caching off: %d hit tokens", st.PrefixHitTokens)
			}
			var cached int
			for _, r := range got {
				cached += r.usage.CachedTokens
			}
			if caching != (cached > 0) {
				t.Errorf("prefix caching %v: usage reports %d cached tokens", caching, cached)
			}
			closeAndCheckPool(t, e)
		})
	}
}

// TestPreemptionEqualsAlone: a pool so small that running sequences must be preempted and recomputed
// gives the same tokens, finishes (no deadlock) and leaks no block.
func TestPreemptionEqualsAlone(t *testing.T) {
	dir := writeTinyModel(t, 3)
	// 12 blocks of 4 tokens: 48 slots for 8 requests of up to 34 tokens each.
	m := loadTinyModel(t, dir, 12, 4)
	rng := rand.New(rand.NewPCG(5, 6))
	reqs := make([]Request, 8)
	for i := range reqs {
		reqs[i] = Request{PromptIDs: randomPrompt(rng, 6+i*2), MaxTokens: 20, IgnoreEOS: true}
	}
	want := runAlone(t, m, reqs)
	for _, caching := range []bool{true, false} {
		t.Run(fmt.Sprintf("prefix caching %v", caching), func(t *testing.T) {
			e := newEngine(t, m, Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 32, DisablePrefixCaching: !caching})
			got := runConcurrent(t, e, reqs)
			checkSame(t, got, want)
			if st := e.Stats(); st.Preemptions == 0 {
				t.Errorf("no preemption happened (stats %+v): the test does not test what it claims", st)
			}
			closeAndCheckPool(t, e)
		})
	}
}

// TestAbortMidGeneration: cancelling a request mid-generation finishes it with FinishAbort, frees its
// blocks, and the engine keeps serving the others (with unchanged outputs).
func TestAbortMidGeneration(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 4), 64, 8)
	rng := rand.New(rand.NewPCG(7, 8))
	others := make([]Request, 4)
	for i := range others {
		others[i] = Request{PromptIDs: randomPrompt(rng, 5+i*7), MaxTokens: 12, IgnoreEOS: true}
	}
	want := runAlone(t, m, others)

	e := newEngine(t, m, Config{MaxNumSeqs: 8})
	ctx, cancel := context.WithCancel(context.Background())
	long, err := e.Add(ctx, Request{ID: "long", PromptIDs: randomPrompt(rng, 30), MaxTokens: 400, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the long request has produced tokens (it holds blocks), then cancel it while the
	// others are being served.
	var aborted result
	first, err := long.Recv(context.Background())
	if err != nil || len(first.TokenIDs) == 0 {
		t.Fatalf("first output %+v, %v", first, err)
	}
	var wg sync.WaitGroup
	var got []result
	wg.Go(func() { got = runConcurrent(t, e, others) })
	cancel()
	aborted = collect(t, long)
	wg.Wait()
	if aborted.reason != FinishAbort {
		t.Fatalf("cancelled request finished with %q, want abort", aborted.reason)
	}
	if n := len(first.TokenIDs) + len(aborted.ids); n >= 400 {
		t.Fatalf("cancelled request produced all %d tokens", n)
	}
	checkSame(t, got, want)

	// The engine still serves after the abort, and the aborted request's blocks are back.
	s, err := e.Add(context.Background(), others[0])
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, []result{collect(t, s)}, want[:1])
	if st := e.Stats(); st.Finished[FinishAbort] != 1 || st.KVBlocksUsed != 0 {
		t.Errorf("after abort: stats %+v", st)
	}
	closeAndCheckPool(t, e)
}

// A cancelled context before the request is even scheduled aborts it too.
func TestAbortBeforeScheduling(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 5), 32, 8)
	e := newEngine(t, m, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := e.Add(ctx, Request{PromptIDs: []int32{1, 2, 3}, MaxTokens: 5})
	if err != nil {
		// Add may also notice the cancelled context itself; either way nothing runs.
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		return
	}
	if r := collect(t, s); r.reason != FinishAbort {
		t.Fatalf("finish %q, want abort", r.reason)
	}
	closeAndCheckPool(t, e)
}

// With a seed, sampled tokens do not depend on what else shares the batch.
func TestSeededSamplingIndependentOfBatch(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 6), 256, 8)
	rng := rand.New(rand.NewPCG(9, 10))
	reqs := make([]Request, 10)
	for i := range reqs {
		reqs[i] = Request{
			PromptIDs: randomPrompt(rng, 3+i*5),
			MaxTokens: 12,
			IgnoreEOS: true,
			Sampling:  SamplingParams{Temperature: 1, TopP: 0.95, TopK: 50, Seed: seed(uint64(100 + i%3))},
		}
	}
	want := runAlone(t, m, reqs)
	e := newEngine(t, m, Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16})
	got := runConcurrent(t, e, reqs)
	checkSame(t, got, want)
	closeAndCheckPool(t, e)
	// And the seed matters: the same prompt with another seed gives other tokens.
	other := reqs[0]
	other.Sampling.Seed = seed(999)
	if r := runAlone(t, m, []Request{other}); slices.Equal(r[0].ids, want[0].ids) {
		t.Errorf("seeds 100 and 999 sampled the same 12 tokens %v", r[0].ids)
	}
}

func TestAddErrors(t *testing.T) {
	m := newCountingModel(64, 100, 4, 8)
	e := newEngine(t, m, Config{})
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"empty prompt", Request{}, ErrInvalidRequest},
		{"token outside vocab", Request{PromptIDs: []int32{1, 64}}, ErrInvalidRequest},
		{"negative token", Request{PromptIDs: []int32{-1}}, ErrInvalidRequest},
		{"negative max tokens", Request{PromptIDs: []int32{1}, MaxTokens: -1}, ErrInvalidRequest},
		{"bad sampling", Request{PromptIDs: []int32{1}, Sampling: SamplingParams{TopP: 2}}, ErrInvalidRequest},
		{"stop token outside vocab", Request{PromptIDs: []int32{1}, StopTokenIDs: []int32{99}}, ErrInvalidRequest},
		// 8 blocks of 4 tokens: the context is 32 tokens.
		{"prompt fills the context", Request{PromptIDs: make([]int32, 32)}, ErrPromptTooLong},
		{"prompt beyond the context", Request{PromptIDs: make([]int32, 40)}, ErrPromptTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.Add(context.Background(), tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("Add: %v, want %v", err, tc.want)
			}
		})
	}
	if e.MaxModelLen() != 32 {
		t.Fatalf("MaxModelLen %d, want 32 (the KV pool's capacity)", e.MaxModelLen())
	}
	closeAndCheckPool(t, e)
	if _, err := e.Add(context.Background(), Request{PromptIDs: []int32{1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
}

// Close of an engine that has stopped returns nil even with an ended context: there is nothing left
// to abort (a select between the two would pick the context's error about half of the time).
func TestCloseAfterStopIgnoresContext(t *testing.T) {
	e := newEngine(t, newCountingModel(64, 1000, 4, 16), Config{})
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		if err := e.Close(expired); err != nil {
			t.Fatalf("Close %d of a stopped engine: %v", i, err)
		}
	}
}

// Close waits for in-flight requests; when its context ends first, it aborts them.
func TestCloseDrainsOrAborts(t *testing.T) {
	t.Run("drain", func(t *testing.T) {
		e := newEngine(t, newCountingModel(64, 1000, 16, 64), Config{})
		s, err := e.Add(context.Background(), Request{PromptIDs: []int32{1}, MaxTokens: 50, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := collect(t, s); r.reason != FinishLength || len(r.ids) != 50 {
			t.Fatalf("drained request: %d tokens, %q", len(r.ids), r.reason)
		}
	})
	t.Run("abort", func(t *testing.T) {
		m := newCountingModel(64, 100000, 16, 1024)
		m.delay = time.Millisecond
		e := newEngine(t, m, Config{})
		s, err := e.Add(context.Background(), Request{PromptIDs: []int32{1}, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.Close(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Close: %v, want context.Canceled", err)
		}
		if r := collect(t, s); r.reason != FinishAbort || !errors.Is(r.err, ErrClosed) {
			t.Fatalf("request at close: %q, %v; want abort, ErrClosed", r.reason, r.err)
		}
	})
}

// BenchmarkEngineGreedy measures end-to-end generation throughput (tokens/s over all requests) of
// the tiny random model through the whole engine: scheduling, the CPU forward pass, sampling and
// detokenization, with 1 and 16 concurrent requests.
func BenchmarkEngineGreedy(b *testing.B) {
	m := loadTinyModel(b, writeTinyModel(b, 1), 512, 16)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprint("seqs=", n), func(b *testing.B) {
			e := newEngine(b, m, Config{})
			reqs := make([]Request, n)
			for i := range reqs {
				reqs[i] = Request{PromptIDs: randomPrompt(rng, 32), MaxTokens: 64, IgnoreEOS: true}
			}
			tokens := 0
			start := time.Now()
			for b.Loop() {
				var wg sync.WaitGroup
				for _, req := range reqs {
					wg.Go(func() {
						s, err := e.Add(context.Background(), req)
						if err != nil {
							b.Error(err)
							return
						}
						for {
							if _, err := s.Recv(context.Background()); err != nil {
								return
							}
						}
					})
				}
				wg.Wait()
				tokens += n * 64
			}
			b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "tok/s")
		})
	}
}

// When a request's last output reaches its reader, Stats already counts it: a server that reports
// metrics after answering, or a test that checks them, never sees the step before.
func TestStatsCurrentWhenOutputArrives(t *testing.T) {
	e := newEngine(t, newCountingModel(64, 1000, 4, 64), Config{})
	for i := range 150 {
		s, err := e.Add(context.Background(), Request{PromptIDs: []int32{1, 2, 3}, MaxTokens: 2, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		collect(t, s)
		st := e.Stats()
		if st.Finished[FinishLength] != int64(i+1) || st.Running != 0 || st.KVBlocksUsed != 0 || st.GenerationTokens != int64(2*(i+1)) {
			t.Fatalf("request %d received, but stats are of an earlier step: %+v", i, st)
		}
	}
	closeAndCheckPool(t, e)
}

// watchCountingContext is a cancellable context that counts the AfterFunc registrations still
// pending on it (context.AfterFunc uses a context's own AfterFunc method when it has one).
type watchCountingContext struct {
	context.Context
	mu      sync.Mutex
	pending int
}

func (c *watchCountingContext) AfterFunc(f func()) func() bool {
	stop := context.AfterFunc(c.Context, f)
	c.mu.Lock()
	c.pending++
	c.mu.Unlock()
	return func() bool {
		stopped := stop()
		if stopped {
			c.mu.Lock()
			c.pending--
			c.mu.Unlock()
		}
		return stopped
	}
}

func (c *watchCountingContext) numPending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending
}

// Many requests share one long-lived context (gollm generate --prompts-file passes its signal
// context to all): each finished request must stop watching it, and cancelling it must still
// abort the requests in flight, including those not admitted yet.
func TestSharedContextWatchAndCancel(t *testing.T) {
	m := newCountingModel(64, 1000, 4, 256)
	e := newEngine(t, m, Config{MaxNumSeqs: 2})
	base, cancel := context.WithCancel(context.Background())
	ctx := &watchCountingContext{Context: base}
	for range 20 {
		s, err := e.Add(ctx, Request{PromptIDs: []int32{1, 2}, MaxTokens: 3, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if r := collect(t, s); r.reason != FinishLength {
			t.Fatalf("finish %q", r.reason)
		}
	}
	if n := ctx.numPending(); n != 0 {
		t.Errorf("%d finished requests still watch their context", n)
	}
	// Now many in flight (two running, the rest waiting), then the context ends.
	m.delay = 100 * time.Microsecond
	var streams []*Stream
	for range 12 {
		s, err := e.Add(ctx, Request{PromptIDs: []int32{1, 2}, MaxTokens: 500, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	cancel()
	for i, s := range streams {
		if r := collect(t, s); r.reason != FinishAbort {
			t.Errorf("request %d: finish %q after its context ended, want abort", i, r.reason)
		}
	}
	closeAndCheckPool(t, e)
}

// BenchmarkReapCancelled measures the loop's per-step check for cancelled requests with 4096
// requests in the engine and none cancelled: it must not cost per live request.
func BenchmarkReapCancelled(b *testing.B) {
	e := &Engine{live: map[kvcache.SeqID]*request{}}
	for i := range 4096 {
		e.live[kvcache.SeqID(i+1)] = &request{id: kvcache.SeqID(i + 1)}
	}
	for b.Loop() {
		e.reapCancelled()
	}
}
