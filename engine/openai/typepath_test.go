package openai

import (
	"strings"
	"testing"
)

// TestTypeErrorPaths: a value of the wrong JSON type is refused with a 400 whose param and message name
// it by its full path, list indexes included (messages[1].role, not messages.role), as OpenAI names
// it: in a long conversation or a list of tools the client learns which one is wrong.
func TestTypeErrorPaths(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	const user = `{"role":"user","content":"a"}`
	tests := []struct{ name, path, body, param string }{
		{"top-level field", "/v1/completions", `{"prompt":"a","max_tokens":"ten"}`, "max_tokens"},
		{"field of the second message", "/v1/chat/completions", `{"messages":[` + user + `,{"role":5,"content":"x"}]}`, "messages[1].role"},
		{"a message that is not an object", "/v1/chat/completions", `{"messages":[` + user + `,5]}`, "messages[1]"},
		{"an object where a string goes", "/v1/chat/completions", `{"messages":[` + user + `,{"role":{"a":1},"content":"x"}]}`, "messages[1].role"},
		{"call of a history message", "/v1/chat/completions", `{"messages":[` + user + `,{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}]}`, "messages[1].tool_calls[0].function.arguments"},
		{"the name of the second tool", "/v1/chat/completions", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":5}}]}`, "tools[1].function.name"},
		{"nested object field", "/v1/chat/completions", `{"messages":[` + user + `],"stream":true,"stream_options":{"include_usage":"yes"}}`, "stream_options.include_usage"},
		{"embedded field", "/v1/chat/completions", `{"messages":[` + user + `],"response_format":{"type":5}}`, "response_format.type"},
		{"list item", "/v1/completions", `{"prompt":"a","stop_token_ids":[1,"2"]}`, "stop_token_ids[1]"},
		{"detokenize list item", "/detokenize", `{"tokens":[1,"a"]}`, "tokens[1]"},
		{"key in another case", "/v1/completions", `{"prompt":"a","Max_Tokens":"ten"}`, "max_tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			e := decodeAPIError(t, body)
			if status != 400 || e.Param == nil || *e.Param != tc.param || !strings.Contains(e.Message, "'"+tc.param+"'") {
				t.Errorf("%d %s; want 400 naming %q", status, body, tc.param)
			}
		})
	}
}

// TestJSONPathAt checks the paths jsonPathAt gives to the tokens of a body.
func TestJSONPathAt(t *testing.T) {
	body := `{"a":1, "b":[true,{"c":"x","d":[[]]}], "e":{}, "f":null}`
	for _, tc := range []struct{ token, want string }{
		{`1`, "a"}, {`true`, "b[0]"}, {`{"c"`, "b[1]"}, {`"x"`, "b[1].c"}, {`[[`, "b[1].d"}, {`[]`, "b[1].d[0]"},
		{`"e"`, ""}, {`{}`, "e"}, {`null`, "f"}, {`"d"`, "b[1]"},
	} {
		i := int64(strings.Index(body, tc.token))
		if got := jsonPathAt([]byte(body), func(t jsonToken) bool { return t.start <= i && i < t.end }); got != tc.want {
			t.Errorf("token %s: %q, want %q", tc.token, got, tc.want)
		}
	}
	for _, bad := range []string{``, `{"a":`, `[1,`, `5`} {
		if got := jsonPathAt([]byte(bad), func(t jsonToken) bool { return t.end >= 3 }); got != "" {
			t.Errorf("%q: %q, want \"\"", bad, got)
		}
	}
}
