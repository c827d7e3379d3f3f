package openai

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/weights/chattemplate"
)

const testTemplate = `{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}`

func templateConfig(t *testing.T) Config {
	t.Helper()
	tpl, err := chattemplate.Parse(testTemplate)
	if err != nil {
		t.Fatal(err)
	}
	return Config{ChatTemplate: tpl, AddSpecialTokens: true, VocabSize: 258}
}

func TestErrors(t *testing.T) {
	cfg := templateConfig(t)
	cfg.MaxBodyBytes = 2048
	cfg.MaxN = 4
	cfg.MaxTokensLimit = 40
	_, ts := newFakeServer(t, cfg, &fakeEngine{maxLen: 64})
	long := strings.Repeat("x", 70)
	tests := []struct {
		name, method, path, body string
		status                   int
		param                    string
	}{
		{"invalid json", "POST", "/v1/completions", `{"prompt": `, 400, ""},
		{"empty body", "POST", "/v1/completions", ``, 400, ""},
		{"wrong type", "POST", "/v1/completions", `{"prompt":"a","max_tokens":"ten"}`, 400, "max_tokens"},
		{"missing prompt", "POST", "/v1/completions", `{"model":"fake-model"}`, 400, "prompt"},
		{"bad prompt type", "POST", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt"},
		{"temperature range", "POST", "/v1/completions", `{"prompt":"a","temperature":3}`, 400, "temperature"},
		{"top_p range", "POST", "/v1/completions", `{"prompt":"a","top_p":0}`, 400, "top_p"},
		{"n too large", "POST", "/v1/completions", `{"prompt":"a","n":5}`, 400, "n"},
		{"max_tokens zero", "POST", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens"},
		{"max_tokens over limit", "POST", "/v1/completions", `{"prompt":"a","max_tokens":41}`, 400, "max_tokens"},
		{"prompt longer than context", "POST", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "prompt"},
		{"prompt plus max_tokens over context", "POST", "/v1/completions", `{"prompt":"` + long[:40] + `","max_tokens":30}`, 400, "prompt"},
		{"stop wrong type", "POST", "/v1/completions", `{"prompt":"a","stop":5}`, 400, "stop"},
		{"too many stops", "POST", "/v1/completions", `{"prompt":"a","stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]}`, 400, "stop"},
		{"logprobs range", "POST", "/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "logprobs"},
		{"prompt_logprobs negative", "POST", "/v1/completions", `{"prompt":"a","prompt_logprobs":-2}`, 400, "prompt_logprobs"},
		{"prompt_logprobs -1, the whole vocabulary", "POST", "/v1/completions", `{"prompt":"a","prompt_logprobs":-1}`, 400, "prompt_logprobs"},
		{"prompt_logprobs above the cap", "POST", "/v1/completions", `{"prompt":"a","prompt_logprobs":21}`, 400, "prompt_logprobs"},
		{"prompt_logprobs with stream", "POST", "/v1/completions", `{"prompt":"a","prompt_logprobs":1,"stream":true}`, 400, "prompt_logprobs"},
		{"prompt_logprobs with stream and echo", "POST", "/v1/completions", `{"prompt":"a","prompt_logprobs":2,"echo":true,"logprobs":1,"stream":true}`, 400, "prompt_logprobs"},
		{"prompt_logprobs wrong type", "POST", "/v1/completions", `{"prompt":"a","prompt_logprobs":"2"}`, 400, "prompt_logprobs"},
		{"chat prompt_logprobs -1", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"prompt_logprobs":-1}`, 400, "prompt_logprobs"},
		{"chat prompt_logprobs above the cap", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"prompt_logprobs":21}`, 400, "prompt_logprobs"},
		{"chat prompt_logprobs with stream", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"prompt_logprobs":3,"stream":true}`, 400, "prompt_logprobs"},
		{"max_tokens zero with echo and a min_tokens", "POST", "/v1/completions", `{"prompt":"a","echo":true,"max_tokens":0,"min_tokens":2}`, 400, "min_tokens"},
		{"logit bias key not a token", "POST", "/v1/completions", `{"prompt":"a","logit_bias":{"a":5}}`, 400, "logit_bias"},
		{"logit bias key outside the vocabulary", "POST", "/v1/completions", `{"prompt":"a","logit_bias":{"258":5}}`, 400, "logit_bias"},
		{"logit bias negative key", "POST", "/v1/completions", `{"prompt":"a","logit_bias":{"-1":5}}`, 400, "logit_bias"},
		{"logit bias token twice", "POST", "/v1/completions", `{"prompt":"a","logit_bias":{"5":1,"05":-1}}`, 400, "logit_bias"},
		{"logit bias value not a number", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"logit_bias":{"5":"x"}}`, 400, "logit_bias"},
		{"stream options without stream", "POST", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"unknown model", "POST", "/v1/completions", `{"model":"gpt-4","prompt":"a"}`, 404, "model"},
		{"unknown model chat", "POST", "/v1/chat/completions", `{"model":"gpt-4","messages":[{"role":"user","content":"a"}]}`, 404, "model"},
		{"unknown model get", "GET", "/v1/models/gpt-4", ``, 404, "model"},
		{"body too large", "POST", "/v1/completions", `{"prompt":"` + strings.Repeat("y", 3000) + `"}`, 413, ""},
		{"no messages", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "messages"},
		{"bad role", "POST", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"a"}]}`, 400, "messages[0].role"},
		{"image part", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0]"},
		{"missing content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user"}]}`, 400, "messages[0].content"},
		{"top_logprobs without logprobs", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"top_logprobs":2}`, 400, "top_logprobs"},
		{"max_completion_tokens zero", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_completion_tokens":0}`, 400, "max_completion_tokens"},
		{"tools", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]}`, 400, "tools[0].function"},
		{"chat too long", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages"},
		{"unknown route", "GET", "/v1/engines", ``, 404, ""},
		{"completions by GET", "GET", "/v1/completions", ``, 405, ""},
		{"chat by GET", "GET", "/v1/chat/completions", ``, 405, ""},
		{"models by POST", "POST", "/v1/models", `{}`, 405, ""},
		{"a model by DELETE", "DELETE", "/v1/models/fake-model", ``, 405, ""},
		{"tokenize by GET", "GET", "/tokenize", ``, 405, ""},
		{"detokenize outside vocabulary", "POST", "/detokenize", `{"tokens":[1,999]}`, 400, "tokens"},
		{"tokenize nothing", "POST", "/tokenize", `{}`, 400, "prompt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, header, body := call(t, tc.method, ts.URL+tc.path, "", tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if allow := header.Get("Allow"); (status == http.StatusMethodNotAllowed) != (allow != "") {
				t.Errorf("status %d with Allow %q", status, allow)
			}
			var e struct {
				Error *struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("not an OpenAI error object: %s", body)
			}
			for _, key := range []string{`"param":`, `"code":`} {
				if !strings.Contains(string(body), key) {
					t.Errorf("error object lacks %s (must be null when unset): %s", key, body)
				}
			}
			got := ""
			if e.Error.Param != nil {
				got = *e.Error.Param
			}
			if got != tc.param {
				t.Errorf("param %q, want %q (%s)", got, tc.param, e.Error.Message)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	cfg := templateConfig(t)
	cfg.APIKey = "sekrit"
	_, ts := newFakeServer(t, cfg, &fakeEngine{})
	for _, path := range []string{"/v1/models", "/metrics", "/v1/models/fake-model"} {
		for _, key := range []string{"", "wrong", "sekrit2", "sekri"} {
			status, _, body := call(t, "GET", ts.URL+path, key, "")
			if status != http.StatusUnauthorized || !strings.Contains(string(body), "invalid_api_key") {
				t.Errorf("%s with key %q: %d %s", path, key, status, body)
			}
		}
		if status, _, body := call(t, "GET", ts.URL+path, "sekrit", ""); status != 200 {
			t.Errorf("%s with the key: %d %s", path, status, body)
		}
	}
	if status, _, _ := call(t, "POST", ts.URL+"/v1/completions", "nope", `{"prompt":"a"}`); status != 401 {
		t.Errorf("completions without the key: %d", status)
	}
	if status, _, _ := call(t, "GET", ts.URL+"/health", "", ""); status != 200 {
		t.Errorf("/health must not need the key: %d", status)
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	srv, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	status, _, body := call(t, "GET", ts.URL+"/v1/models", "", "")
	m := decodeMap(t, body)
	data, _ := m["data"].([]any)
	if status != 200 || m["object"] != "list" || len(data) != 1 || data[0].(map[string]any)["id"] != "fake-model" ||
		data[0].(map[string]any)["object"] != "model" || data[0].(map[string]any)["max_model_len"] != 64.0 {
		t.Errorf("/v1/models: %d %s", status, body)
	}
	if status, _, body := call(t, "GET", ts.URL+"/v1/models/fake-model", "", ""); status != 200 || decodeMap(t, body)["id"] != "fake-model" {
		t.Errorf("/v1/models/fake-model: %d %s", status, body)
	}
	if status, _, _ := call(t, "GET", ts.URL+"/health", "", ""); status != 200 {
		t.Errorf("/health: %d", status)
	}
	call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":5}`)
	status, _, body = call(t, "GET", ts.URL+"/metrics", "", "")
	// Every gollm metric carries the model's name; the Go runtime's and the process's do not.
	const label = `model_name="fake-model"`
	for _, name := range []string{"gollm:num_requests_running{" + label + "}", "gollm:num_requests_waiting{" + label + "}",
		"gollm:kv_cache_usage_perc{" + label + "}", "gollm:prefix_cache_hit_rate{" + label + "}",
		"gollm:num_preemptions_total{" + label + "}", "gollm:prompt_tokens_total{" + label + "} 3",
		"gollm:engine_steps_total{" + label + "} 9", "gollm:engine_pipelined_steps_total{" + label + "} 7",
		"gollm:generation_tokens_total{" + label + "} 5", "gollm:time_to_first_token_seconds_count{" + label + "} 1",
		"gollm:inter_token_latency_seconds_count{" + label + "}", "gollm:e2e_request_latency_seconds_count{" + label + "} 1",
		`gollm:request_success_total{finished_reason="length",` + label + `} 1`, "\ngo_goroutines ", "\nprocess_open_fds "} {
		if status != 200 || !strings.Contains(string(body), name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "gollm:") && !strings.Contains(line, label) {
			t.Errorf("a metric without the model_name label: %s", line)
		}
	}
	srv.draining.Store(true)
	if status, _, _ := call(t, "GET", ts.URL+"/health", "", ""); status != 503 {
		t.Errorf("/health while draining: %d, want 503", status)
	}
	status, hdr, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"a"}`)
	if status != 503 || hdr.Get("Retry-After") == "" {
		t.Errorf("completion while draining: %d %s", status, body)
	}
}

func TestCompletions(t *testing.T) {
	f := &fakeEngine{maxLen: 64}
	_, ts := newFakeServer(t, templateConfig(t), f)
	tests := []struct {
		name    string
		body    string
		texts   []string
		prompts int // prompt tokens in usage
	}{
		{"string", `{"prompt":"hi","max_tokens":3}`, []string{"abc"}, 3},
		{"default max_tokens is 16", `{"prompt":"hi"}`, []string{"abcdefghijklmnop"}, 3},
		{"list of strings", `{"prompt":["hi","yo!"],"max_tokens":2}`, []string{"ab", "ab"}, 7},
		{"token ids", `{"prompt":[1,2,3],"max_tokens":1}`, []string{"a"}, 3},
		{"token id lists", `{"prompt":[[1,2],[3]],"max_tokens":1}`, []string{"a", "a"}, 3},
		{"n=2 per prompt", `{"prompt":["hi","yo"],"n":2,"max_tokens":1}`, []string{"a", "a", "a", "a"}, 6},
		{"echo", `{"prompt":"hi","echo":true,"max_tokens":2}`, []string{"hiab"}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", tc.body)
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			var resp completionResponse
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Object != "text_completion" || !strings.HasPrefix(resp.ID, "cmpl-") || resp.Model != "fake-model" || resp.Created == 0 {
				t.Errorf("header fields: %s", body)
			}
			if len(resp.Choices) != len(tc.texts) {
				t.Fatalf("%d choices, want %d: %s", len(resp.Choices), len(tc.texts), body)
			}
			completion := 0
			for i, c := range resp.Choices {
				if c.Index != i || c.Text != tc.texts[i] || c.FinishReason == nil || *c.FinishReason != "length" {
					t.Errorf("choice %d: %+v, want text %q", i, c, tc.texts[i])
				}
				completion += len(tc.texts[i])
				if strings.HasPrefix(tc.name, "echo") {
					completion -= 2
				}
			}
			if resp.Usage == nil || resp.Usage.PromptTokens != tc.prompts || resp.Usage.CompletionTokens != completion ||
				resp.Usage.TotalTokens != tc.prompts+completion {
				t.Errorf("usage %+v, want %d prompt and %d completion tokens", resp.Usage, tc.prompts, completion)
			}
			if !strings.Contains(string(body), `"logprobs":null`) {
				t.Errorf("logprobs must be null when not asked: %s", body)
			}
		})
	}

	t.Run("fields reach the engine", func(t *testing.T) {
		status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":4,"temperature":0.5,"top_p":0.9,
			"top_k":7,"min_p":0.1,"seed":42,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"stop":"zz",
			"stop_token_ids":[5],"ignore_eos":true,"user":"u","min_tokens":1}`)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		r := f.lastRequest()
		sp := r.Sampling
		if r.MaxTokens != 4 || sp.Temperature != 0.5 || sp.TopP != 0.9 || sp.TopK != 7 || sp.MinP != 0.1 || sp.Seed == nil || *sp.Seed != 42 ||
			sp.PresencePenalty != 0.5 || sp.FrequencyPenalty != -0.5 || sp.RepetitionPenalty != 1.1 || len(r.Stop) != 1 || r.Stop[0] != "zz" ||
			len(r.StopTokenIDs) != 1 || !r.IgnoreEOS || r.MinTokens != 1 || len(r.PromptIDs) != 3 || r.PromptIDs[0] != 256 {
			t.Errorf("engine request %+v", r)
		}
	})

	t.Run("n=2 with seed gives each choice its own seed", func(t *testing.T) {
		call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":1,"n":2,"seed":7}`)
		f.mu.Lock()
		a, b := f.requests[len(f.requests)-2], f.requests[len(f.requests)-1]
		f.mu.Unlock()
		if *a.Sampling.Seed == *b.Sampling.Seed {
			t.Errorf("choices share seed %d", *a.Sampling.Seed)
		}
	})

	t.Run("logprobs", func(t *testing.T) {
		status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":3,"logprobs":2}`)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		var resp completionResponse
		json.Unmarshal(body, &resp)
		lp := resp.Choices[0].Logprobs
		if lp == nil || strings.Join(lp.Tokens, "") != "abc" || len(lp.TokenLogprobs) != 3 || lp.TokenLogprobs[0] == nil || *lp.TokenLogprobs[0] != -0.5 ||
			len(lp.TopLogprobs) != 3 || len(lp.TopLogprobs[0]) != 3 || lp.TopLogprobs[0]["B"] != -2 || lp.TextOffset[2] != 2 {
			t.Errorf("logprobs %s", body)
		}
		if f.lastRequest().PromptLogprobs {
			t.Errorf("prompt logprobs asked without echo")
		}
	})
}

func TestCompletionStream(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{})
	status, hdr, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v", status, hdr)
	}
	events := sseEvents(t, body)
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("last event %q", events[len(events)-1])
	}
	var text string
	chunks := events[:len(events)-1]
	for i, e := range chunks[:len(chunks)-1] {
		m := decodeMap(t, []byte(e))
		if m["object"] != "text_completion" || !strings.Contains(e, `"usage":null`) {
			t.Errorf("chunk %d: %s", i, e)
		}
		ch := m["choices"].([]any)[0].(map[string]any)
		text += ch["text"].(string)
		wantReason := i == len(chunks)-2
		if (ch["finish_reason"] != nil) != wantReason || !strings.Contains(e, `"logprobs":null`) {
			t.Errorf("chunk %d finish_reason/logprobs: %s", i, e)
		}
	}
	if text != "abcde" {
		t.Errorf("streamed text %q", text)
	}
	last := decodeMap(t, []byte(chunks[len(chunks)-1]))
	if len(last["choices"].([]any)) != 0 || last["usage"].(map[string]any)["completion_tokens"] != 5.0 {
		t.Errorf("usage chunk %s", chunks[len(chunks)-1])
	}
	// Without include_usage there is no usage field at all.
	_, _, body = call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":2,"stream":true}`)
	if strings.Contains(string(body), "usage") {
		t.Errorf("usage without include_usage: %s", body)
	}
}

func TestChat(t *testing.T) {
	f := &fakeEngine{maxLen: 64}
	_, ts := newFakeServer(t, templateConfig(t), f)
	status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", `{"model":"fake-model","messages":[{"role":"system","content":"S"},
		{"role":"user","content":[{"type":"text","text":"A"},{"type":"text","text":"B"}]},{"role":"assistant","content":null},{"role":"developer","content":"D"}],
		"max_completion_tokens":3,"max_tokens":9,"logprobs":true,"top_logprobs":1}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	want := "<system>S<user>A\nB<assistant><system>D<assistant>"
	if got := (byteTokenizer{}).Decode(f.lastRequest().PromptIDs, false); got != want {
		t.Errorf("rendered prompt %q, want %q (no BOS added: the template owns special tokens)", got, want)
	}
	var resp chatResponse
	json.Unmarshal(body, &resp)
	c := resp.Choices[0]
	if resp.Object != "chat.completion" || !strings.HasPrefix(resp.ID, "chatcmpl-") || c.Message.Role != "assistant" || c.Message.Content == nil || *c.Message.Content != "abc" ||
		*c.FinishReason != "length" || resp.Usage.CompletionTokens != 3 || resp.Usage.PromptTokens != len(want) {
		t.Errorf("response %s", body)
	}
	if c.Logprobs == nil || len(c.Logprobs.Content) != 3 || c.Logprobs.Content[0].Token != "a" || c.Logprobs.Content[0].Bytes[0] != 'a' ||
		len(c.Logprobs.Content[0].TopLogprobs) != 1 || c.Logprobs.Content[0].TopLogprobs[0].Token != "A" {
		t.Errorf("logprobs %s", body)
	}

	t.Run("add_generation_prompt false and template kwargs", func(t *testing.T) {
		call(t, "POST", ts.URL+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,"max_tokens":1}`)
		if got := (byteTokenizer{}).Decode(f.lastRequest().PromptIDs, false); got != "<user>x" {
			t.Errorf("prompt %q", got)
		}
	})

	t.Run("stream", func(t *testing.T) {
		status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"n":2,"stream":true,"stream_options":{"include_usage":true}}`)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		events := sseEvents(t, body)
		texts := map[float64]string{}
		reasons := map[float64]int{}
		roles := 0
		for _, e := range events[:len(events)-2] {
			m := decodeMap(t, []byte(e))
			if m["object"] != "chat.completion.chunk" || !strings.Contains(e, `"usage":null`) {
				t.Errorf("chunk %s", e)
			}
			ch := m["choices"].([]any)[0].(map[string]any)
			idx := ch["index"].(float64)
			delta := ch["delta"].(map[string]any)
			if delta["role"] == "assistant" {
				roles++
				if delta["content"] != "" || len(texts[idx]) > 0 {
					t.Errorf("role chunk must come first with empty content: %s", e)
				}
			}
			if s, ok := delta["content"].(string); ok {
				texts[idx] += s
			}
			if ch["finish_reason"] != nil {
				reasons[idx]++
				if len(delta) != 0 {
					t.Errorf("finish_reason must come in a chunk with an empty delta: %s", e)
				}
			}
		}
		if roles != 2 || texts[0] != "abcd" || texts[1] != "abcd" || reasons[0] != 1 || reasons[1] != 1 {
			t.Errorf("roles %d texts %v reasons %v", roles, texts, reasons)
		}
		usage := decodeMap(t, []byte(events[len(events)-2]))
		if len(usage["choices"].([]any)) != 0 || usage["usage"].(map[string]any)["completion_tokens"] != 8.0 {
			t.Errorf("usage chunk %s", events[len(events)-2])
		}
	})

	t.Run("template error is 400", func(t *testing.T) {
		tpl, _ := chattemplate.Parse(`{{ raise_exception('roles must alternate') }}`)
		_, ts := newFakeServer(t, Config{ChatTemplate: tpl}, &fakeEngine{})
		status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":"x"}]}`)
		if status != 400 || !strings.Contains(string(body), "roles must alternate") {
			t.Errorf("%d %s", status, body)
		}
		_, ts = newFakeServer(t, Config{}, &fakeEngine{})
		if status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":"x"}]}`); status != 400 {
			t.Errorf("no template: %d %s", status, body)
		}
	})
}

func TestTokenize(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	status, _, body := call(t, "POST", ts.URL+"/tokenize", "", `{"prompt":"hi"}`)
	if status != 200 || string(body) != `{"count":3,"max_model_len":64,"tokens":[256,104,105]}`+"\n" {
		t.Errorf("tokenize: %d %s", status, body)
	}
	_, _, body = call(t, "POST", ts.URL+"/tokenize", "", `{"prompt":"hi","add_special_tokens":false}`)
	if !strings.Contains(string(body), `"tokens":[104,105]`) {
		t.Errorf("tokenize without special tokens: %s", body)
	}
	_, _, body = call(t, "POST", ts.URL+"/tokenize", "", `{"messages":[{"role":"user","content":"x"}]}`)
	if decodeMap(t, body)["count"] != float64(len("<user>x<assistant>")) {
		t.Errorf("tokenize messages: %s", body)
	}
	status, _, body = call(t, "POST", ts.URL+"/detokenize", "", `{"tokens":[256,104,105]}`)
	if status != 200 || decodeMap(t, body)["prompt"] != "<256>hi" {
		t.Errorf("detokenize: %d %s", status, body)
	}
}

// TestQueueFull fills the admission limit with blocked requests: the next gets 429 with
// Retry-After; once they finish, requests are admitted again.
func TestQueueFull(t *testing.T) {
	f := &fakeEngine{block: make(chan struct{})}
	cfg := templateConfig(t)
	cfg.MaxRunning, cfg.MaxQueue = 2, 1
	srv, ts := newFakeServer(t, cfg, f)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"a","max_tokens":2}`)
		}()
	}
	waitFor(t, func() bool { return srv.admitted.Load() == 3 })
	status, hdr, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"a","max_tokens":2}`)
	if status != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(string(body), "rate_limit_error") {
		t.Errorf("over the limit: %d %v %s", status, hdr, body)
	}
	if status, _, _ := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"a","n":2,"max_tokens":2}`); status != 429 {
		t.Errorf("n=2 over the limit: %d", status)
	}
	close(f.block)
	wg.Wait()
	waitFor(t, func() bool { return srv.admitted.Load() == 0 })
	if status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"a","max_tokens":2}`); status != 200 {
		t.Errorf("after the queue drained: %d %s", status, body)
	}
}

// TestClientDisconnectAborts checks that a client going away mid-stream cancels its engine request.
func TestClientDisconnectAborts(t *testing.T) {
	f := &fakeEngine{block: make(chan struct{})}
	srv, ts := newFakeServer(t, templateConfig(t), f)
	for _, stream := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		body := `{"prompt":"a","max_tokens":4,"stream":false}`
		if stream {
			body = `{"prompt":"a","max_tokens":4,"stream":true}`
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body) // read until the cancel cuts the stream
				resp.Body.Close()
			}
		}()
		waitFor(t, func() bool { return srv.admitted.Load() == 1 })
		cancel()
		<-done
		waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.live == 0 })
		waitFor(t, func() bool { return srv.admitted.Load() == 0 })
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aborted != 2 {
		t.Errorf("%d requests aborted, want 2", f.aborted)
	}
}

// TestServeShutdown runs Serve on a real listener: cancelling its context refuses new work,
// aborts what does not finish within the drain time, and returns nil. The aborted requests are
// answered, streamed or not: a stream ends with finish_reason "abort" and [DONE], a plain response is
// a 200 with the choice finished "abort" (not an empty body, which OpenAI's clients cannot parse).
func TestServeShutdown(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		check            func(status int, body string) bool
	}{
		{"stream", "/v1/completions", `{"prompt":"a","max_tokens":4,"stream":true}`, func(status int, body string) bool {
			return status == 200 && strings.Contains(body, `"finish_reason":"abort"`) && strings.HasSuffix(body, "data: [DONE]\n\n")
		}},
		{"completion", "/v1/completions", `{"prompt":"a","max_tokens":4}`, func(status int, body string) bool {
			return status == 200 && strings.Contains(body, `"object":"text_completion"`) && strings.Contains(body, `"finish_reason":"abort"`)
		}},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_tokens":4}`, func(status int, body string) bool {
			return status == 200 && strings.Contains(body, `"object":"chat.completion"`) && strings.Contains(body, `"finish_reason":"abort"`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv, ln, cancel, served := serveBlocked(t, 200*time.Millisecond)
			url := "http://" + ln.Addr().String()
			type answer struct {
				status int
				body   []byte
			}
			result := make(chan answer, 1)
			go func() {
				status, _, body := call(t, "POST", url+tc.path, "", tc.body)
				result <- answer{status, body}
			}()
			waitFor(t, func() bool { return srv.admitted.Load() == 1 })
			cancel()
			if err := <-served; err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if a := <-result; !tc.check(a.status, string(a.body)) {
				t.Errorf("in-flight request after the drain deadline: %d %q", a.status, a.body)
			}
			if _, err := http.Get(url + "/health"); err == nil {
				t.Errorf("the listener still accepts after shutdown")
			}
		})
	}
}

// waitFor polls cond (a condition that some goroutine makes true soon) for up to a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// stuckAddEngine's Add waits for its context (an engine whose intake does not take the request).
type stuckAddEngine struct {
	fakeEngine
	entered chan struct{}
}

func (e *stuckAddEngine) Add(ctx context.Context, req engine.Request) (Stream, error) {
	e.entered <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestServeShutdownDuringAdd: a request whose Add is still waiting when the shutdown's drain time
// runs out is answered 503 (shutting down), not dropped as if its client had gone.
func TestServeShutdownDuringAdd(t *testing.T) {
	f := &stuckAddEngine{fakeEngine: fakeEngine{maxLen: 64}, entered: make(chan struct{}, 1)}
	cfg := templateConfig(t)
	cfg.ModelName, cfg.Logger = "m", quietLogger()
	srv, err := New(f, byteTokenizer{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, 100*time.Millisecond) }()
	type answer struct {
		status int
		body   []byte
	}
	result := make(chan answer, 1)
	go func() {
		status, _, body := call(t, "POST", "http://"+ln.Addr().String()+"/v1/completions", "", `{"prompt":"a","max_tokens":4}`)
		result <- answer{status, body}
	}()
	<-f.entered
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if a := <-result; a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), `"code":"shutting_down"`) {
		t.Errorf("request cut off in Add by the shutdown: %d %q, want 503 shutting_down", a.status, a.body)
	}
}

// TestDefaultMaxTokens checks the max_tokens a request without one gets: completions' default of
// 16 and chat's context room, both capped by the server's MaxTokensLimit and by the room the prompt
// leaves in the context.
func TestDefaultMaxTokens(t *testing.T) {
	long := strings.Repeat("x", 58) // 59 tokens with BOS: 5 left in a context of 64
	tests := []struct {
		name, path, body string
		limit            int
		want             int // the engine request's MaxTokens; 0: as many as the context allows
	}{
		{"completions", "/v1/completions", `{"prompt":"hi"}`, 0, 16},
		{"completions under the limit", "/v1/completions", `{"prompt":"hi"}`, 8, 8},
		{"completions limit above the default", "/v1/completions", `{"prompt":"hi"}`, 40, 16},
		{"completions in little room", "/v1/completions", `{"prompt":"` + long + `"}`, 8, 5},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}]}`, 0, 0},
		{"chat under the limit", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}]}`, 8, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := templateConfig(t)
			cfg.MaxTokensLimit = tc.limit
			f := &fakeEngine{maxLen: 64}
			_, ts := newFakeServer(t, cfg, f)
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			if got := f.lastRequest().MaxTokens; got != tc.want {
				t.Errorf("engine request max tokens %d, want %d", got, tc.want)
			}
		})
	}
}

// TestTopLogprobsZero: top_logprobs 0 (or null) is accepted without logprobs, as vLLM accepts it
// (its check_logprobs refuses only top_logprobs > 0 without logprobs); no logprobs are returned.
func TestTopLogprobsZero(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	tests := []struct {
		name, body string
		status     int
		logprobs   bool
	}{
		{"zero without logprobs", `"top_logprobs":0`, 200, false},
		{"zero with logprobs false", `"logprobs":false,"top_logprobs":0`, 200, false},
		{"null", `"top_logprobs":null`, 200, false},
		{"zero with logprobs", `"logprobs":true,"top_logprobs":0`, 200, true},
		{"positive without logprobs", `"top_logprobs":1`, 400, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "",
				`{"messages":[{"role":"user","content":"a"}],"max_tokens":2,`+tc.body+`}`)
			if status != tc.status {
				t.Fatalf("%d %s, want %d", status, body, tc.status)
			}
			if status != 200 {
				return
			}
			if got := !strings.Contains(string(body), `"logprobs":null`); got != tc.logprobs {
				t.Errorf("logprobs returned %v, want %v: %s", got, tc.logprobs, body)
			}
		})
	}
}

// TestStreamEndsAtError: once a stream has sent an error event (one choice failed), nothing but
// [DONE] follows, as in vLLM's stream generators; the other choices' abort chunks are not sent.
func TestStreamEndsAtError(t *testing.T) {
	tests := []struct{ name, path, body string }{
		{"completions, second prompt fails", "/v1/completions", `{"prompt":["ok","bad"],"max_tokens":4,"stream":true}`},
		{"completions, first prompt fails", "/v1/completions", `{"prompt":["bad","ok"],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat, n=3", "/v1/chat/completions", `{"messages":[{"role":"user","content":"bad"}],"n":3,"max_tokens":4,"stream":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEngine{maxLen: 64, block: make(chan struct{}), failPrompt: "bad"}
			srv, ts := newFakeServer(t, templateConfig(t), f)
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			events := sseEvents(t, body)
			i := slices.IndexFunc(events, func(e string) bool { return strings.HasPrefix(e, `{"error":`) })
			if i < 0 {
				t.Fatalf("no error event: %s", body)
			}
			if rest := events[i+1:]; len(rest) != 1 || rest[0] != "[DONE]" {
				t.Errorf("after the error event: %q, want only [DONE]", rest)
			}
			waitFor(t, func() bool { return srv.admitted.Load() == 0 })
		})
	}
}

// TestErrorAbortsOtherChoices: a non-streamed request whose one choice fails answers with that failure
// at once and aborts its other choices, rather than letting them run on (here they would wait forever:
// the fake engine blocks every request but the failing one) holding their KV pages for a response that
// is already an error.
func TestErrorAbortsOtherChoices(t *testing.T) {
	tests := []struct{ name, path, body string }{
		{"completions, second prompt fails", "/v1/completions", `{"prompt":["ok","bad"],"max_tokens":4}`},
		{"completions, n=2", "/v1/completions", `{"prompt":"bad","n":2,"max_tokens":4}`},
		{"chat, n=3", "/v1/chat/completions", `{"messages":[{"role":"user","content":"bad"}],"n":3,"max_tokens":4}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEngine{maxLen: 64, block: make(chan struct{}), failPrompt: "bad"}
			srv, ts := newFakeServer(t, templateConfig(t), f)
			defer close(f.block) // after the server's cleanup has waited for none
			done := make(chan struct{})
			var status int
			var body []byte
			go func() {
				defer close(done)
				status, _, body = call(t, "POST", ts.URL+tc.path, "", tc.body)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("no response 10 s after a choice failed: the other choices were left running")
			}
			if status != 500 || !strings.Contains(string(body), "this prompt fails") {
				t.Errorf("%d %s, want 500 naming the failure", status, body)
			}
			waitFor(t, func() bool { return srv.admitted.Load() == 0 })
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.live != 0 {
				t.Errorf("%d streams still live", f.live)
			}
		})
	}
}

// TestBodyNotAnObject: a body that is JSON but not an object is refused with a message that says so,
// not one naming an empty field and a Go type.
func TestBodyNotAnObject(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"} {
		for _, body := range []string{`[1,2]`, `"a prompt"`, `5`, `true`} {
			t.Run(path+"/"+body, func(t *testing.T) {
				status, _, got := call(t, "POST", ts.URL+path, "", body)
				if status != 400 || !strings.Contains(string(got), "must be a JSON object") || strings.Contains(string(got), "openai.") {
					t.Errorf("%d %s, want 400 saying the body must be a JSON object", status, got)
				}
			})
		}
	}
}
