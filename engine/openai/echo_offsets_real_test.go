package openai_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gollm/gollm/engine/openai/loadtest"
)

// TestRealEchoLogprobsOffsets: echo with logprobs through the real engine and the built-in model's
// tokenizer (which adds <|bos|> and reads special-token text in a prompt string): each token of the
// choice's logprobs sits at its text_offset in the choice's text and the offsets never run
// backwards, also where the decoded prompt differs from the string sent (a kept BOS; special-token
// text, whose piece is empty by default), which echo with logprobs therefore echoes decoded.
func TestRealEchoLogprobsOffsets(t *testing.T) {
	base := startReal(t, loadtest.ServerOptions{KVBlocks: 64, MaxNumSeqs: 4})
	tests := []struct{ name, body string }{
		{"plain string (control)", `{"prompt":"ab","max_tokens":2,"echo":true,"logprobs":0,"temperature":0}`},
		{"kept BOS", `{"prompt":"ab","max_tokens":2,"echo":true,"logprobs":0,"temperature":0,"skip_special_tokens":false}`},
		{"special-token text in the string", `{"prompt":"<|bos|>x","max_tokens":2,"echo":true,"logprobs":0,"temperature":0}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var m struct {
				Choices []struct {
					Text     string `json:"text"`
					Logprobs struct {
						Tokens     []string `json:"tokens"`
						TextOffset []int    `json:"text_offset"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(data, &m); err != nil || resp.StatusCode != 200 || len(m.Choices) != 1 {
				t.Fatalf("%d %v: %s", resp.StatusCode, err, data)
			}
			text, lp := m.Choices[0].Text, m.Choices[0].Logprobs
			for k, off := range lp.TextOffset {
				if k > 0 && off < lp.TextOffset[k-1] {
					t.Errorf("text_offset runs backwards at %d: %v", k, lp.TextOffset)
				}
				if off > len(text) || !strings.HasPrefix(text[off:], lp.Tokens[k]) {
					t.Errorf("token %d %q is not at its text_offset %d in %q (tokens %q, offsets %v)", k, lp.Tokens[k], off, text, lp.Tokens, lp.TextOffset)
				}
			}
		})
	}
}
