package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/server/loadtest"
)

// TestRealEngine runs the main paths against the real engine and the built-in model (its real
// tokenizer and chat template).
func TestRealEngine(t *testing.T) {
	base, stop, err := loadtest.StartDefault(loadtest.ServerOptions{KVBlocks: 128, MaxNumSeqs: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	post := func(t *testing.T, path, body string) (int, map[string]any, string) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(data, &m)
		return resp.StatusCode, m, string(data)
	}
	text := func(m map[string]any, i int) string {
		return m["choices"].([]any)[i].(map[string]any)["text"].(string)
	}
	reason := func(m map[string]any, i int) any { return m["choices"].([]any)[i].(map[string]any)["finish_reason"] }

	t.Run("greedy is deterministic and stops at max_tokens", func(t *testing.T) {
		_, a, raw := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":12,"temperature":0,"ignore_eos":true}`)
		_, b, _ := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":12,"temperature":0,"ignore_eos":true}`)
		if text(a, 0) == "" || text(a, 0) != text(b, 0) || reason(a, 0) != "length" {
			t.Errorf("greedy: %s vs %q", raw, text(b, 0))
		}
		if u := a["usage"].(map[string]any); u["completion_tokens"] != 12.0 {
			t.Errorf("usage %v", u)
		}
	})
	t.Run("seed reproducibility", func(t *testing.T) {
		body := `{"prompt":"package main","max_tokens":16,"temperature":1,"seed":1234,"ignore_eos":true}`
		_, a, _ := post(t, "/v1/completions", body)
		_, b, _ := post(t, "/v1/completions", body)
		_, c, _ := post(t, "/v1/completions", strings.Replace(body, "1234", "99", 1))
		if text(a, 0) != text(b, 0) {
			t.Errorf("same seed, different text: %q vs %q", text(a, 0), text(b, 0))
		}
		if text(a, 0) == text(c, 0) {
			t.Logf("different seeds gave the same text %q (possible but unlikely)", text(a, 0))
		}
	})
	t.Run("stop string", func(t *testing.T) {
		_, a, _ := post(t, "/v1/completions", `{"prompt":"func main() {","max_tokens":24,"temperature":0,"ignore_eos":true}`)
		full := text(a, 0)
		if len(full) < 4 {
			t.Skipf("greedy continuation too short: %q", full)
		}
		stopAt := full[2:4]
		body, _ := json.Marshal(map[string]any{"prompt": "func main() {", "max_tokens": 24, "temperature": 0, "ignore_eos": true, "stop": []string{stopAt}})
		_, b, raw := post(t, "/v1/completions", string(body))
		want := full[:strings.Index(full, stopAt)]
		if text(b, 0) != want || reason(b, 0) != "stop" {
			t.Errorf("stop %q in %q: got %s, want text %q", stopAt, full, raw, want)
		}
	})
	t.Run("n=2 and logprobs", func(t *testing.T) {
		status, a, raw := post(t, "/v1/completions", `{"prompt":"func","max_tokens":5,"n":2,"logprobs":3,"seed":5,"ignore_eos":true}`)
		if status != 200 || len(a["choices"].([]any)) != 2 {
			t.Fatalf("%d %s", status, raw)
		}
		lp := a["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)
		tokens := lp["tokens"].([]any)
		if len(tokens) != 5 || len(lp["top_logprobs"].([]any)) != 5 || lp["token_logprobs"].([]any)[0].(float64) > 0 {
			t.Errorf("logprobs %v", lp)
		}
		joined := ""
		for _, tok := range tokens {
			joined += tok.(string)
		}
		if joined != text(a, 0) {
			t.Errorf("logprob tokens %q do not spell the text %q", joined, text(a, 0))
		}
	})
	t.Run("chat stream", func(t *testing.T) {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(
			`{"messages":[{"role":"system","content":"Write Go."},{"role":"user","content":"A loop"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2}`))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s := string(data)
		if resp.StatusCode != 200 || !strings.Contains(s, `"role":"assistant"`) || !strings.Contains(s, `"choices":[],"usage":{`) ||
			!strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `"top_logprobs":[{`) {
			t.Errorf("%d %s", resp.StatusCode, s)
		}
	})
	t.Run("tokenize round trip", func(t *testing.T) {
		_, tk, raw := post(t, "/tokenize", `{"prompt":"func main() {}","add_special_tokens":false}`)
		ids, _ := json.Marshal(tk["tokens"])
		_, dt, _ := post(t, "/detokenize", `{"tokens":`+string(ids)+`}`)
		if dt["prompt"] != "func main() {}" {
			t.Errorf("tokenize %s, detokenize %v", raw, dt)
		}
	})
	t.Run("prompt longer than the context", func(t *testing.T) {
		status, _, raw := post(t, "/v1/completions", `{"prompt":"`+strings.Repeat("x ", 2000)+`"}`)
		if status != 400 || !strings.Contains(raw, "maximum context length") {
			t.Errorf("%d %s", status, raw)
		}
	})
	kv, err := loadtest.WaitIdle(t.Context(), base)
	if err != nil || kv.BlocksUsed != 0 {
		t.Errorf("KV after the tests: %+v %v", kv, err)
	}
}
