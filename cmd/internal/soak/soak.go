// Package soak runs gollm's bounded soak test: for a fixed time (ten minutes at most), concurrent
// clients send a random mix of completions, chats, streams, cancellations, tokenizations and bad
// requests to a server on loopback, checking every answer; then it checks that the server is back
// where it started: no KV blocks held, no sequences admitted, the goroutine count back to its
// baseline, and resident memory within 10% of its level after a warm-up.
//
// It speaks HTTP only, reading the server's state from /metrics (gollm's gauges, the Go collector's
// go_goroutines, the process collector's process_resident_memory_bytes), so it judges a separate
// `gollm serve` process as well as an in-process one. It must not run anywhere but loopback, and it
// stops by itself.
//
//	rep, err := soak.Run(ctx, soak.Options{BaseURL: "http://127.0.0.1:8000", Duration: 10 * time.Minute})
//	fmt.Print(rep) // rep.Err() says whether it passed
package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// MaxDuration bounds a soak run's load phase.
const MaxDuration = 10 * time.Minute

// Options configure a run.
type Options struct {
	// BaseURL is the server, e.g. http://127.0.0.1:8000 (loopback only).
	BaseURL string
	// APIKey is sent as a bearer token when set.
	APIKey string
	// Model is the model name to send; empty sends none.
	Model string
	// Duration of the load phase (at most MaxDuration); Warmup of it runs before the memory baseline
	// is taken (default a tenth of Duration).
	Duration, Warmup time.Duration
	// Clients send requests concurrently, one after the other each (default 8).
	Clients int
	// MaxTokens caps each request's max_tokens (default 64).
	MaxTokens int
	// Seed makes the mix reproducible (the server's timing still varies).
	Seed uint64
	// SampleEvery is the interval of the /metrics timeline (default Duration/20).
	SampleEvery time.Duration
	// Log, when set, receives a line per timeline sample.
	Log func(string)
}

// Sample is one reading of the server's state.
type Sample struct {
	At            time.Duration // since the start of the load
	Goroutines    int
	RSSBytes      int64
	KVBlocksUsed  int
	Running       int
	Waiting       int
	Admitted      int
	Preemptions   int
	GeneratedToks int64
	// OpenFDs is the process collector's process_open_fds (0 where it has none).
	OpenFDs int
}

// Report is a run's outcome.
type Report struct {
	Started  time.Time
	Duration time.Duration // of the load phase
	// Requests counts requests by kind; Failures holds up to 20 unexpected answers, Failed counts
	// them all.
	Requests map[string]int
	Failed   int
	Failures []string
	// Before is the state before any load, Warm after the warm-up (the memory baseline), After the
	// state once the load stopped and the server settled.
	Before, Warm, After Sample
	// Timeline samples the state during the load.
	Timeline []Sample
	// PeakRSS is the highest resident memory seen.
	PeakRSSBytes int64
	// SettleTime is how long the server took to get back to the baseline after the load.
	SettleTime time.Duration
}

// RSSGrowth is the resident memory growth from the warm baseline to the end, as a fraction.
func (r *Report) RSSGrowth() float64 {
	if r.Warm.RSSBytes == 0 {
		return 0
	}
	return float64(r.After.RSSBytes-r.Warm.RSSBytes) / float64(r.Warm.RSSBytes)
}

// Total is the number of requests sent.
func (r *Report) Total() int {
	n := 0
	for _, v := range r.Requests {
		n += v
	}
	return n
}

// Err says why the run failed, or nil.
func (r *Report) Err() error {
	var errs []error
	if r.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d requests got unexpected answers", r.Failed))
	}
	if r.After.KVBlocksUsed != 0 || r.After.Running != 0 || r.After.Waiting != 0 {
		errs = append(errs, fmt.Errorf("engine not idle afterwards: %d KV blocks held, %d running, %d waiting",
			r.After.KVBlocksUsed, r.After.Running, r.After.Waiting))
	}
	if r.After.Admitted != 0 {
		errs = append(errs, fmt.Errorf("%d sequences still admitted afterwards", r.After.Admitted))
	}
	if r.After.Goroutines > r.Before.Goroutines {
		errs = append(errs, fmt.Errorf("goroutines %d afterwards, baseline %d", r.After.Goroutines, r.Before.Goroutines))
	}
	if g := r.RSSGrowth(); g >= 0.10 {
		errs = append(errs, fmt.Errorf("resident memory grew %.1f%% after the warm-up (limit 10%%)", 100*g))
	}
	return errors.Join(errs...)
}

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %v of load from %s, %d requests (", r.Duration.Round(time.Second), r.Started.UTC().Format(time.RFC3339), r.Total())
	first := true
	for _, k := range kinds {
		if r.Requests[k] == 0 {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		fmt.Fprintf(&b, "%s %d", k, r.Requests[k])
	}
	fmt.Fprintf(&b, "), %d unexpected answers\n", r.Failed)
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "  unexpected: %s\n", f)
	}
	row := func(name string, s Sample) {
		fmt.Fprintf(&b, "  %-8s goroutines %4d  fds %3d  RSS %7.1f MiB  KV blocks held %3d  running %2d  waiting %2d  admitted %2d  preemptions %d  generated %d\n",
			name, s.Goroutines, s.OpenFDs, float64(s.RSSBytes)/(1<<20), s.KVBlocksUsed, s.Running, s.Waiting, s.Admitted, s.Preemptions, s.GeneratedToks)
	}
	row("before", r.Before)
	row("warm", r.Warm)
	row("after", r.After)
	fmt.Fprintf(&b, "  peak RSS %.1f MiB; RSS growth after warm-up %+.2f%%; settled in %v\n", float64(r.PeakRSSBytes)/(1<<20),
		100*r.RSSGrowth(), r.SettleTime.Round(time.Millisecond))
	if err := r.Err(); err != nil {
		fmt.Fprintf(&b, "FAILED: %v\n", err)
	} else {
		b.WriteString("ok: no held blocks, goroutines back to baseline, RSS growth under 10%\n")
	}
	return b.String()
}

// CheckLoopback refuses a URL that is not on the loopback interface.
func CheckLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("soak: url %q: %w", base, err)
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1":
		return nil
	}
	return fmt.Errorf("soak: url %q: loopback servers only", base)
}

// Run performs a soak run. It returns an error only when it cannot run at all; the report says
// whether the server passed.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := CheckLoopback(o.BaseURL); err != nil {
		return nil, err
	}
	if o.Duration <= 0 || o.Duration > MaxDuration {
		return nil, fmt.Errorf("soak: duration %v outside (0, %v]", o.Duration, MaxDuration)
	}
	if o.Warmup <= 0 || o.Warmup >= o.Duration {
		o.Warmup = o.Duration / 10
	}
	if o.Clients <= 0 {
		o.Clients = 8
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 64
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = max(o.Duration/20, time.Second)
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	// The whole run, settling included, is bounded.
	ctx, cancel := context.WithTimeout(ctx, o.Duration+2*time.Minute)
	defer cancel()

	tr := &http.Transport{MaxIdleConnsPerHost: o.Clients * 2}
	c := &client{base: strings.TrimRight(o.BaseURL, "/"), key: o.APIKey, model: o.Model, http: &http.Client{Transport: tr}}
	rep := &Report{Started: time.Now(), Requests: map[string]int{}}

	before, err := c.settle(ctx, 0, tr)
	if err != nil {
		return nil, fmt.Errorf("soak: the server is not idle before the run: %w", err)
	}
	rep.Before = before
	rep.PeakRSSBytes = before.RSSBytes

	var mu sync.Mutex
	record := func(kind string, err error) {
		mu.Lock()
		defer mu.Unlock()
		rep.Requests[kind]++
		if err != nil {
			rep.Failed++
			if len(rep.Failures) < 20 {
				rep.Failures = append(rep.Failures, kind+": "+err.Error())
			}
		}
	}

	start := time.Now()
	loadCtx, stopLoad := context.WithDeadline(ctx, start.Add(o.Duration))
	defer stopLoad()
	warmCtx, stopWarm := context.WithDeadline(ctx, start.Add(o.Warmup))
	defer stopWarm()
	// The memory baseline is taken in a pause after the warm-up, once the server is idle, so that it
	// compares like with like with the idle server at the end: clients hold gate's read lock per
	// request, and the pause takes the write lock.
	var gate sync.RWMutex
	var wg sync.WaitGroup
	for i := range o.Clients {
		rng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
		wg.Go(func() {
			for loadCtx.Err() == nil {
				gate.RLock()
				kind, err := c.random(loadCtx, rng, o.MaxTokens)
				gate.RUnlock()
				if loadCtx.Err() != nil && err != nil {
					return // cut short by the end of the load phase: neither a success nor a failure
				}
				record(kind, err)
			}
		})
	}
	sampleTick := time.NewTicker(o.SampleEvery)
	defer sampleTick.Stop()
	warmTaken := false
	for loadCtx.Err() == nil {
		select {
		case <-loadCtx.Done():
		case <-warmCtx.Done():
			if !warmTaken {
				warmTaken = true
				gate.Lock()
				s, err := c.settle(ctx, 0, tr)
				gate.Unlock()
				if err != nil {
					record("metrics", fmt.Errorf("no idle moment after the warm-up: %w", err))
				} else {
					s.At = time.Since(start)
					rep.Warm = s
					o.Log(fmt.Sprintf("warm baseline at %v: goroutines %d RSS %.1f MiB", s.At.Round(time.Second), s.Goroutines,
						float64(s.RSSBytes)/(1<<20)))
				}
			}
			warmCtx = loadCtx
		case <-sampleTick.C:
			s, err := c.sample(ctx)
			if err != nil {
				record("metrics", err)
				continue
			}
			s.At = time.Since(start)
			rep.Timeline = append(rep.Timeline, s)
			rep.PeakRSSBytes = max(rep.PeakRSSBytes, s.RSSBytes)
			o.Log(fmt.Sprintf("%v: goroutines %d fds %d RSS %.1f MiB KV %d running %d waiting %d preemptions %d generated %d",
				s.At.Round(time.Second), s.Goroutines, s.OpenFDs, float64(s.RSSBytes)/(1<<20), s.KVBlocksUsed, s.Running, s.Waiting,
				s.Preemptions, s.GeneratedToks))
		}
	}
	wg.Wait()
	rep.Duration = time.Since(start)
	settleStart := time.Now()
	after, err := c.settle(ctx, rep.Before.Goroutines, tr)
	rep.SettleTime = time.Since(settleStart)
	rep.After = after
	rep.PeakRSSBytes = max(rep.PeakRSSBytes, after.RSSBytes)
	if err != nil && !errors.Is(err, errNotSettled) {
		return rep, fmt.Errorf("soak: after the load: %w", err)
	}
	if rep.Warm.RSSBytes == 0 {
		rep.Warm = rep.Before
	}
	return rep, nil
}

var errNotSettled = errors.New("not settled")

// settle waits until the engine is idle, nothing is admitted and (when goroutines > 0) the
// goroutine count is back to at most goroutines, closing the client's idle connections so that
// the server's connection goroutines end; it gives up after a minute and returns the last sample.
func (c *client) settle(ctx context.Context, goroutines int, tr *http.Transport) (Sample, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		tr.CloseIdleConnections()
		s, err := c.sample(ctx)
		if err != nil {
			return s, err
		}
		idle := s.KVBlocksUsed == 0 && s.Running == 0 && s.Waiting == 0 && s.Admitted == 0
		if idle && (goroutines == 0 || s.Goroutines <= goroutines) {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, errNotSettled
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
