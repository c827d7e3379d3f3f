package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// startServe runs gollm serve in-process on a free port with args and returns its base URL; the server
// is stopped (as by SIGINT) at the end of the test, which then wants exit code 0.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() { done <- runServe(ctx, append([]string{"--port", "0"}, args...), &bytes.Buffer{}, &stderr) }()
	addr := regexp.MustCompile(`ready on (http://\S+)`) // once the model is loaded
	for deadline := time.Now().Add(time.Minute); ; {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			t.Cleanup(func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("serve exited with %d: %s", code, stderr.String())
				}
			})
			// The line is printed as the loaded server is handed over: wait until it serves (on a
			// loaded machine the hand-over may lag the line).
			for !healthy(m[1]) {
				if time.Now().After(deadline) {
					t.Fatalf("ready line but no healthy server: %s", stderr.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			return m[1]
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("serve exited with %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no ready line: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nanProjection puts one NaN into the first layer's o_proj: every logit of every request is NaN.
func nanProjection(name string, v []float32) {
	if name == "model.layers.0.self_attn.o_proj.weight" {
		v[5] = float32(math.NaN())
	}
}

// TestNonFiniteWeights is the fault: a checkpoint with one NaN projection. gollm generate and
// serve refuse to load it, naming the tensor; with --skip-weight-check they load it, and every request
// then ends with an error naming the cause (before, generate printed token 0 repeated and exited 0, serve
// answered 200 with it, 500 "cannot encode the response" with logprobs, and streamed one error event
// per token after a 200 without ever stopping): non-streamed a 500 with code non_finite_logits,
// streamed one error event and [DONE] with no token before it, and /metrics counts them.
func TestNonFiniteWeights(t *testing.T) {
	dir := writeTestModelEdited(t, nanProjection)
	code, _, stderr := runCLI(t, "generate", "--model", dir, "--prompt", "hi", "--kv-blocks", "16")
	if code != 1 || !strings.Contains(stderr, `tensor "model.layers.0.self_attn.o_proj.weight": weight is not finite`) {
		t.Errorf("generate: exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompt", "hi", "--kv-blocks", "16", "--skip-weight-check")
	if code != 1 || !strings.Contains(stderr, "logits are not finite") || strings.TrimSpace(stdout) != "" {
		t.Errorf("generate --skip-weight-check: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "serve", "--model", dir, "--port", "0", "--kv-blocks", "16")
	if code != 1 || !strings.Contains(stderr, "weight is not finite") {
		t.Errorf("serve: exit %d, stderr %q", code, stderr)
	}

	url := startServe(t, "--model", dir, "--kv-blocks", "16", "--skip-weight-check")
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	for _, body := range []string{
		`{"prompt":"hi","max_tokens":8}`,
		`{"prompt":"hi","max_tokens":8,"logprobs":2}`,
		`{"prompt":"hi","max_tokens":8,"temperature":0.8,"seed":3}`,
	} {
		status, data := post(body)
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		if err := json.Unmarshal([]byte(data), &e); status != 500 || err != nil || e.Error.Code != "non_finite_logits" ||
			!strings.Contains(e.Error.Message, "logits are not finite") {
			t.Errorf("%s: %d %s, want 500 with code non_finite_logits", body, status, data)
		}
	}
	status, data := post(`{"prompt":"hi","max_tokens":8,"stream":true,"logprobs":1}`)
	events := strings.Split(strings.TrimSuffix(data, "\n\n"), "\n\n")
	if status != 200 || len(events) != 2 || !strings.HasPrefix(events[0], `data: {"error":`) ||
		!strings.Contains(events[0], "non_finite_logits") || events[1] != "data: [DONE]" {
		t.Errorf("stream: %d, %d events: %.600s", status, len(events), data)
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^gollm:non_finite_logits_total\{model_name="[^"]+"\} 4$`).Match(metrics) {
		t.Errorf("metrics lack gollm:non_finite_logits_total 4:\n%s", regexp.MustCompile(`(?m)^gollm:non_finite.*$`).Find(metrics))
	}
}

// healthy reports whether the server at url answers /health with 200.
func healthy(url string) bool {
	resp, err := http.Get(url + "/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
