package openai_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gollm/gollm/engine/openai/loadtest"
)

// These fault tests run the real engine and the built-in model on the CPU backend.

// metric reads one metric from /metrics (its model_name label aside).
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	m, err := loadtest.ScrapeMetrics(context.Background(), base, "")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m[name]
	if !ok {
		t.Fatalf("/metrics lacks %s", name)
	}
	return v
}

// waitUntil polls cond (something the server makes true soon) for up to a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// A deadline, not a speed check: generous enough for the race detector on a loaded two-core machine
	// (the stuck-reader test's 200 steps take about 30 s there, 0.5 s without it).
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within three minutes", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startReal starts the real engine and the built-in model behind the server with opts, stopped (and the
// stop's error reported) when t ends, and returns its base URL.
func startReal(t *testing.T, opts loadtest.ServerOptions) string {
	t.Helper()
	base, stop, err := loadtest.StartDefault(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return base
}

// TestKVExhaustion runs more concurrent sequences than the KV pool can hold: the engine preempts
// (recomputing later), every request still completes with all its tokens, and the pool is empty
// afterwards.
func TestKVExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	// 12 pages of 16 tokens: each request needs 4 or 5 pages at its end, 8 run at once.
	base := startReal(t, loadtest.ServerOptions{KVBlocks: 12, MaxNumSeqs: 8, MaxQueue: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const clients, rounds, tokens = 12, 2, 48
	res := loadtest.Run(ctx, loadtest.Options{BaseURL: base, Clients: clients, Rounds: rounds, MaxTokens: tokens})
	if res.Failed != 0 || res.Completed != clients*rounds || res.Tokens != clients*rounds*tokens {
		t.Errorf("%v (errors %v); want every request complete", res, res.Errors)
	}
	kv, err := loadtest.WaitIdle(ctx, base)
	if err != nil || kv.BlocksUsed != 0 {
		t.Errorf("KV after the run: %+v, %v", kv, err)
	}
	if p := metric(t, base, "gollm:num_preemptions_total"); p == 0 {
		t.Error("no preemption: the test did not exhaust the KV pool")
	} else {
		t.Logf("%v; %v preemptions", res, p)
	}
}

// disconnect sends one request and hangs up at a point chosen by mode.
func disconnect(ctx context.Context, base string, mode int, rng *rand.Rand) error {
	addr := strings.TrimPrefix(base, "http://")
	body := fmt.Sprintf(`{"prompt":"func main() {","max_tokens":%d,"ignore_eos":true,"stream":%v}`, 20+rng.IntN(100), mode >= 2 && mode <= 3)
	switch mode {
	case 0, 1: // 0: half the body, then gone; 1: the whole request, then gone before the answer
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		sent := body
		if mode == 0 {
			sent = body[:len(body)/2]
		}
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), sent)
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		return c.Close()
	case 2, 3: // a stream abandoned after its headers (2) or after a few chunks (3)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if mode == 3 {
			rd := bufio.NewReader(resp.Body)
			for range 1 + rng.IntN(6) {
				if _, err := rd.ReadString('\n'); err != nil {
					break
				}
			}
		}
		return nil
	default: // a non-streamed request given up while it generates
		ctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(60))*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil
	}
}

// TestDisconnectBursts sends bursts of requests whose clients all hang up, at every stage of a
// request: mid-body, before the answer, after the stream's headers, mid-stream, mid-generation.
// Afterwards no KV block is held, nothing is admitted, the goroutines are back to their baseline,
// and the server still answers.
func TestDisconnectBursts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	base := startReal(t, loadtest.ServerOptions{KVBlocks: 64, MaxNumSeqs: 16, MaxQueue: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Baseline after one request, with no connection left open.
	if _, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":2}`)); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
	waitUntil(t, "idle before the bursts", func() bool { kv, err := loadtest.ScrapeKV(ctx, base); return err == nil && kv.Running == 0 })
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(100 * time.Millisecond) // let the server's side of closed connections finish
	baseline := runtime.NumGoroutine()

	for burst := range 4 {
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := range 32 {
			mode, r := i%5, rand.New(rand.NewPCG(uint64(burst), uint64(i)))
			wg.Go(func() {
				if err := disconnect(ctx, base, mode, r); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("burst %d: %v", burst, err)
		}
	}
	kv, err := loadtest.WaitIdle(ctx, base)
	if err != nil || kv.BlocksUsed != 0 {
		t.Errorf("KV after the bursts: %+v, %v", kv, err)
	}
	waitUntil(t, "nothing admitted", func() bool { return metric(t, base, "gollm:server_sequences_admitted") == 0 })
	http.DefaultClient.CloseIdleConnections()
	waitUntil(t, fmt.Sprintf("goroutines back to the baseline of %d", baseline), func() bool {
		http.DefaultClient.CloseIdleConnections()
		return runtime.NumGoroutine() <= baseline
	})
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":3}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the bursts: %v %v", resp, err)
	}
	resp.Body.Close()
}

// smallSendBuffers shrinks the send buffer of accepted connections, so that a client that stops
// reading blocks the server's writes after a few kilobytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// streamGaps streams a completion and returns the gaps between its chunks.
func streamGaps(t *testing.T, base string, tokens int) []time.Duration {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":"package main","max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens)
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var gaps []time.Duration
	last := time.Now()
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			done = true
			break
		}
		if strings.HasPrefix(line, "data: ") {
			gaps = append(gaps, time.Since(last))
			last = time.Now()
		}
	}
	if !done || resp.StatusCode != 200 {
		t.Fatalf("stream did not complete: status %d", resp.StatusCode)
	}
	return gaps[1:] // the first is time to first token
}

func meanGap(gaps []time.Duration) time.Duration {
	var sum time.Duration
	for _, g := range gaps {
		sum += g
	}
	return sum / time.Duration(max(len(gaps), 1))
}

// TestStuckReaderDoesNotStallTheEngine: a client that never reads its stream fills the socket
// buffers and blocks its handler's writes; the engine does not wait for it (it merges the pending
// outputs of that request, whose memory is bounded by its own output), finishes it and frees its
// KV blocks, and keeps serving other clients, whose streams complete while the stuck one is still
// held. Closing the stuck connection then releases it.
func TestStuckReaderDoesNotStallTheEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	base := startReal(t, loadtest.ServerOptions{KVBlocks: 128, MaxNumSeqs: 8, WriteTimeout: 10 * time.Minute,
		WrapListener: func(l net.Listener) net.Listener { return smallSendBuffers{l} }})
	alone := meanGap(streamGaps(t, base, 64))
	stepsBefore := metric(t, base, "gollm:engine_steps_total")

	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	stuck, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	// 200 tokens with 5 logprobs each are tens of kilobytes of events: far more than the two 4 KiB socket
	// buffers hold (and few enough steps for the race detector's pace).
	const stuckTokens = 200
	body := fmt.Sprintf(`{"prompt":"func main() {","max_tokens":%d,"ignore_eos":true,"stream":true,"logprobs":5}`, stuckTokens)
	fmt.Fprintf(stuck, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The engine finishes the stuck request (a step per token; its KV freed) while its handler is still
	// blocked writing to a client that does not read.
	waitUntil(t, "the engine done with the stuck request while its handler is blocked", func() bool {
		kv, err := loadtest.ScrapeKV(context.Background(), base)
		return err == nil && kv.Running == 0 && kv.Waiting == 0 && kv.BlocksUsed == 0 &&
			metric(t, base, "gollm:engine_steps_total") >= stepsBefore+stuckTokens && metric(t, base, "gollm:server_sequences_admitted") == 1
	})
	withStuck := meanGap(streamGaps(t, base, 64))
	if a := metric(t, base, "gollm:server_sequences_admitted"); a != 1 {
		t.Fatalf("%v sequences admitted after the other stream; the stuck one should still be held", a)
	}
	t.Logf("mean inter-token gap of a 64-token stream: %v alone, %v beside a client that never reads", alone, withStuck)
	stuck.Close()
	waitUntil(t, "the stuck request released", func() bool { return metric(t, base, "gollm:server_sequences_admitted") == 0 })
}
