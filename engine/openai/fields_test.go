package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights/chattemplate"
)

// TestUnsupportedParameters: a request field that the endpoint does not implement is refused with a
// 400 naming it (its path, for nested ones), never ignored; fields that ask for nothing more than the
// default (no tools, tool_choice "none", response_format "text") are accepted. The fake server has no
// constraint vocabulary and a chat template without tools: it refuses every constraint and tools by
// name too (TestStructuredOutputs and TestToolCalls serve them).
func TestUnsupportedParameters(t *testing.T) {
	_, ts := newFakeServer(t, templateConfig(t), &fakeEngine{maxLen: 64})
	const msgs = `"messages":[{"role":"user","content":"a"}]`
	tests := []struct {
		name, path, body string
		param            string // "": accepted (200)
	}{
		{"unknown completion field", "/v1/completions", `{"prompt":"a","max_tokens":2,"frobnicate":1}`, "frobnicate"},
		{"field names are case-sensitive", "/v1/completions", `{"Prompt":"a","max_tokens":2}`, "Prompt"},
		{"beam search", "/v1/completions", `{"prompt":"a","use_beam_search":true}`, "use_beam_search"},
		{"completion response_format", "/v1/completions", `{"prompt":"a","response_format":{"type":"json_object"}}`, "response_format"},
		{"response_format of another type", "/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"xml"}}`, "response_format.type"},
		{"response_format field", "/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{},"x":1}}}`, "response_format.json_schema.x"},
		{"guided_json", "/v1/completions", `{"prompt":"a","guided_json":{"type":"object"}}`, "guided_json"},
		{"guided_regex", "/v1/completions", `{"prompt":"a","guided_regex":"a+"}`, "guided_regex"},
		{"guided_choice", "/v1/chat/completions", `{` + msgs + `,"guided_choice":["a","b"]}`, "guided_choice"},
		{"guided_grammar", "/v1/chat/completions", `{` + msgs + `,"guided_grammar":"root ::= \"a\""}`, "guided_grammar"},
		{"guided_whitespace_pattern", "/v1/completions", `{"prompt":"a","guided_json":{},"guided_whitespace_pattern":" *"}`, "guided_whitespace_pattern"},
		{"guided_decoding_backend", "/v1/completions", `{"prompt":"a","guided_regex":"a","guided_decoding_backend":"outlines"}`, "guided_decoding_backend"},
		{"structured_outputs", "/v1/chat/completions", `{` + msgs + `,"structured_outputs":{"json":{}}}`, "structured_outputs.json"},
		{"structured_outputs whitespace_pattern", "/v1/chat/completions", `{` + msgs + `,"structured_outputs":{"json":{},"whitespace_pattern":" "}}`, "structured_outputs.whitespace_pattern"},
		{"structured_outputs structural_tag", "/v1/chat/completions", `{` + msgs + `,"structured_outputs":{"structural_tag":"{}"}}`, "structured_outputs.structural_tag"},
		{"structured_outputs disable_additional_properties", "/v1/chat/completions", `{` + msgs + `,"structured_outputs":{"json":{},"disable_additional_properties":true}}`, "structured_outputs.disable_additional_properties"},
		{"structured_outputs unknown field", "/v1/chat/completions", `{` + msgs + `,"structured_outputs":{"json":{},"backend":"x"}}`, "structured_outputs.backend"},
		{"grammar", "/v1/completions", `{"prompt":"a","grammar":"root ::= \"a\""}`, "grammar"},
		{"json_schema", "/v1/completions", `{"prompt":"a","json_schema":{}}`, "json_schema"},
		{"tools without a tool template", "/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}]}`, "tools"},
		{"tool of another type", "/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type"},
		{"tool field", "/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","x":1}}]}`, "tools[0].function.x"},
		{"tool_choice field", "/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"},"x":1}}`, "tool_choice.x"},
		{"functions", "/v1/chat/completions", `{` + msgs + `,"functions":[]}`, "functions"},
		{"message tool_call field", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":"a","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"},"x":1}]}]}`, "messages[0].tool_calls[0].x"},
		{"message refusal", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":"a","refusal":"no"}]}`, "messages[0].refusal"},
		{"content part field", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{}}]}]}`, "messages[0].content[0].cache_control"},
		{"stream option", "/v1/completions", `{"prompt":"a","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, "stream_options.continuous_usage_stats"},
		{"tokenize field", "/tokenize", `{"prompt":"a","return_token_strs":true}`, "return_token_strs"},
		{"detokenize field", "/detokenize", `{"tokens":[1],"skip_special_tokens":true}`, "skip_special_tokens"},
		{"store true", "/v1/chat/completions", `{` + msgs + `,"store":true}`, "store"},
		{"store true, completions", "/v1/completions", `{"prompt":"a","store":true}`, "store"},
		{"store false", "/v1/chat/completions", `{` + msgs + `,"store":false,"max_tokens":2}`, ""},
		{"store null", "/v1/completions", `{"prompt":"a","store":null,"max_tokens":2}`, ""},
		{"no tools", "/v1/chat/completions", `{` + msgs + `,"tools":[],"max_tokens":2}`, ""},
		{"null tools", "/v1/chat/completions", `{` + msgs + `,"tools":null,"max_tokens":2}`, ""},
		{"tool_choice none", "/v1/chat/completions", `{` + msgs + `,"tool_choice":"none","max_tokens":2}`, ""},
		{"tools with tool_choice none", "/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none","max_tokens":2}`, ""},
		{"response_format text", "/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"text"},"max_tokens":2}`, ""},
		{"guided_decoding_backend auto", "/v1/completions", `{"prompt":"a","guided_decoding_backend":"auto","max_tokens":2}`, ""},
		{"tool history", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"max_tokens":2}`, ""},
		{"every completion field", "/v1/completions", `{"model":"fake-model","prompt":"a","max_tokens":2,"temperature":0.5,"top_p":0.9,"top_k":3,"min_p":0.1,"n":1,"stop":"x","stop_token_ids":[1],"seed":1,"presence_penalty":0.1,"frequency_penalty":0.1,"repetition_penalty":1.1,"min_tokens":1,"ignore_eos":true,"include_stop_str_in_output":true,"stream":false,"user":"u","logit_bias":{"5":1},"skip_special_tokens":true,"best_of":1,"prompt_logprobs":1,"logprobs":1,"echo":false,"suffix":""}`, ""},
		{"every chat field", "/v1/chat/completions", `{"model":"fake-model","messages":[{"role":"user","content":[{"type":"text","text":"a"}],"name":"n"}],"max_completion_tokens":2,"logprobs":true,"top_logprobs":1,"add_generation_prompt":true,"chat_template_kwargs":{},"stream":true,"stream_options":{"include_usage":true},"parallel_tool_calls":false}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			if tc.param == "" {
				if status != 200 {
					t.Fatalf("status %d: %s", status, body)
				}
				return
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatal(err)
			}
			if status != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || e.Error.Code == nil || *e.Error.Code != "unsupported_parameter" ||
				!strings.Contains(e.Error.Message, "'"+tc.param+"'") || e.Error.Type != "invalid_request_error" {
				t.Errorf("status %d %s; want 400 naming %q", status, body, tc.param)
			}
		})
	}
}

// include_stop_str_in_output reaches the engine as Request.IncludeStopString (the engine's tests and
// TestRealEngine check the text).
func TestIncludeStopStrInOutput(t *testing.T) {
	f := &fakeEngine{maxLen: 64}
	_, ts := newFakeServer(t, templateConfig(t), f)
	for _, include := range []bool{false, true} {
		body := `{"prompt":"a","max_tokens":2,"stop":"x","include_stop_str_in_output":` + map[bool]string{false: "false", true: "true"}[include] + `}`
		if status, _, resp := call(t, "POST", ts.URL+"/v1/completions", "", body); status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		if got := f.lastRequest(); got.IncludeStopString != include || len(got.Stop) != 1 {
			t.Errorf("include %v: engine request %+v", include, got)
		}
	}
}

func TestUnknownField(t *testing.T) {
	type inner struct {
		A int `json:"a"`
	}
	type base struct {
		B string `json:"b"`
	}
	type req struct {
		base
		In    *inner          `json:"in"`
		List  []inner         `json:"list"`
		Raw   json.RawMessage `json:"raw"`
		Map   map[string]any  `json:"map"`
		Plain string
		skip  int
	}
	tests := []struct {
		body, want string
	}{
		{`{"b":"x","in":{"a":1},"list":[{"a":1}],"raw":{"z":1},"map":{"z":1},"Plain":"p"}`, ""},
		{`{"c":1}`, "c"},
		{`{"skip":1}`, "skip"},
		{`{"in":{"a":1,"z":2}}`, "in.z"},
		{`{"list":[{"a":1},{"y":1}]}`, "list[1].y"},
		{`{"in":null,"list":null}`, ""},
		{`{"z":1,"y":1}`, "y"}, // sorted: the first in order
		{`[1]`, ""},
		{`{"in":"not an object"}`, ""}, // a type error: decoding reports it
	}
	for _, tc := range tests {
		if got := unknownField([]byte(tc.body), reflect.TypeFor[*req]()); got != tc.want {
			t.Errorf("unknownField(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

// TestChatTemplateKwargsReserved: chat_template_kwargs naming a variable the server gives the template
// itself (add_generation_prompt, messages, tools, the special tokens) would be dropped, the server's
// value winning; such a key is refused by name instead, on /v1/chat/completions and /tokenize, and other
// keys still reach the template.
func TestChatTemplateKwargsReserved(t *testing.T) {
	cfg := templateConfig(t)
	tpl, err := chattemplate.Parse(`{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}{% if flag %}!{% endif %}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ChatTemplate = tpl
	_, ts := newFakeServer(t, cfg, &fakeEngine{maxLen: 64})
	const msgs = `"messages":[{"role":"user","content":"a"}]`
	for _, tc := range []struct {
		path, kwargs, param string // param "": accepted
		tokens              int    // then the rendered prompt's tokens
	}{
		{"/v1/chat/completions", `{"add_generation_prompt":false}`, "chat_template_kwargs.add_generation_prompt", 0},
		{"/v1/chat/completions", `{"messages":[]}`, "chat_template_kwargs.messages", 0},
		{"/v1/chat/completions", `{"tools":[]}`, "chat_template_kwargs.tools", 0},
		{"/v1/chat/completions", `{"bos_token":"<s>"}`, "chat_template_kwargs.bos_token", 0},
		{"/tokenize", `{"add_generation_prompt":false}`, "chat_template_kwargs.add_generation_prompt", 0},
		{"/tokenize", `{"flag":true}`, "", len("<user>a<assistant>!")},
	} {
		t.Run(tc.path+" "+tc.kwargs, func(t *testing.T) {
			body := `{` + msgs + `,"chat_template_kwargs":` + tc.kwargs + `}`
			if tc.path != "/tokenize" {
				body = `{` + msgs + `,"max_tokens":2,"chat_template_kwargs":` + tc.kwargs + `}`
			}
			status, _, resp := call(t, "POST", ts.URL+tc.path, "", body)
			var e struct {
				Count int `json:"count"`
				Error struct {
					Param *string `json:"param"`
					Code  *string `json:"code"`
				} `json:"error"`
			}
			json.Unmarshal(resp, &e)
			if tc.param == "" {
				if status != 200 || e.Count != tc.tokens {
					t.Errorf("%d %s; want 200 with %d tokens", status, resp, tc.tokens)
				}
				return
			}
			if status != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || e.Error.Code == nil || *e.Error.Code != "unsupported_parameter" {
				t.Errorf("%d %s; want 400 naming %q", status, resp, tc.param)
			}
		})
	}
}
