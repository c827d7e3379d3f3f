package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		want   []string
		end    error
	}{
		{"openai", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}, io.EOF},
		{"crlf", "data: x\r\n\r\ndata: y\r\n\r\n", []string{"x", "y"}, io.EOF},
		{"cr", "data: x\r\rdata: y\r\r", []string{"x", "y"}, io.EOF},
		{"no space", "data:x\n\n", []string{"x"}, io.EOF},
		{"two spaces keep one", "data:  x\n\n", []string{" x"}, io.EOF},
		{"multi-line", "data: a\ndata: b\n\n", []string{"a\nb"}, io.EOF},
		{"comments and fields", ": ping\nevent: message\nid: 3\ndata: x\nretry: 10\n\n", []string{"x"}, io.EOF},
		{"event without data", "event: ping\n\ndata: x\n\n", []string{"x"}, io.EOF},
		{"empty data", "data:\n\n", []string{""}, io.EOF},
		{"blank lines", "\n\n\ndata: x\n\n\n", []string{"x"}, io.EOF},
		{"unterminated event dropped", "data: x\n\ndata: y\n", []string{"x"}, io.EOF},
		{"cut mid-line", "data: x\n\ndata: y", []string{"x"}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSSEReader(strings.NewReader(tc.stream))
			var got []string
			var err error
			for {
				var data []byte
				if data, err = r.next(); err != nil {
					break
				}
				got = append(got, string(data))
			}
			if !errors.Is(err, tc.end) {
				t.Errorf("ended with %v, want %v", err, tc.end)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: x\n\n", "data: a\r\ndata: b\r\n\r\n", ":c\n\n", "data", "\r\r\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := newSSEReader(strings.NewReader(s))
		for i := 0; ; i++ {
			data, err := r.next()
			if err != nil {
				return
			}
			if i > len(s) {
				t.Fatalf("more events than bytes in %q", s)
			}
			if bytes.ContainsAny(data, "\r") {
				t.Fatalf("event data %q holds a carriage return", data)
			}
		}
	})
}

// fakeServer is an OpenAI-style streaming completions server: it checks each request, then streams
// max_tokens tokens, two per chunk when pairs is set, followed by a usage chunk and [DONE].
type fakeServer struct {
	t          *testing.T
	vocab      int
	pairs      bool
	failEvery  int // every failEvery-th request (1-based) gets a 503; 0 for none
	errorEvery int // every errorEvery-th request ends with an error event instead; 0 for none
	barrier    int // the first barrier requests wait until that many are in flight
	// prefillPerToken delays a request's first chunk by this much per prompt token, as a prefill does.
	prefillPerToken time.Duration

	mu       sync.Mutex
	count    int
	inFlight int
	maxIn    int

	released    chan struct{} // closed once barrier requests were in flight together
	releaseOnce sync.Once
	problems    []string
}

func (f *fakeServer) problem(format string, args ...any) {
	f.mu.Lock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		io.WriteString(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
		return
	}
	if r.URL.Path != "/v1/completions" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model         string  `json:"model"`
		Prompt        []int   `json:"prompt"`
		MaxTokens     int     `json:"max_tokens"`
		Stream        bool    `json:"stream"`
		IgnoreEOS     bool    `json:"ignore_eos"`
		Temperature   float64 `json:"temperature"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.problem("bad body: %v", err)
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if req.Model != "fake-model" || !req.Stream || !req.IgnoreEOS || !req.StreamOptions.IncludeUsage || req.MaxTokens <= 0 || len(req.Prompt) == 0 {
		f.problem("unexpected request %+v", req)
	}
	for _, id := range req.Prompt {
		if id < 0 || id >= f.vocab {
			f.problem("prompt id %d outside [0, %d)", id, f.vocab)
		}
	}
	f.mu.Lock()
	f.count++
	n := f.count
	f.inFlight++
	f.maxIn = max(f.maxIn, f.inFlight)
	if f.inFlight == f.barrier {
		f.releaseOnce.Do(func() { close(f.released) })
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if n <= f.barrier {
		// Wait until barrier requests are in flight at once; a client that sends fewer at a time
		// never gets there, which the test reports instead of hanging.
		select {
		case <-f.released:
		case <-time.After(20 * time.Second):
			f.problem("request %d: fewer than %d requests were ever in flight at once", n, f.barrier)
			return
		}
	}
	if f.failEvery > 0 && n%f.failEvery == 0 {
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher := w.(http.Flusher)
	send := func(v any) {
		data, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", data)
		flusher.Flush()
	}
	type choice struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	}
	if f.errorEvery > 0 && n%f.errorEvery == 0 {
		send(map[string]any{"choices": []choice{{Text: " a"}}})
		send(map[string]any{"error": map[string]any{"message": "engine failed"}})
		io.WriteString(w, "data: [DONE]\n\n")
		return
	}
	io.WriteString(w, ": keep-alive\n\n")
	time.Sleep(time.Duration(len(req.Prompt)) * f.prefillPerToken)
	step := 1
	if f.pairs {
		step = 2
	}
	for i := 0; i < req.MaxTokens; i += step {
		c := choice{Text: strings.Repeat(" t", min(step, req.MaxTokens-i))}
		if i+step >= req.MaxTokens {
			reason := "length"
			c.FinishReason = &reason
		}
		send(map[string]any{"id": "cmpl-1", "object": "text_completion", "choices": []choice{c}, "usage": nil})
	}
	send(map[string]any{"choices": []choice{}, "usage": map[string]int{
		"prompt_tokens": len(req.Prompt), "completion_tokens": req.MaxTokens, "total_tokens": len(req.Prompt) + req.MaxTokens}})
	io.WriteString(w, "data: [DONE]\n\n")
}

func TestRunServe(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		pairs                 bool
		failEvery, errorEvery int
		concurrency, prompts  int
		wantFailed            int
	}{
		{"one token per chunk", false, 0, 0, 4, 12, 0},
		{"two tokens per chunk", true, 0, 0, 3, 7, 0},
		{"failures", false, 4, 5, 2, 10, 4}, // requests 4, 8 fail with 503; 5, 10 with an error event
		{"more workers than prompts", false, 0, 0, 16, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeServer{t: t, vocab: 50, pairs: tc.pairs, failEvery: tc.failEvery, errorEvery: tc.errorEvery,
				released: make(chan struct{})}
			if tc.failEvery == 0 && tc.errorEvery == 0 {
				fake.barrier = min(tc.concurrency, tc.prompts)
			}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			in, out := Range{3, 9}, Range{1, 6}
			res, err := RunServe(context.Background(), ServeOptions{
				URL: srv.URL + "/", Concurrency: tc.concurrency, NumPrompts: tc.prompts,
				InputLen: in, OutputLen: out, VocabSize: fake.vocab, Seed: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			fake.mu.Lock()
			for _, p := range fake.problems {
				t.Error(p)
			}
			maxIn := fake.maxIn
			fake.mu.Unlock()
			if res.Model != "fake-model" {
				t.Errorf("model %q, want the one /v1/models lists", res.Model)
			}
			if res.Failed != tc.wantFailed || res.Completed != tc.prompts-tc.wantFailed || len(res.Errors) != min(tc.wantFailed, maxReportedErrors) {
				t.Fatalf("completed %d, failed %d (%q), want %d failed", res.Completed, res.Failed, res.Errors, tc.wantFailed)
			}
			if maxIn > tc.concurrency {
				t.Errorf("%d requests in flight at once, concurrency %d", maxIn, tc.concurrency)
			}
			// The same seed draws the same lengths: recompute what the completed requests asked for.
			if tc.wantFailed == 0 {
				again, _ := RunServe(context.Background(), ServeOptions{URL: srv.URL, Model: "fake-model",
					Concurrency: 1, NumPrompts: tc.prompts, InputLen: in, OutputLen: out, VocabSize: fake.vocab, Seed: 1})
				if again.PromptTokens != res.PromptTokens || again.OutputTokens != res.OutputTokens {
					t.Errorf("same seed, different tokens: %d/%d vs %d/%d", again.PromptTokens, again.OutputTokens,
						res.PromptTokens, res.OutputTokens)
				}
				if res.PromptTokens < in.Min*tc.prompts || res.PromptTokens > in.Max*tc.prompts ||
					res.OutputTokens < out.Min*tc.prompts || res.OutputTokens > out.Max*tc.prompts {
					t.Errorf("tokens %d prompt, %d output outside the ranges", res.PromptTokens, res.OutputTokens)
				}
			}
			if res.TTFT.Count != res.Completed || res.E2E.Count != res.Completed {
				t.Errorf("TTFT %d, E2E %d samples for %d requests", res.TTFT.Count, res.E2E.Count, res.Completed)
			}
			for _, s := range []Summary{res.TTFT, res.ITL, res.TPOT, res.E2E} {
				if s.Count > 0 && !(s.Min >= 0 && s.Min <= s.P50 && s.P50 <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.Max) {
					t.Errorf("summary out of order: %+v", s)
				}
			}
			if res.TTFT.P50 > res.E2E.P50 {
				t.Errorf("TTFT p50 %v above E2E p50 %v", res.TTFT.P50, res.E2E.P50)
			}
			if res.OutputTokensPerSecond <= 0 || res.RequestsPerSecond <= 0 || res.Seconds <= 0 {
				t.Errorf("rates %+v", res)
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "TTFT") {
				t.Errorf("text report %q, %v", text.String(), err)
			}
		})
	}
}

// TestRunServeMixed: a mixed load splits its completed requests into short and long prompts by the
// drawn fraction, with each class's latencies; a server whose first chunk waits on the prompt's length
// (a prefill) shows the long prompts' larger time to first token in their class only.
func TestRunServeMixed(t *testing.T) {
	fake := &fakeServer{t: t, vocab: 50, prefillPerToken: 20 * time.Microsecond}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	short, long := Range{4, 8}, Range{2000, 2500}
	for _, tc := range []struct {
		fraction        float64
		wantShort, long bool // which classes must have requests
	}{{0.3, true, true}, {1, false, true}} {
		t.Run(fmt.Sprint("fraction=", tc.fraction), func(t *testing.T) {
			res, err := RunServe(context.Background(), ServeOptions{URL: srv.URL, Concurrency: 4, NumPrompts: 40,
				InputLen: short, OutputLen: Range{3, 3}, VocabSize: fake.vocab, Seed: 2, LongFraction: tc.fraction, LongInputLen: long})
			if err != nil {
				t.Fatal(err)
			}
			if res.Short == nil || res.Long == nil {
				t.Fatalf("classes short %v, long %v", res.Short, res.Long)
			}
			if res.Short.Completed+res.Long.Completed != res.Completed || res.Completed != 40 {
				t.Errorf("%d short + %d long of %d completed", res.Short.Completed, res.Long.Completed, res.Completed)
			}
			if (res.Short.Completed > 0) != tc.wantShort || (res.Long.Completed > 0) != tc.long {
				t.Errorf("%d short, %d long requests for fraction %v", res.Short.Completed, res.Long.Completed, tc.fraction)
			}
			// Prompt tokens bound the split: each class's prompts lie in its range.
			lo := res.Short.Completed*short.Min + res.Long.Completed*long.Min
			hi := res.Short.Completed*short.Max + res.Long.Completed*long.Max
			if res.PromptTokens < lo || res.PromptTokens > hi {
				t.Errorf("%d prompt tokens, want [%d, %d] for the classes' counts", res.PromptTokens, lo, hi)
			}
			for _, c := range []*ServeClass{res.Short, res.Long} {
				if c.TTFT.Count != c.Completed || c.ITL.Count != 2*c.Completed {
					t.Errorf("%v: %d TTFT and %d ITL samples for %d requests of 3 tokens", c.InputLen, c.TTFT.Count, c.ITL.Count, c.Completed)
				}
			}
			if tc.wantShort && !(res.Long.TTFT.Min > res.Short.TTFT.P50) {
				t.Errorf("long prompts' TTFT (min %.2f ms) not above the short ones' (p50 %.2f ms)", res.Long.TTFT.Min, res.Short.TTFT.P50)
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "long TTFT") || !strings.Contains(text.String(), "short ITL") {
				t.Errorf("text report %q, %v", text.String(), err)
			}
		})
	}
	res, err := RunServe(context.Background(), ServeOptions{URL: srv.URL, Concurrency: 2, NumPrompts: 4, InputLen: short,
		OutputLen: Range{2, 2}, VocabSize: fake.vocab})
	if err != nil || res.Short != nil || res.Long != nil {
		t.Errorf("no mix: classes %v, %v (%v)", res.Short, res.Long, err)
	}
	for _, opts := range []ServeOptions{{LongFraction: 1.5, LongInputLen: long}, {LongFraction: 0.5}, {LongFraction: -0.1, LongInputLen: long}} {
		opts.URL, opts.Concurrency, opts.NumPrompts, opts.InputLen, opts.OutputLen, opts.VocabSize = srv.URL, 1, 1, short, short, 10
		if _, err := RunServe(context.Background(), opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("fraction %v, long %v: %v", opts.LongFraction, opts.LongInputLen, err)
		}
	}
}

// TestSendCompletionCounts checks the token count of one request: usage when the server sends it,
// else one token per chunk, and the inter-chunk gaps.
func TestSendCompletionCounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		tokens int
		gaps   int
		err    string
	}{
		{"usage wins", "data: {\"choices\":[{\"text\":\"ab\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n", 5, 0, ""},
		{"chunks without usage", "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n", 3, 2, ""},
		{"no done", "data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 0, 0, "without [DONE]"},
		{"no chunk", "data: [DONE]\n\n", 0, 0, "no completion chunk"},
		{"bad json", "data: {nope\n\n", 0, 0, "chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer k" {
					http.Error(w, "no key", http.StatusUnauthorized)
					return
				}
				io.WriteString(w, tc.stream)
			}))
			defer srv.Close()
			got := sendCompletion(context.Background(), srv.Client(), srv.URL, "k", []byte(`{"prompt":[1,2,3]}`))
			if tc.err != "" {
				if got.err == nil || !strings.Contains(got.err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", got.err, tc.err)
				}
				return
			}
			if got.err != nil || got.outputTokens != tc.tokens || len(got.gaps) != tc.gaps || got.promptTokens != 3 {
				t.Errorf("got %+v, want %d tokens, %d gaps", got, tc.tokens, tc.gaps)
			}
			if bad := sendCompletion(context.Background(), srv.Client(), srv.URL, "", nil); bad.err == nil ||
				!strings.Contains(bad.err.Error(), "401") {
				t.Errorf("without the key: %v", bad.err)
			}
		})
	}
}

func TestRunServeOptions(t *testing.T) {
	ctx := context.Background()
	ok := ServeOptions{URL: "http://127.0.0.1:1", Concurrency: 1, NumPrompts: 1, InputLen: Range{1, 1}, OutputLen: Range{1, 1}, VocabSize: 10}
	for _, mutate := range []func(*ServeOptions){
		func(o *ServeOptions) { o.URL = "" },
		func(o *ServeOptions) { o.Concurrency = 0 },
		func(o *ServeOptions) { o.NumPrompts = 0 },
		func(o *ServeOptions) { o.VocabSize = 0 },
		func(o *ServeOptions) { o.InputLen = Range{0, 3} },
	} {
		o := ok
		mutate(&o)
		if _, err := RunServe(ctx, o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want ErrInvalidOptions", o, err)
		}
	}
	// No model name and no /v1/models: a clear error, not a run of failures.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	o := ok
	o.URL = srv.URL
	if _, err := RunServe(ctx, o); err == nil || !strings.Contains(err.Error(), "v1/models") {
		t.Errorf("err %v, want a /v1/models error", err)
	}
}

// TestServeResultWriteText: the text report names what shaped the load beyond the lengths (the shared
// prefix, the in-process engine's budget and chunk cap) only where they were set.
func TestServeResultWriteText(t *testing.T) {
	for _, tc := range []struct {
		name      string
		res       ServeResult
		want, not []string
	}{
		{"server", ServeResult{URL: "http://h", NumPrompts: 4, Concurrency: 2},
			nil, []string{"shared prefix", "max batched tokens", "long prefill token threshold"}},
		{"prefix", ServeResult{URL: "http://h", SharedPrefixLen: 4096},
			[]string{"behind the same 4096 tokens (shared prefix)"}, []string{"max batched tokens"}},
		{"engine", ServeResult{URL: "in-process engine", MaxNumBatchedTokens: 2048, LongPrefillTokenThreshold: 512},
			[]string{"chunks of 2048 tokens", "at most 512 a prompt a step"}, []string{"shared prefix"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.res.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("report has %q:\n%s", w, b.String())
				}
			}
		})
	}
}
