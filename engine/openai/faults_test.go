package openai

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/engine"
)

// panickyTokenizer is byteTokenizer, but Encode panics on text containing "PANIC" and Decode
// panics on the id panicID (when non-zero): a stand-in for a bug met while handling one request.
// newPanickyServer also makes the handler panic on an engine output holding panicID.
type panickyTokenizer struct {
	byteTokenizer
	panicID int32
}

func (p panickyTokenizer) Encode(text string, addSpecial bool) []int32 {
	if strings.Contains(text, "PANIC") {
		panic("test: encode panics")
	}
	return p.byteTokenizer.Encode(text, addSpecial)
}

func (p panickyTokenizer) Decode(ids []int32, skipSpecial bool) string {
	for _, id := range ids {
		if p.panicID != 0 && id == p.panicID {
			panic("test: decode panics")
		}
	}
	return p.byteTokenizer.Decode(ids, skipSpecial)
}

func newPanickyServer(t *testing.T, f *fakeEngine, panicID int32) (*Server, string) {
	t.Helper()
	cfg := templateConfig(t)
	cfg.ModelName = "fake-model"
	cfg.Logger = quietLogger()
	f.maxLen = 64
	srv, err := New(f, panickyTokenizer{panicID: panicID}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.eventHook = func(ev event) { // the handler panics on reading an output with that token
		if slices.Contains(ev.out.TokenIDs, panicID) {
			panic("test: an output panics")
		}
	}
	url := serveOnLoopback(t, srv, time.Minute)
	return srv, url
}

// serveOnLoopback runs srv.Serve on a loopback port until the test ends.
func serveOnLoopback(t *testing.T, srv *Server, drain time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, drain) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func metricValue(t *testing.T, url, name string) string {
	t.Helper()
	_, _, body := call(t, "GET", url+"/metrics", "", "")
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
		// The model_name label of gollm's metrics (the server under test serves one model).
		if rest, ok := strings.CutPrefix(line, name+"{model_name="); ok {
			if _, v, ok := strings.Cut(rest, "} "); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	t.Fatalf("/metrics lacks %s", name)
	return ""
}

// TestPanicIsolated: a panic while handling one request answers that request with 500 (or ends
// its stream with an error event), aborts its engine work, and leaves the server serving.
func TestPanicIsolated(t *testing.T) {
	f := &fakeEngine{}
	srv, url := newPanickyServer(t, f, 'c')
	tests := []struct {
		name, path, body string
		stream           bool
	}{
		{"before any engine work", "/v1/completions", `{"prompt":"PANIC","max_tokens":4}`, false},
		{"chat before any engine work", "/v1/chat/completions", `{"messages":[{"role":"user","content":"PANIC"}]}`, false},
		{"tokenize", "/tokenize", `{"prompt":"PANIC"}`, false},
		{"after the engine ran", "/v1/completions", `{"prompt":"a","max_tokens":4,"logprobs":1}`, false},
		{"mid-stream", "/v1/completions", `{"prompt":"a","max_tokens":8,"logprobs":1,"stream":true}`, true},
		{"chat mid-stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":8,"logprobs":true,"stream":true}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", url+tc.path, "", tc.body)
			if tc.stream {
				events := sseEvents(t, body)
				last := events[len(events)-2]
				if status != 200 || !strings.Contains(last, `"error":{`) || !strings.Contains(last, `"type":"server_error"`) {
					t.Errorf("%d: stream should end with an error event, then [DONE]: %s", status, body)
				}
			} else if status != 500 || !strings.Contains(string(body), `"type":"server_error"`) {
				t.Errorf("%d %s, want a 500 error object", status, body)
			}
			waitFor(t, func() bool { return srv.admitted.Load() == 0 })
			if status, _, body := call(t, "POST", url+"/v1/completions", "", `{"prompt":"a","max_tokens":2}`); status != 200 {
				t.Errorf("the next request: %d %s", status, body)
			}
		})
	}
	if got := metricValue(t, url, "gollm:request_panics_total"); got != fmt.Sprint(len(tests)) {
		t.Errorf("gollm:request_panics_total %s, want %d", got, len(tests))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live != 0 {
		t.Errorf("%d engine requests still live after the panics", f.live)
	}
}

// TestFreshConnectionsClosedAtShutdown: a connection that never sent a request does not hold up
// shutdown (net/http's Shutdown alone waits up to five seconds for it).
func TestFreshConnectionsClosedAtShutdown(t *testing.T) {
	f, srv, ln, cancel, served := serveBlocked(t, time.Minute)
	url := "http://" + ln.Addr().String()

	// An in-flight request keeps the server draining while the test looks at the idle connection.
	result := make(chan []byte, 1)
	go func() {
		_, _, body := call(t, "POST", url+"/v1/completions", "", `{"prompt":"a","max_tokens":4}`)
		result <- body
	}()
	waitFor(t, func() bool { return srv.admitted.Load() == 1 })
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	waitFor(t, func() bool { srv.fresh.mu.Lock(); defer srv.fresh.mu.Unlock(); return len(srv.fresh.conns) == 1 })
	cancel()
	// The server closes the unused connection at once, while the request is still held.
	waitFor(t, func() bool {
		srv.fresh.mu.Lock()
		defer srv.fresh.mu.Unlock()
		return srv.fresh.closing && len(srv.fresh.conns) == 0
	})
	if n, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read on the unused connection: %d, %v; want EOF", n, err)
	}
	select {
	case <-result:
		t.Fatal("the in-flight request ended before it was released")
	default:
	}
	close(f.block)
	if body := <-result; !strings.Contains(string(body), `"finish_reason":"length"`) {
		t.Errorf("the in-flight request did not complete during the drain: %s", body)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestFreshConnsTracker(t *testing.T) {
	var f freshConns
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	defer a2.Close()
	defer b2.Close()
	f.track(a1, http.StateNew)
	f.track(b1, http.StateNew)
	f.track(b1, http.StateActive) // b began a request: not fresh any more
	if n := f.closeAll(); n != 1 {
		t.Errorf("closed %d, want 1", n)
	}
	if _, err := a1.Write([]byte("x")); err == nil {
		t.Error("a fresh connection stayed open")
	}
	go b2.Read(make([]byte, 1))
	if _, err := b1.Write([]byte("x")); err != nil {
		t.Errorf("a busy connection was closed: %v", err)
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	f.track(c1, http.StateNew) // accepted after closeAll: closed at once
	if _, err := c1.Write([]byte("x")); err == nil {
		t.Error("a connection accepted during shutdown stayed open")
	}
}

// TestDrainCompletesInFlight: after the shutdown signal, a request already running finishes
// normally within the drain time (the abort at the deadline is TestServeShutdown's), and /health
// says 503 meanwhile.
func TestDrainCompletesInFlight(t *testing.T) {
	f, srv, ln, cancel, served := serveBlocked(t, time.Minute)
	url := "http://" + ln.Addr().String()

	var wg sync.WaitGroup
	var body []byte
	wg.Go(func() {
		_, _, body = call(t, "POST", url+"/v1/completions", "", `{"prompt":"a","max_tokens":4,"stream":true}`)
	})
	waitFor(t, func() bool { return srv.admitted.Load() == 1 })
	cancel()
	waitFor(t, srv.Draining)
	rec := newRecorder()
	srv.Handler().ServeHTTP(rec, httptestRequest("GET", "/health", ""))
	if rec.status != 503 {
		t.Errorf("/health while draining: %d", rec.status)
	}
	close(f.block)
	wg.Wait()
	if !strings.Contains(string(body), `"finish_reason":"length"`) || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("the in-flight stream did not finish normally: %s", body)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// recorder is a minimal http.ResponseWriter for calling the handler directly.
type recorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(200)
	return r.body.Write(p)
}

func (r *recorder) Flush() {}

func httptestRequest(method, path, body string) *http.Request {
	r, err := http.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	r.Header.Set("Content-Type", "application/json")
	return r
}

// eofEngine's streams end without a finished output: a broken engine contract.
type eofEngine struct{ fakeEngine }

func (e *eofEngine) Add(ctx context.Context, req engine.Request) (Stream, error) {
	return eofStream{}, nil
}

type eofStream struct{}

func (eofStream) Recv(ctx context.Context) (engine.Output, error) { return engine.Output{}, io.EOF }

// TestStreamEndsWithoutFinish: a stream that ends before its finished output fails its request
// with a 500 (or an error event) instead of holding the handler forever.
func TestStreamEndsWithoutFinish(t *testing.T) {
	cfg := templateConfig(t)
	cfg.ModelName = "m"
	cfg.Logger = quietLogger()
	srv, err := New(&eofEngine{fakeEngine{maxLen: 64}}, byteTokenizer{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := serveOnLoopback(t, srv, time.Second)
	status, _, body := call(t, "POST", url+"/v1/completions", "", `{"prompt":"a","max_tokens":2,"n":2}`)
	if status != 500 {
		t.Errorf("non-streamed: %d %s, want 500", status, body)
	}
	checkErrorObject(t, body)
	status, _, body = call(t, "POST", url+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":"x"}],"stream":true}`)
	if events := sseEvents(t, body); status != 200 || !strings.Contains(events[len(events)-2], `"error":{`) {
		t.Errorf("streamed: %d %s, want an error event", status, body)
	}
	waitFor(t, func() bool { return srv.admitted.Load() == 0 })
}
