package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gollm/gollm/engine"
)

// ServeOptions configures RunServe.
type ServeOptions struct {
	// URL is the server's base URL (http://host:port); requests go to URL + "/v1/completions".
	URL string
	// Engine, when not nil, takes the requests in process instead of a server at URL: each is an
	// engine.Request of the same prompt and length, timed by its stream's outputs (the engine's own
	// latencies, without HTTP and the server's streaming). Model then only names it in the result.
	Engine *engine.Engine
	// Model is the request's "model" field; empty means the first model GET /v1/models lists.
	Model string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Concurrency requests are in flight at once, NumPrompts in all.
	Concurrency, NumPrompts int
	// InputLen and OutputLen are drawn per request. Prompts are token ids drawn uniformly from
	// [0, VocabSize); the output is forced to its length with ignore_eos.
	InputLen, OutputLen Range
	// SharedPrefixLen, when positive, puts the same SharedPrefixLen tokens (a system prompt) before
	// every request's prompt.
	SharedPrefixLen int
	VocabSize       int
	// LongFraction of the requests, drawn at random, are long: their prompt length is drawn from
	// LongInputLen instead of InputLen (a mixed load of long and short prompts, whose time to first
	// token and inter-token latency ServeResult reports per class). 0 sends InputLen prompts only.
	LongFraction float64
	LongInputLen Range
	// Seed draws lengths and prompts.
	Seed uint64
	// Client sends the requests; nil means a client with Concurrency idle connections.
	Client *http.Client
	// Progress receives a progress bar; nil for none.
	Progress io.Writer
}

// ServeResult is a load test's measurement. Latency summaries are in milliseconds.
type ServeResult struct {
	URL         string `json:"url"`
	Model       string `json:"model"`
	Concurrency int    `json:"concurrency"`
	NumPrompts  int    `json:"num_prompts"`
	InputLen    Range  `json:"input_len"`
	OutputLen   Range  `json:"output_len"`
	// SharedPrefixLen is ServeOptions.SharedPrefixLen.
	SharedPrefixLen int `json:"shared_prefix_len,omitempty"`

	// MaxNumBatchedTokens is the in-process engine's token budget per step, its prefill chunk (set by
	// the caller that made the engine); 0 for a server, whose budget the client does not see.
	MaxNumBatchedTokens int `json:"max_num_batched_tokens,omitempty"`
	// LongPrefillTokenThreshold is the in-process engine's cap on one prompt's chunk (0: none, or a
	// server).
	LongPrefillTokenThreshold int `json:"long_prefill_token_threshold,omitempty"`

	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Errors holds the first few failures' messages.
	Errors []string `json:"errors,omitempty"`

	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Seconds      float64 `json:"elapsed_s"`
	// Throughputs over the run, counting completed requests only.
	RequestsPerSecond     float64 `json:"requests_s"`
	OutputTokensPerSecond float64 `json:"output_tok_s"`
	TotalTokensPerSecond  float64 `json:"total_tok_s"`

	// TTFT is the time to the first streamed chunk; ITL the gap between successive chunks; TPOT a
	// request's (end − first chunk) / (output tokens − 1); E2E the whole request.
	TTFT Summary `json:"ttft"`
	ITL  Summary `json:"itl"`
	TPOT Summary `json:"tpot"`
	E2E  Summary `json:"e2e"`

	// Short and Long split the completed requests of a mixed load (ServeOptions.LongFraction) by
	// class; nil without one. A long prompt's prefill delays the short requests behind it (their
	// TTFT) and stretches the steps of those decoding beside it (their ITL): the chunked-prefill
	// budget's trade-off.
	Short *ServeClass `json:"short,omitempty"`
	Long  *ServeClass `json:"long,omitempty"`
}

// ServeClass is one class of requests of a mixed load: its share of the completed requests and their
// latencies (ServeResult's definitions).
type ServeClass struct {
	InputLen  Range   `json:"input_len"`
	Completed int     `json:"completed"`
	TTFT      Summary `json:"ttft"`
	ITL       Summary `json:"itl"`
	E2E       Summary `json:"e2e"`
}

// maxReportedErrors caps ServeResult.Errors.
const maxReportedErrors = 5

// completionBody is the streaming /v1/completions request RunServe sends.
type completionBody struct {
	Model         string  `json:"model"`
	Prompt        []int32 `json:"prompt"`
	MaxTokens     int     `json:"max_tokens"`
	Temperature   float64 `json:"temperature"`
	IgnoreEOS     bool    `json:"ignore_eos"`
	Stream        bool    `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// completionChunk is the part of a streamed chunk RunServe reads.
type completionChunk struct {
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// requestTiming is one request's outcome.
type requestTiming struct {
	ttft, e2e    time.Duration
	gaps         []time.Duration
	promptTokens int
	outputTokens int
	err          error
}

// RunServe sends opts.NumPrompts streaming completion requests to a running server, opts.Concurrency
// at a time, and measures each one's chunks as they arrive.
func RunServe(ctx context.Context, opts ServeOptions) (*ServeResult, error) {
	switch {
	case opts.URL == "" && opts.Engine == nil:
		return nil, fmt.Errorf("bench: serve: no URL: %w", ErrInvalidOptions)
	case opts.Concurrency <= 0 || opts.NumPrompts <= 0 || opts.VocabSize <= 0 || opts.SharedPrefixLen < 0:
		return nil, fmt.Errorf("bench: serve: concurrency %d, %d prompts, vocabulary %d, shared prefix %d: %w",
			opts.Concurrency, opts.NumPrompts, opts.VocabSize, opts.SharedPrefixLen, ErrInvalidOptions)
	}
	for _, r := range []Range{opts.InputLen, opts.OutputLen} {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("bench: serve: %w", err)
		}
	}
	mixed := opts.LongFraction > 0
	switch {
	case !(opts.LongFraction >= 0 && opts.LongFraction <= 1):
		return nil, fmt.Errorf("bench: serve: long fraction %v not in [0, 1]: %w", opts.LongFraction, ErrInvalidOptions)
	case mixed:
		if err := opts.LongInputLen.validate(); err != nil {
			return nil, fmt.Errorf("bench: serve: long prompts: %w", err)
		}
	}
	base := strings.TrimRight(opts.URL, "/")
	client := opts.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: opts.Concurrency, Proxy: http.ProxyFromEnvironment}}
	}
	modelName := opts.Model
	if modelName == "" && opts.Engine == nil {
		var err error
		if modelName, err = firstModel(ctx, client, base, opts.APIKey); err != nil {
			return nil, fmt.Errorf("bench: serve: %w", err)
		}
	}
	send := func(body []byte) requestTiming {
		return sendCompletion(ctx, client, base+"/v1/completions", opts.APIKey, body)
	}
	if opts.Engine != nil {
		base = "in-process engine"
		send = func(body []byte) requestTiming { return sendEngine(ctx, opts.Engine, body) }
	}

	rng := rand.New(rand.NewPCG(opts.Seed, 0x5e7e))
	bodies := make([][]byte, opts.NumPrompts)
	long := make([]bool, opts.NumPrompts)
	wantTokens := 0
	shared := randomPrompt(rng, max(0, opts.SharedPrefixLen), opts.VocabSize)
	for i := range bodies {
		inputLen := opts.InputLen
		if mixed {
			if long[i] = rng.Float64() < opts.LongFraction; long[i] {
				inputLen = opts.LongInputLen
			}
		}
		in, out := inputLen.draw(rng), opts.OutputLen.draw(rng)
		prompt := append(append(make([]int32, 0, len(shared)+in), shared...), randomPrompt(rng, in, opts.VocabSize)...)
		b := completionBody{Model: modelName, Prompt: prompt, MaxTokens: out,
			IgnoreEOS: true, Stream: true}
		b.StreamOptions.IncludeUsage = true
		data, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("bench: serve: %w", err)
		}
		bodies[i] = data
		wantTokens += out
	}
	bar := NewProgress(opts.Progress, "serve", opts.NumPrompts, "requests")
	timings := make([]requestTiming, opts.NumPrompts)
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range min(opts.Concurrency, opts.NumPrompts) {
		wg.Go(func() {
			for i := range next {
				timings[i] = send(bodies[i])
				bar.Add(1)
			}
		})
	}
feed:
	for i := range bodies {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	bar.Done()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: serve: %w", err)
	}

	res := &ServeResult{URL: base, Model: modelName, Concurrency: opts.Concurrency, NumPrompts: opts.NumPrompts,
		InputLen: opts.InputLen, OutputLen: opts.OutputLen, SharedPrefixLen: opts.SharedPrefixLen, Seconds: elapsed.Seconds()}
	var ttft, itl, tpot, e2e []time.Duration
	var classes [2]struct{ ttft, itl, e2e []time.Duration } // short, long
	for i, t := range timings {
		if t.err != nil {
			res.Failed++
			if len(res.Errors) < maxReportedErrors {
				res.Errors = append(res.Errors, t.err.Error())
			}
			continue
		}
		res.Completed++
		res.PromptTokens += t.promptTokens
		res.OutputTokens += t.outputTokens
		ttft = append(ttft, t.ttft)
		e2e = append(e2e, t.e2e)
		itl = append(itl, t.gaps...)
		if t.outputTokens > 1 {
			tpot = append(tpot, (t.e2e-t.ttft)/time.Duration(t.outputTokens-1))
		}
		c := &classes[0]
		if long[i] {
			c = &classes[1]
		}
		c.ttft, c.itl, c.e2e = append(c.ttft, t.ttft), append(c.itl, t.gaps...), append(c.e2e, t.e2e)
	}
	if mixed {
		class := func(r Range, i int) *ServeClass {
			c := classes[i]
			return &ServeClass{InputLen: r, Completed: len(c.ttft), TTFT: Summarize(c.ttft), ITL: Summarize(c.itl), E2E: Summarize(c.e2e)}
		}
		res.Short, res.Long = class(opts.InputLen, 0), class(opts.LongInputLen, 1)
	}
	if s := res.Seconds; s > 0 {
		res.RequestsPerSecond = float64(res.Completed) / s
		res.OutputTokensPerSecond = float64(res.OutputTokens) / s
		res.TotalTokensPerSecond = float64(res.PromptTokens+res.OutputTokens) / s
	}
	res.TTFT, res.ITL, res.TPOT, res.E2E = Summarize(ttft), Summarize(itl), Summarize(tpot), Summarize(e2e)
	return res, nil
}

// sendCompletion sends one streaming request and times its chunks.
func sendCompletion(ctx context.Context, client *http.Client, url, apiKey string, body []byte) requestTiming {
	var t requestTiming
	var prompt struct {
		Prompt []int32 `json:"prompt"`
	}
	json.Unmarshal(body, &prompt) // our own JSON
	t.promptTokens = len(prompt.Prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.err = err
		return t
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.err = err
		return t
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		t.err = fmt.Errorf("POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(msg))
		return t
	}
	events := newSSEReader(resp.Body)
	var last time.Time
	chunks, usageTokens := 0, -1
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) {
			t.err = fmt.Errorf("POST %s: the stream ended without [DONE]", url)
			return t
		}
		if err != nil {
			t.err = fmt.Errorf("POST %s: %w", url, err)
			return t
		}
		now := time.Now()
		if string(data) == "[DONE]" {
			t.e2e = now.Sub(start)
			break
		}
		var c completionChunk
		if err := json.Unmarshal(data, &c); err != nil {
			t.err = fmt.Errorf("POST %s: chunk %q: %w", url, abbreviate(data), err)
			return t
		}
		if c.Error != nil {
			t.err = fmt.Errorf("POST %s: server error: %s", url, c.Error.Message)
			return t
		}
		if c.Usage != nil {
			usageTokens = c.Usage.CompletionTokens
			if c.Usage.PromptTokens > 0 {
				t.promptTokens = c.Usage.PromptTokens
			}
		}
		if len(c.Choices) == 0 {
			continue
		}
		if chunks == 0 {
			t.ttft = now.Sub(start)
		} else {
			t.gaps = append(t.gaps, now.Sub(last))
		}
		last = now
		chunks++
	}
	if chunks == 0 {
		t.err = fmt.Errorf("POST %s: no completion chunk before [DONE]", url)
		return t
	}
	t.outputTokens = chunks
	if usageTokens >= 0 {
		t.outputTokens = usageTokens
	}
	return t
}

// sendEngine runs one request of body (a completionBody) through the engine and times its outputs as
// sendCompletion times a server's chunks: from Add to the first output with tokens, and between outputs.
func sendEngine(ctx context.Context, e *engine.Engine, body []byte) requestTiming {
	var t requestTiming
	var req completionBody
	if err := json.Unmarshal(body, &req); err != nil { // our own JSON
		t.err = err
		return t
	}
	t.promptTokens = len(req.Prompt)
	start := time.Now()
	s, err := e.Add(ctx, engine.Request{PromptIDs: req.Prompt, MaxTokens: req.MaxTokens, IgnoreEOS: true})
	if err != nil {
		t.err = err
		return t
	}
	var last time.Time
	for {
		out, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.err = err
			return t
		}
		if n := len(out.TokenIDs); n > 0 {
			now := time.Now()
			if t.outputTokens == 0 {
				t.ttft = now.Sub(start)
			} else {
				t.gaps = append(t.gaps, now.Sub(last))
			}
			last = now
			t.outputTokens += n
		}
		if out.Finished() && out.FinishReason != engine.FinishLength {
			t.err = fmt.Errorf("request finished with %q after %d tokens: %v", out.FinishReason, t.outputTokens, out.Err)
			return t
		}
	}
	t.e2e = time.Since(start)
	if t.outputTokens == 0 {
		t.err = errors.New("the engine returned no token")
	}
	return t
}

// firstModel asks GET /v1/models for the served model's name.
func firstModel(ctx context.Context, client *http.Client, base, apiKey string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s/v1/models: %s (give the model name)", base, resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("GET %s/v1/models: %w", base, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("GET %s/v1/models: no model listed (give the model name)", base)
	}
	return list.Data[0].ID, nil
}

func abbreviate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// sseReader reads the data of Server-Sent Events (the WHATWG event-stream format): lines up to a
// blank line form an event, its "data:" lines joined with newlines; comments (":"), other fields and
// events without data are skipped. Lines end in \n, \r\n or \r.
type sseReader struct {
	r *bufio.Reader
}

// maxSSELine bounds one line, so a broken server cannot make the reader buffer without limit.
const maxSSELine = 4 << 20

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next event's data, or io.EOF at the end of the stream (an unterminated last event
// is dropped, as the format says).
func (s *sseReader) next() ([]byte, error) {
	var data []byte
	hasData := false
	for {
		line, err := s.line()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 { // dispatch
			if hasData {
				return data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) != "data" {
			continue
		}
		if hasData {
			data = append(data, '\n')
		}
		data = append(data, value...)
		hasData = true
	}
}

// line returns the next line without its terminator.
func (s *sseReader) line() ([]byte, error) {
	var line []byte
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		switch b {
		case '\n':
			return line, nil
		case '\r':
			if nb, err := s.r.Peek(1); err == nil && nb[0] == '\n' {
				s.r.ReadByte()
			}
			return line, nil
		}
		if len(line) >= maxSSELine {
			return nil, fmt.Errorf("event-stream line longer than %d bytes", maxSSELine)
		}
		line = append(line, b)
	}
}
