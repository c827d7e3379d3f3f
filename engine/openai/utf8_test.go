package openai

import (
	"strings"
	"testing"
)

// TestInvalidUTF8: a body that is not UTF-8 (JSON text must be, RFC 8259 section 8.1) is refused with a
// 400 that says so and names the field holding the bad bytes, rather than read with U+FFFD in their
// place, which would run a prompt the client never sent; valid UTF-8 of every length passes.
func TestInvalidUTF8(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	tests := []struct {
		name, path, body string
		param            string // "-": accepted (200)
	}{
		{"chat content", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xffb\"}],\"max_tokens\":2}", "messages[0].content"},
		{"chat content part", "/v1/chat/completions", "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xc3\"}]}]}", "messages[1].content[0].text"},
		{"truncated character in a prompt", "/v1/completions", "{\"prompt\":\"price: \xe2\x82\",\"max_tokens\":2}", "prompt"},
		{"second prompt of a list", "/v1/completions", "{\"prompt\":[\"ok\",\"a\xc3\"],\"max_tokens\":2}", "prompt[1]"},
		{"overlong encoding", "/v1/completions", "{\"prompt\":\"\xc0\xaf\",\"max_tokens\":2}", "prompt"},
		{"encoded surrogate", "/v1/completions", "{\"prompt\":\"\xed\xa0\x80\",\"max_tokens\":2}", "prompt"},
		{"stop string", "/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"x\",\"\xff\"],\"max_tokens\":2}", "stop[1]"},
		{"Latin-1 text", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", "messages[0].content"},
		{"tokenize", "/tokenize", "{\"prompt\":\"\xfe\"}", "prompt"},
		{"valid UTF-8 of every length", "/v1/completions", `{"prompt":"hé€😀","max_tokens":2}`, "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			if tc.param == "-" {
				if status != 200 {
					t.Fatalf("%d %s", status, body)
				}
				return
			}
			e := decodeAPIError(t, body)
			if status != 400 || !strings.Contains(e.Message, "UTF-8") || e.Param == nil || *e.Param != tc.param {
				t.Errorf("%d %s; want 400 about UTF-8 naming %q", status, body, tc.param)
			}
		})
	}
}
