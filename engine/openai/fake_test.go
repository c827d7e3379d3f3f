package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/engine"
)

// byteTokenizer encodes text as its bytes (ids 0-255); 256 is BOS, 257 EOS.
type byteTokenizer struct{}

func (byteTokenizer) Encode(text string, addSpecial bool) []int32 {
	var ids []int32
	if addSpecial {
		ids = append(ids, 256)
	}
	for _, b := range []byte(text) {
		ids = append(ids, int32(b))
	}
	return ids
}

func (byteTokenizer) Decode(ids []int32, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		switch {
		case id < 256:
			b = append(b, byte(id))
		case !skipSpecial:
			b = append(b, fmt.Sprintf("<%d>", id)...)
		}
	}
	return string(b)
}

// fakeEngine generates "abcd..." (one letter per token, cycling), max_tokens of them, two tokens
// per output. Asked for prompt logprobs, it puts them on its first output as the engine does: the
// first entry unscored, the others at -1.5 with TopLogprobs alternatives "A", "B"... at -1, -2...,
// each text the token's piece of the decoded prompt (a special token's empty unless kept). With block set, streams wait for it to close (or for their request to be cancelled,
// which finishes them with FinishAbort). With failPrompt set, the first request whose prompt (as
// bytes) contains it finishes at once with FinishError, without waiting for block.
type fakeEngine struct {
	maxLen     int
	block      chan struct{}
	failPrompt string
	// script, when set, is what every request generates instead of letters: one output per piece (a
	// token per byte), the last finishing with scriptReason (FinishStop when empty).
	script       []string
	scriptReason engine.FinishReason

	mu       sync.Mutex
	requests []engine.Request
	// seen counts the requests added with each prompt: a request reports 2 cached prompt tokens for
	// each earlier one with its prompt (at most all but one), as if the prefix cache held them.
	seen    map[string]int
	failed  bool // a request has failed for failPrompt
	closed  bool
	live    int // streams not finished
	aborted int
}

func (f *fakeEngine) Add(ctx context.Context, req engine.Request) (Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("fake: %w", engine.ErrClosed)
	}
	if len(req.PromptIDs) >= f.maxLen {
		return nil, fmt.Errorf("fake: %w", engine.ErrPromptTooLong)
	}
	f.requests = append(f.requests, req)
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	key := fmt.Sprint(req.PromptIDs)
	cached := min(2*f.seen[key], len(req.PromptIDs)-1)
	f.seen[key]++
	f.live++
	fail := f.failPrompt != "" && !f.failed && strings.Contains((byteTokenizer{}).Decode(req.PromptIDs, true), f.failPrompt)
	f.failed = f.failed || fail
	ch := make(chan engine.Output, 1)
	go f.produce(ctx, req, cached, fail, ch)
	return &fakeStream{ch: ch}, nil
}

func (f *fakeEngine) produce(ctx context.Context, req engine.Request, cached int, fail bool, ch chan<- engine.Output) {
	defer close(ch)
	finish := func(o engine.Output) {
		f.mu.Lock()
		f.live--
		if o.FinishReason == engine.FinishAbort {
			f.aborted++
		}
		f.mu.Unlock()
		ch <- o
	}
	usage := engine.Usage{PromptTokens: len(req.PromptIDs), CachedTokens: cached}
	if fail {
		finish(engine.Output{FinishReason: engine.FinishError, Err: errors.New("fake: this prompt fails"), Usage: usage})
		return
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			finish(engine.Output{FinishReason: engine.FinishAbort, Usage: usage})
			return
		}
	}
	if f.script != nil {
		for i, piece := range f.script {
			o := engine.Output{Text: piece}
			for _, b := range []byte(piece) {
				o.TokenIDs = append(o.TokenIDs, int32(b))
				if req.Logprobs {
					o.Logprobs = append(o.Logprobs, engine.Logprobs{TokenLogprob: engine.TokenLogprob{ID: int32(b), Logprob: -0.5, Text: string([]byte{b})}, Rank: 1})
				}
			}
			usage.CompletionTokens += len(o.TokenIDs)
			o.Usage = usage
			if i == len(f.script)-1 {
				o.FinishReason = f.scriptReason
				if o.FinishReason == "" {
					o.FinishReason = engine.FinishStop
				}
				finish(o)
				return
			}
			select {
			case ch <- o:
			case <-ctx.Done():
				finish(engine.Output{FinishReason: engine.FinishAbort, Usage: usage})
				return
			}
		}
	}
	n := req.MaxTokens
	if n == 0 { // as many as the context allows, as the engine does
		n = f.maxLen - len(req.PromptIDs)
	}
	for i := 0; i < n; i += 2 {
		var o engine.Output
		if i == 0 && req.PromptLogprobs {
			o.PromptLogprobs = fakePromptLogprobs(req)
		}
		for k := i; k < min(n, i+2); k++ {
			id := int32('a' + k%26)
			o.TokenIDs = append(o.TokenIDs, id)
			o.Text += string(rune(id))
			if req.Logprobs {
				// The texts as the engine gives them: each token's text in context (one byte a token here).
				lp := engine.Logprobs{TokenLogprob: engine.TokenLogprob{ID: id, Logprob: -0.5, Text: string(rune(id))}, Rank: 1}
				for t := range req.TopLogprobs {
					lp.Top = append(lp.Top, engine.TokenLogprob{ID: int32('A' + t), Logprob: -1 - float32(t), Text: string(rune('A' + t))})
				}
				o.Logprobs = append(o.Logprobs, lp)
			}
		}
		usage.CompletionTokens += len(o.TokenIDs)
		o.Usage = usage
		if i+2 >= n {
			o.FinishReason = engine.FinishLength
			finish(o)
			return
		}
		select {
		case ch <- o:
		case <-ctx.Done():
			finish(engine.Output{FinishReason: engine.FinishAbort, Usage: usage})
			return
		}
	}
}

// fakePromptLogprobs is fakeEngine's answer to Request.PromptLogprobs.
func fakePromptLogprobs(req engine.Request) []engine.Logprobs {
	out := make([]engine.Logprobs, len(req.PromptIDs))
	for i, id := range req.PromptIDs {
		lp := engine.Logprobs{TokenLogprob: engine.TokenLogprob{ID: id, Text: (byteTokenizer{}).Decode([]int32{id}, !req.KeepSpecialTokens)}}
		if i > 0 {
			lp.Logprob, lp.Rank = -1.5, 2
			for t := range req.PromptTopLogprobs {
				lp.Top = append(lp.Top, engine.TokenLogprob{ID: int32('A' + t), Logprob: -1 - float32(t), Text: string(rune('A' + t))})
			}
		}
		out[i] = lp
	}
	return out
}

func (f *fakeEngine) Stats() engine.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return engine.Stats{Running: f.live, KVBlocksTotal: 100, KVBlocksUsed: f.live, KVUsage: float64(f.live) / 100,
		Steps: 9, PipelinedSteps: 7}
}

func (f *fakeEngine) MaxModelLen() int { return f.maxLen }

func (f *fakeEngine) lastRequest() engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

type fakeStream struct {
	ch   <-chan engine.Output
	done bool
}

func (s *fakeStream) Recv(ctx context.Context) (engine.Output, error) {
	select {
	case o, ok := <-s.ch:
		if !ok {
			return engine.Output{}, io.EOF
		}
		return o, nil
	case <-ctx.Done():
		return engine.Output{}, ctx.Err()
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newFakeServer starts a server over a fake engine behind httptest.
func newFakeServer(t *testing.T, cfg Config, f *fakeEngine) (*Server, *httptest.Server) {
	t.Helper()
	if f.maxLen == 0 {
		f.maxLen = 64
	}
	if cfg.ModelName == "" {
		cfg.ModelName = "fake-model"
	}
	cfg.Logger = quietLogger()
	srv, err := New(f, byteTokenizer{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return srv, ts
}

// call sends a request and returns the status, headers and body.
func call(t *testing.T, method, url, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE line without data prefix: %q", line)
		}
		events = append(events, data)
	}
	if !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream does not end with data: [DONE]: %q", body)
	}
	return events
}

// decodeMap parses a JSON object.
func decodeMap(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return m
}

// serveBlocked serves a Server named "m" over a fake engine whose outputs wait for f.block, on a
// loopback listener, with the given drain time; cancel starts the shutdown and served gets Serve's
// result.
func serveBlocked(t *testing.T, drain time.Duration) (f *fakeEngine, srv *Server, ln net.Listener, cancel context.CancelFunc, served chan error) {
	t.Helper()
	f = &fakeEngine{maxLen: 64, block: make(chan struct{})}
	cfg := templateConfig(t)
	cfg.ModelName = "m"
	cfg.Logger = quietLogger()
	srv, err := New(f, byteTokenizer{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served = make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, drain) }()
	return f, srv, ln, cancel, served
}

// wireError is the error object of a response body: {"error": {"message", "param", ...}}.
type wireError struct {
	Message string  `json:"message"`
	Param   *string `json:"param"`
}

// decodeAPIError decodes a response body's error object, failing t when the body is not one.
func decodeAPIError(t *testing.T, body []byte) wireError {
	t.Helper()
	var e struct {
		Error wireError `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return e.Error
}
