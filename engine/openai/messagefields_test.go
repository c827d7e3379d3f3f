package openai

import (
	"strings"
	"testing"
)

// TestMessageRequiredFields: a message without its role, or a content part without its type or text, is
// refused with a 400 that names the field and says it is required; not with one that contradicts the
// request ("only text parts are supported (got type "text")", "unsupported role """).
func TestMessageRequiredFields(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	tests := []struct{ name, body, param string }{
		{"text part without text", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text"},
		{"text part with null text", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":null}]}]}`, "messages[0].content[1].text"},
		{"part without type", `{"messages":[{"role":"user","content":[{"text":"a"}]}]}`, "messages[0].content[0].type"},
		{"message without role", `{"messages":[{"content":"a"}]}`, "messages[0].role"},
		{"null message", `{"messages":[{"role":"user","content":"a"},null]}`, "messages[1].role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", tc.body)
			e := decodeAPIError(t, body)
			if status != 400 || e.Param == nil || *e.Param != tc.param || !strings.Contains(e.Message, "required") {
				t.Errorf("%d %s; want 400 saying %q is required", status, body, tc.param)
			}
		})
	}
	// A part of another type is still refused as unsupported.
	status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`)
	if status != 400 || !strings.Contains(string(body), `"param":"messages[0].content[0]"`) || !strings.Contains(string(body), "image_url") {
		t.Errorf("image part: %d %s", status, body)
	}
}
