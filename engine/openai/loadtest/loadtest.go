// Package loadtest drives a gollm server with concurrent streaming clients and checks that it
// stays sound: every request completes (or is abandoned on purpose), and the KV cache is empty
// again afterwards. It talks HTTP only, so it tests the server as clients see it; StartDefault
// runs a server with the built-in model in-process, on loopback, for tests and the gollm-loadtest
// program.
package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/engine/openai"
	"github.com/gollm/gollm/model"
)

// Options describe one load run.
type Options struct {
	// BaseURL is the server, e.g. http://127.0.0.1:8000.
	BaseURL string
	// Clients stream concurrently, each for Rounds requests in a row.
	Clients, Rounds int
	// MaxTokens per request (ignore_eos is set, so every request generates exactly that many).
	MaxTokens int
	// DisconnectHalf makes every other client hang up after its first few chunks in each round.
	DisconnectHalf bool
}

// Result summarizes a run.
type Result struct {
	Requests     int // sent
	Completed    int // streamed to [DONE] with finish_reason "length" and MaxTokens tokens
	Disconnected int // abandoned mid-stream on purpose
	Failed       int // anything else
	Errors       []string
	Tokens       int // completion tokens of the completed requests
	Duration     time.Duration
	// TTFT percentiles over the completed requests.
	TTFTp50, TTFTp99 time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("%d requests: %d completed, %d disconnected, %d failed; %d tokens in %.1fs (%.0f tok/s); TTFT p50 %v p99 %v",
		r.Requests, r.Completed, r.Disconnected, r.Failed, r.Tokens, r.Duration.Seconds(),
		float64(r.Tokens)/r.Duration.Seconds(), r.TTFTp50.Round(time.Millisecond), r.TTFTp99.Round(time.Millisecond))
}

// prompts vary the clients' prompts (and so exercise the prefix cache with shared beginnings).
var prompts = []string{"func main() {", "package main\n\nimport \"fmt\"\n", "// Copyright 2009 The Go Authors.", "type Reader interface {",
	"for i := 0; i < n; i++ {", "if err != nil {\n\treturn", "func (b *Buffer) Write(p []byte) (n int, err error) {", "const ("}

// Run performs the load run. ctx bounds it.
func Run(ctx context.Context, o Options) Result {
	start := time.Now()
	var mu sync.Mutex
	var res Result
	var ttfts []time.Duration
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients}}
	for c := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range o.Rounds {
				hangUp := o.DisconnectHalf && c%2 == 1
				prompt := prompts[(c+round)%len(prompts)]
				out := streamOne(ctx, client, o, prompt, hangUp)
				mu.Lock()
				res.Requests++
				switch {
				case out.err != nil:
					res.Failed++
					if len(res.Errors) < 10 {
						res.Errors = append(res.Errors, out.err.Error())
					}
				case out.disconnected:
					res.Disconnected++
				default:
					res.Completed++
					res.Tokens += out.tokens
					ttfts = append(ttfts, out.ttft)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Duration = time.Since(start)
	slices.Sort(ttfts)
	if len(ttfts) > 0 {
		res.TTFTp50 = ttfts[len(ttfts)/2]
		res.TTFTp99 = ttfts[min(len(ttfts)-1, len(ttfts)*99/100)]
	}
	return res
}

type streamOutcome struct {
	tokens       int
	ttft         time.Duration
	disconnected bool
	err          error
}

// streamOne sends one streaming completion and reads it to [DONE], or hangs up after two chunks.
func streamOne(ctx context.Context, client *http.Client, o Options, prompt string, hangUp bool) streamOutcome {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": o.MaxTokens, "stream": true, "ignore_eos": true,
		"temperature": 0.8, "stream_options": map[string]any{"include_usage": true}})
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, "POST", o.BaseURL+"/v1/completions", strings.NewReader(string(body)))
	if err != nil {
		return streamOutcome{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return streamOutcome{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return streamOutcome{err: fmt.Errorf("status %d: %s", resp.StatusCode, data)}
	}
	var out streamOutcome
	chunks := 0
	finish := ""
	completion := -1
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			if finish != "length" || completion != o.MaxTokens {
				out.err = fmt.Errorf("stream ended with finish_reason %q and %d completion tokens", finish, completion)
			}
			out.tokens = completion
			return out
		}
		var chunk struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			return streamOutcome{err: fmt.Errorf("bad chunk %q: %w", line, err)}
		}
		if chunk.Error != nil {
			return streamOutcome{err: errors.New(chunk.Error.Message)}
		}
		if chunks == 0 {
			out.ttft = time.Since(start)
		}
		chunks++
		for _, ch := range chunk.Choices {
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
		if hangUp && chunks == 2 {
			cancel() // the client goes away mid-stream
			return streamOutcome{disconnected: true}
		}
	}
	if err := sc.Err(); err != nil {
		return streamOutcome{err: err}
	}
	return streamOutcome{err: errors.New("stream ended without [DONE]")}
}

// KV is the engine state /metrics reports.
type KV struct {
	Usage                        float64
	BlocksUsed, Running, Waiting int
}

// ScrapeKV reads the KV cache and queue gauges from /metrics.
func ScrapeKV(ctx context.Context, baseURL string) (KV, error) {
	m, err := ScrapeMetrics(ctx, baseURL, "")
	if err != nil {
		return KV{}, err
	}
	for _, name := range []string{"gollm:kv_cache_usage_perc", "gollm:kv_cache_blocks_used", "gollm:num_requests_running", "gollm:num_requests_waiting"} {
		if _, ok := m[name]; !ok {
			return KV{}, fmt.Errorf("metrics: no %s", name)
		}
	}
	return KV{Usage: m["gollm:kv_cache_usage_perc"], BlocksUsed: int(m["gollm:kv_cache_blocks_used"]),
		Running: int(m["gollm:num_requests_running"]), Waiting: int(m["gollm:num_requests_waiting"])}, nil
}

// WaitIdle polls /metrics until no sequence runs or waits (the engine has reaped every request)
// and returns the KV state then.
func WaitIdle(ctx context.Context, baseURL string) (KV, error) {
	for {
		kv, err := ScrapeKV(ctx, baseURL)
		if err != nil {
			return kv, err
		}
		if kv.Running == 0 && kv.Waiting == 0 && kv.BlocksUsed == 0 {
			return kv, nil
		}
		select {
		case <-ctx.Done():
			return kv, fmt.Errorf("engine not idle: %+v: %w", kv, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ServerOptions size the in-process server of StartDefault; zero fields take the server's and
// the engine's defaults.
type ServerOptions struct {
	KVBlocks, MaxNumSeqs int
	MaxQueue             int
	// MaxNumBatchedTokens caps the tokens of one engine step.
	MaxNumBatchedTokens int
	// WriteTimeout is the server's openai.Config.WriteTimeout.
	WriteTimeout time.Duration
	// WrapListener, when set, wraps the loopback listener (tests shrink socket buffers with it).
	WrapListener func(net.Listener) net.Listener
	// Logger receives the engine's and the server's logs; nil discards them.
	Logger *slog.Logger
}

// StartDefault serves the built-in model on a loopback port in-process, on the CPU, and returns its
// base URL and a function that shuts it down (draining for up to a second) and releases everything.
func StartDefault(opts ServerOptions) (baseURL string, stop func() error, err error) {
	quiet := opts.Logger
	if quiet == nil {
		quiet = discardLogger()
	}
	m, err := llm.Load(context.Background(), "", llm.Config{Device: model.DeviceCPU, KVBlocks: opts.KVBlocks,
		MaxNumSeqs: opts.MaxNumSeqs, MaxBatchedTokens: opts.MaxNumBatchedTokens, Logger: quiet})
	if err != nil {
		return "", nil, err
	}
	srv, err := m.NewServer(openai.Config{MaxQueue: opts.MaxQueue, WriteTimeout: opts.WriteTimeout, Logger: quiet})
	if err != nil {
		m.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.Close()
		return "", nil, err
	}
	if opts.WrapListener != nil {
		ln = opts.WrapListener(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, time.Second) }()
	return "http://" + ln.Addr().String(), func() error {
		cancel()
		return errors.Join(<-served, m.Close())
	}, nil
}
