package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestCachedTokens: usage.prompt_tokens_details.cached_tokens counts each prompt's tokens found in the
// prefix cache once, as its tokens are counted: those of the prompt's first choice. The fake engine
// reports 2 cached tokens for each earlier request with the same prompt.
func TestCachedTokens(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 512})
	tests := []struct {
		name, path, body string
		cached           int
	}{
		{"first completion", "/v1/completions", `{"prompt":"hello there","max_tokens":2}`, 0},
		{"same prompt", "/v1/completions", `{"prompt":"hello there","max_tokens":2}`, 2},
		// n=2: the first choice finds 2 earlier requests (4 tokens), the second 3 (not counted).
		{"n=2", "/v1/completions", `{"prompt":"hello there","max_tokens":2,"n":2}`, 4},
		// Two prompts: "hello there" for the 5th time (8), "other" for the first (0).
		{"two prompts", "/v1/completions", `{"prompt":["hello there","other"],"max_tokens":2}`, 8},
		{"stream", "/v1/completions", `{"prompt":"other","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, 2},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, 0},
		{"chat again, n=2", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"n":2}`, 2},
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			if strings.Contains(tc.body, `"stream":true`) {
				events := sseEvents(t, body)
				body = []byte(events[len(events)-2]) // the usage chunk, before [DONE]
			}
			var resp struct {
				Usage struct {
					PromptTokens        int             `json:"prompt_tokens"`
					PromptTokensDetails json.RawMessage `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`{"cached_tokens":%d}`, tc.cached); string(resp.Usage.PromptTokensDetails) != want {
				t.Errorf("prompt_tokens_details %s, want %s (%s)", resp.Usage.PromptTokensDetails, want, body)
			}
		})
	}
}
