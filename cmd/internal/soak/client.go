package soak

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
	"time"
	"unicode/utf8"

	"github.com/gollm/gollm/engine/openai/loadtest"
)

// kinds are the request kinds of the mix, in report order.
var kinds = []string{"completion", "completion-stream", "chat", "chat-stream", "stream-hangup", "wait-hangup", "tokenize", "bad", "metrics"}

// client sends the mix's requests and checks their answers.
type client struct {
	base, key, model string
	http             *http.Client
}

// prompts are code-like beginnings (shared prefixes exercise the prefix cache).
var prompts = []string{
	"func main() {", "package main\n\nimport \"fmt\"\n", "// Copyright 2009 The Go Authors. All rights reserved.\n",
	"type Reader interface {", "for i := 0; i < n; i++ {", "if err != nil {\n\treturn", "const (", "var buf bytes.Buffer\n",
	"func (b *Buffer) Write(p []byte) (n int, err error) {", "switch x := v.(type) {", "select {\ncase <-ctx.Done():",
}

// promptText returns a random prompt: a code beginning, several, or random text.
func promptText(rng *rand.Rand) string {
	switch rng.IntN(6) {
	case 0:
		return prompts[rng.IntN(len(prompts))] + prompts[rng.IntN(len(prompts))]
	case 1:
		alphabet := []rune("aé z\n\t{}()😀漢字<|>\\\"")
		var b strings.Builder
		for range 1 + rng.IntN(40) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	default:
		return prompts[rng.IntN(len(prompts))]
	}
}

// random sends one request of a random kind and checks its answer.
func (c *client) random(ctx context.Context, rng *rand.Rand, maxTokens int) (string, error) {
	r := rng.IntN(100)
	switch {
	case r < 20:
		return "completion", c.completion(ctx, rng, maxTokens, false, -1)
	case r < 40:
		return "completion-stream", c.completion(ctx, rng, maxTokens, true, -1)
	case r < 52:
		return "chat", c.chat(ctx, rng, maxTokens, false, -1)
	case r < 64:
		return "chat-stream", c.chat(ctx, rng, maxTokens, true, -1)
	case r < 76:
		if rng.IntN(2) == 0 {
			return "stream-hangup", c.chat(ctx, rng, maxTokens, true, rng.IntN(4))
		}
		return "stream-hangup", c.completion(ctx, rng, maxTokens, true, rng.IntN(4))
	case r < 82:
		return "wait-hangup", c.waitHangup(ctx, rng, maxTokens)
	case r < 90:
		return "tokenize", c.tokenize(ctx, rng)
	case r < 97:
		return "bad", c.bad(ctx, rng)
	default:
		_, err := c.sample(ctx)
		return "metrics", err
	}
}

// post sends a JSON body and returns the response (the caller closes it).
func (c *client) post(ctx context.Context, path string, body any) (*http.Response, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return c.postRaw(ctx, path, data)
}

func (c *client) postRaw(ctx context.Context, path string, data []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+path, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	return c.http.Do(req)
}

// samplingFields returns random sampling fields common to both endpoints.
func (c *client) samplingFields(rng *rand.Rand, maxTokens int) map[string]any {
	m := map[string]any{"max_tokens": 1 + rng.IntN(maxTokens)}
	if c.model != "" {
		m["model"] = c.model
	}
	switch rng.IntN(3) {
	case 0:
		m["temperature"] = 0
	case 1:
		m["temperature"] = 0.2 + rng.Float64()
		m["top_p"] = 0.5 + rng.Float64()/2
		m["top_k"] = rng.IntN(50)
	}
	if rng.IntN(3) == 0 {
		m["seed"] = rng.IntN(1000)
	}
	if rng.IntN(4) == 0 {
		m["stop"] = []string{"\n\n", "}"}[:1+rng.IntN(2)]
	}
	if rng.IntN(3) == 0 {
		m["ignore_eos"] = true
	}
	if rng.IntN(3) == 0 {
		m["n"] = 2
	}
	if rng.IntN(5) == 0 {
		m["presence_penalty"] = rng.Float64()
		m["repetition_penalty"] = 1 + rng.Float64()/2
	}
	if rng.IntN(8) == 0 { // a ban and a push: the request draws on the host
		m["logit_bias"] = map[string]float64{fmt.Sprint(10 + rng.IntN(4000)): -100, fmt.Sprint(10 + rng.IntN(4000)): 5}
	}
	return m
}

// completion sends a completion; hangUpAfter ≥ 0 makes it a stream the client abandons after
// that many chunks.
func (c *client) completion(ctx context.Context, rng *rand.Rand, maxTokens int, stream bool, hangUpAfter int) error {
	body := c.samplingFields(rng, maxTokens)
	prompts := 1
	switch rng.IntN(5) {
	case 0:
		body["prompt"] = []string{promptText(rng), promptText(rng)}
		prompts = 2
	case 1:
		ids := make([]int, 1+rng.IntN(20))
		for i := range ids {
			ids[i] = 10 + rng.IntN(4000)
		}
		body["prompt"] = ids
	default:
		body["prompt"] = promptText(rng)
	}
	if rng.IntN(4) == 0 {
		body["logprobs"] = rng.IntN(6)
	}
	if rng.IntN(6) == 0 { // with logprobs, the prompt's logprobs too
		body["echo"] = true
	}
	if stream {
		body["stream"] = true
		if rng.IntN(2) == 0 {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	n := 1
	if v, ok := body["n"].(int); ok {
		n = v
	}
	return c.generate(ctx, "/v1/completions", body, prompts*n, stream, hangUpAfter)
}

// chat sends a chat completion (see completion).
func (c *client) chat(ctx context.Context, rng *rand.Rand, maxTokens int, stream bool, hangUpAfter int) error {
	body := c.samplingFields(rng, maxTokens)
	var msgs []map[string]any
	if rng.IntN(2) == 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": "You write Go."})
	}
	for turn := range 1 + rng.IntN(3) {
		if turn > 0 {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": promptText(rng)})
		}
		content := any(promptText(rng))
		if rng.IntN(4) == 0 {
			content = []map[string]any{{"type": "text", "text": promptText(rng)}, {"type": "text", "text": "more"}}
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": content})
	}
	body["messages"] = msgs
	if rng.IntN(4) == 0 {
		body["logprobs"] = true
		body["top_logprobs"] = rng.IntN(4)
	}
	if stream {
		body["stream"] = true
		if rng.IntN(2) == 0 {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	n := 1
	if v, ok := body["n"].(int); ok {
		n = v
	}
	return c.generate(ctx, "/v1/chat/completions", body, n, stream, hangUpAfter)
}

// choice is the part of a choice (or chunk choice) the checks read.
type choice struct {
	Index        int             `json:"index"`
	FinishReason *string         `json:"finish_reason"`
	Text         *string         `json:"text"`
	Message      json.RawMessage `json:"message"`
	Delta        json.RawMessage `json:"delta"`
}

type response struct {
	Object  string   `json:"object"`
	Choices []choice `json:"choices"`
	Usage   *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// generate sends a generation request and checks the answer: every choice finishes once with stop
// or length, usage adds up, streams end with [DONE].
func (c *client) generate(ctx context.Context, path string, body map[string]any, choices int, stream bool, hangUpAfter int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.post(ctx, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	if !stream {
		var r response
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return fmt.Errorf("decoding the response: %w", err)
		}
		return checkChoices(r.Choices, choices, true, r.Usage != nil && r.Usage.TotalTokens == r.Usage.PromptTokens+r.Usage.CompletionTokens)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var all []choice
	chunks := 0
	usageSeen := false
	wantUsage := body["stream_options"] != nil
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return fmt.Errorf("SSE line without data: %q", line)
		}
		if data == "[DONE]" {
			if hangUpAfter >= 0 {
				return nil // finished before the client hung up
			}
			if wantUsage != usageSeen {
				return fmt.Errorf("usage chunk present %v, asked for %v", usageSeen, wantUsage)
			}
			return checkChoices(all, choices, false, true)
		}
		var r response
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			return fmt.Errorf("bad chunk %q: %w", data, err)
		}
		if r.Error != nil {
			return fmt.Errorf("error event: %s", r.Error.Message)
		}
		if r.Usage != nil {
			usageSeen = true
		}
		all = append(all, r.Choices...)
		chunks++
		if hangUpAfter >= 0 && chunks > hangUpAfter {
			return nil // the deferred cancel hangs up mid-stream
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("stream ended without [DONE]")
}

// checkChoices checks that each of want choices finished exactly once with stop or length.
func checkChoices(cs []choice, want int, whole, usageOK bool) error {
	if !usageOK {
		return errors.New("usage missing or not adding up")
	}
	finished := make([]int, want)
	for _, ch := range cs {
		if ch.Index < 0 || ch.Index >= want {
			return fmt.Errorf("choice index %d of %d", ch.Index, want)
		}
		if ch.FinishReason != nil {
			if r := *ch.FinishReason; r != "stop" && r != "length" {
				return fmt.Errorf("choice %d finished with %q", ch.Index, r)
			}
			finished[ch.Index]++
		}
		if ch.Text != nil && !utf8.ValidString(*ch.Text) {
			return fmt.Errorf("choice %d: invalid UTF-8 text", ch.Index)
		}
	}
	if whole && len(cs) != want {
		return fmt.Errorf("%d choices, want %d", len(cs), want)
	}
	for i, n := range finished {
		if n != 1 {
			return fmt.Errorf("choice %d finished %d times", i, n)
		}
	}
	return nil
}

// waitHangup sends a non-streaming request and gives up on it after a random wait.
func (c *client) waitHangup(ctx context.Context, rng *rand.Rand, maxTokens int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
	defer cancel()
	body := c.samplingFields(rng, maxTokens)
	body["prompt"] = promptText(rng)
	body["max_tokens"] = maxTokens
	body["ignore_eos"] = true
	resp, err := c.post(ctx, "/v1/completions", body)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// tokenize checks that detokenize(tokenize(text)) gives the text back.
func (c *client) tokenize(ctx context.Context, rng *rand.Rand) error {
	text := promptText(rng)
	resp, err := c.post(ctx, "/tokenize", map[string]any{"prompt": text, "add_special_tokens": false})
	if err != nil {
		return err
	}
	var tk struct {
		Tokens []int `json:"tokens"`
		Count  int   `json:"count"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tk)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || tk.Count != len(tk.Tokens) {
		return fmt.Errorf("tokenize: status %d, %v, %d tokens counted %d", resp.StatusCode, err, len(tk.Tokens), tk.Count)
	}
	resp, err = c.post(ctx, "/detokenize", map[string]any{"tokens": tk.Tokens})
	if err != nil {
		return err
	}
	var dt struct {
		Prompt string `json:"prompt"`
	}
	err = json.NewDecoder(resp.Body).Decode(&dt)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("detokenize: status %d, %v", resp.StatusCode, err)
	}
	if dt.Prompt != text {
		return fmt.Errorf("detokenize(tokenize(%q)) = %q", text, dt.Prompt)
	}
	return nil
}

// badCase is a request the server must refuse with status and an OpenAI error object; header holds
// headers set beside the usual ones (a Host or Origin of a web page, a content type), noKey marks the
// refusals only a server without an API key makes.
type badCase struct {
	path, body string
	header     map[string]string
	status     int
	noKey      bool
}

// longPrompt is a prompt of more tokens than the soak's server holds in a context.
var longPrompt = strings.Repeat("func x() {} ", 3000)

var badCases = []badCase{
	{path: "/v1/completions", body: `{"prompt": "x", "max_tokens": `, status: 400},
	{path: "/v1/completions", body: `{"prompt": "` + longPrompt + `"}`, status: 400},
	{path: "/v1/completions", body: `{"prompt": "x", "n": 1000}`, status: 400},
	{path: "/v1/completions", body: `{"prompt": "x", "temperature": -1}`, status: 400},
	{path: "/v1/completions", body: `{"prompt": "x", "model": "no-such-model"}`, status: 404},
	{path: "/v1/chat/completions", body: `{"messages": [{"role": "robot", "content": "x"}]}`, status: 400},
	{path: "/v1/chat/completions", body: `{"messages": []}`, status: 400},
	{path: "/detokenize", body: `{"tokens": [-1]}`, status: 400},
	// Abuse: more ids or tokens than a context, a body that is not JSON, a page of another site, a
	// host name rebound to this machine.
	{path: "/detokenize", body: `{"tokens": [1` + strings.Repeat(",1", 100_000) + `]}`, status: 400},
	{path: "/tokenize", body: `{"prompt": "` + longPrompt + `"}`, status: 400},
	{path: "/v1/completions", body: `{"prompt": "x"}`, header: map[string]string{"Content-Type": "text/plain"}, status: 415},
	{path: "/v1/chat/completions", body: `{"messages": [{"role": "user", "content": "x"}]}`,
		header: map[string]string{"Origin": "https://attacker.example"}, status: 403, noKey: true},
	{path: "/v1/completions", body: `{"prompt": "x"}`, header: map[string]string{"Host": "rebound.attacker.example"}, status: 403, noKey: true},
}

// bad sends a request that must be refused with the given status and an OpenAI error object.
func (c *client) bad(ctx context.Context, rng *rand.Rand) error {
	tc := badCases[rng.IntN(len(badCases))]
	for tc.noKey && c.key != "" {
		tc = badCases[rng.IntN(len(badCases))]
	}
	return c.refused(ctx, tc)
}

// refused sends tc and checks that it is refused as it must be.
func (c *client) refused(ctx context.Context, tc badCase) error {
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+tc.path, strings.NewReader(tc.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	for k, v := range tc.header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Error == nil || resp.StatusCode != tc.status {
		return fmt.Errorf("%s %.60s: status %d (want %d), error object %v, %v", tc.path, tc.body, resp.StatusCode, tc.status, r.Error != nil, err)
	}
	return nil
}

// sample reads the server's state from /metrics.
func (c *client) sample(ctx context.Context) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/metrics", nil)
	if err != nil {
		return Sample{}, err
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("/metrics: status %d", resp.StatusCode)
	}
	vals, err := loadtest.ParseMetrics(resp.Body)
	if err != nil {
		return Sample{}, err
	}
	need := []string{"go_goroutines", "process_resident_memory_bytes", "gollm:kv_cache_blocks_used", "gollm:num_requests_running",
		"gollm:num_requests_waiting", "gollm:server_sequences_admitted", "gollm:num_preemptions_total"}
	for _, n := range need {
		if _, ok := vals[n]; !ok {
			return Sample{}, fmt.Errorf("/metrics lacks %s", n)
		}
	}
	return Sample{
		Goroutines:    int(vals["go_goroutines"]),
		RSSBytes:      int64(vals["process_resident_memory_bytes"]),
		KVBlocksUsed:  int(vals["gollm:kv_cache_blocks_used"]),
		Running:       int(vals["gollm:num_requests_running"]),
		Waiting:       int(vals["gollm:num_requests_waiting"]),
		Admitted:      int(vals["gollm:server_sequences_admitted"]),
		Preemptions:   int(vals["gollm:num_preemptions_total"]),
		GeneratedToks: int64(vals["gollm:generation_tokens_total"]),
		OpenFDs:       int(vals["process_open_fds"]),
	}, nil
}
