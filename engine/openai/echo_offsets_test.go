package openai

import (
	"strings"
	"testing"
)

// TestEchoLogprobsOffsetsWithKeptSpecialTokens: echo with logprobs and skip_special_tokens false,
// for a prompt string that the tokenizer starts with a special token (BOS, added by
// AddSpecialTokens as real tokenizers do), streamed and not: the echo is the decoded prompt (with
// the BOS piece "<256>"), so the tokens spell the choice's text and each sits at its text_offset.
// Echoing the string as sent ("hi") made text_offset run backwards ([0 5 6 2 3]). The same prompt
// as token ids is the control.
func TestEchoLogprobsOffsetsWithKeptSpecialTokens(t *testing.T) {
	tests := []struct {
		name, prompt string
	}{
		{"token ids (control)", `[256,104,105]`},
		{"string with the tokenizer's BOS", `"hi"`},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			name := tc.name
			body := `{"prompt":` + tc.prompt + `,"echo":true,"logprobs":0,"max_tokens":2,"skip_special_tokens":false`
			if stream {
				name += ", streamed"
				body += `,"stream":true`
			}
			body += "}"
			t.Run(name, func(t *testing.T) {
				f := &fakeEngine{maxLen: 64}
				_, ts := newFakeServer(t, templateConfig(t), f)
				status, _, raw := call(t, "POST", ts.URL+"/v1/completions", "", body)
				if status != 200 {
					t.Fatalf("%d %s", status, raw)
				}
				choices, _ := gatherCompletion(t, raw, stream)
				if len(choices) != 1 || choices[0].logprobs == nil {
					t.Fatalf("choices %+v: %s", choices, raw)
				}
				text, lp := choices[0].text, choices[0].logprobs
				for k := 1; k < len(lp.TextOffset); k++ {
					if lp.TextOffset[k] < lp.TextOffset[k-1] {
						t.Errorf("text_offset runs backwards at %d: %v (tokens %q, text %q)", k, lp.TextOffset, lp.Tokens, text)
						break
					}
				}
				if joined := strings.Join(lp.Tokens, ""); joined != text {
					t.Errorf("tokens %q spell %q, not the choice's text %q", lp.Tokens, joined, text)
				}
				for k, off := range lp.TextOffset {
					if off > len(text) || !strings.HasPrefix(text[off:], lp.Tokens[k]) {
						t.Errorf("token %d %q is not at its text_offset %d in %q", k, lp.Tokens[k], off, text)
					}
				}
			})
		}
	}
}
