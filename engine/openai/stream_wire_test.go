package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gollm/gollm/engine"
)

// TestChatStreamFinishChunk: a streamed chat choice ends as OpenAI's streams end: its content (and its
// logprobs) in chunks whose finish_reason is null, then one chunk of its own with an empty delta, null
// logprobs and the finish_reason; nothing of that choice follows. A client that stops reading a choice
// at its finish_reason (as the OpenAI documentation's chunks allow) would otherwise lose the last text.
func TestChatStreamFinishChunk(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	tests := []struct {
		name   string
		script []string
		reason engine.FinishReason
		body   string
		n      int
		text   string
		finish string
	}{
		{"length", nil, "", `"max_tokens":3`, 1, "abc", "length"},
		{"length, even split", nil, "", `"max_tokens":4`, 1, "abcd", "length"},
		{"n=2 with usage", nil, "", `"max_tokens":3,"n":2,"stream_options":{"include_usage":true}`, 2, "abc", "length"},
		{"logprobs", nil, "", `"max_tokens":3,"logprobs":true,"top_logprobs":1`, 1, "abc", "length"},
		{"stop", []string{"Hel", "lo"}, engine.FinishStop, `"max_tokens":9`, 1, "Hello", "stop"},
		{"stop with nothing left to say", []string{"Hi", ""}, engine.FinishStop, `"max_tokens":9`, 1, "Hi", "stop"},
		{"one piece", []string{"Hi"}, engine.FinishStop, `"max_tokens":9`, 1, "Hi", "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEngine{maxLen: 64, script: tc.script, scriptReason: tc.reason}
			_, ts := newFakeServer(t, templateConfig(t), f)
			status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", `{`+msgs+`,"stream":true,`+tc.body+`}`)
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			events := sseEvents(t, body)
			texts := make([]string, tc.n)
			finishes := make([]string, tc.n)
			for _, e := range events[:len(events)-1] {
				var c struct {
					Choices []struct {
						Index        int             `json:"index"`
						Delta        json.RawMessage `json:"delta"`
						Logprobs     json.RawMessage `json:"logprobs"`
						FinishReason *string         `json:"finish_reason"`
					} `json:"choices"`
				}
				if err := json.Unmarshal([]byte(e), &c); err != nil {
					t.Fatalf("%v: %s", err, e)
				}
				for _, ch := range c.Choices {
					if finishes[ch.Index] != "" {
						t.Errorf("a chunk of choice %d after its finish_reason: %s", ch.Index, e)
					}
					var d struct {
						Content *string `json:"content"`
					}
					json.Unmarshal(ch.Delta, &d)
					if ch.FinishReason != nil {
						if string(ch.Delta) != "{}" || string(ch.Logprobs) != "null" {
							t.Errorf("the finish chunk must have an empty delta and null logprobs: %s", e)
						}
						finishes[ch.Index] = *ch.FinishReason
						continue
					}
					if d.Content != nil {
						texts[ch.Index] += *d.Content
					}
				}
			}
			for i := range tc.n {
				if texts[i] != tc.text || finishes[i] != tc.finish {
					t.Errorf("choice %d: text %q finish %q, want %q %q: %s", i, texts[i], finishes[i], tc.text, tc.finish, body)
				}
			}
			if tc.n > 1 && !strings.Contains(events[len(events)-2], `"choices":[]`) {
				t.Errorf("the usage chunk is not last: %s", events[len(events)-2])
			}
		})
	}
}
