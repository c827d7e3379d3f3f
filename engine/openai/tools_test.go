package openai

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/constraint"
)

// updateGolden rewrites the golden files of TestToolCallWire:
//
//	go test ./engine/openai -run TestToolCallWire -update
var updateGolden = flag.Bool("update", false, "rewrite the golden files of TestToolCallWire")

// wireIDs matches what differs from run to run in a response: its id, its time, the calls' ids.
var wireIDs = regexp.MustCompile(`"id":"(chatcmpl-|call_)?[A-Za-z0-9]+"|"created":[0-9]+`)

// normalizeWire replaces a response's ids and times by placeholders, keeping the shape of call ids
// (OpenAI's "call_…", or Mistral's nine alphanumerics).
func normalizeWire(s string) string {
	return wireIDs.ReplaceAllStringFunc(s, func(m string) string {
		switch {
		case strings.HasPrefix(m, `"created"`):
			return `"created":0`
		case strings.HasPrefix(m, `"id":"chatcmpl-`):
			return `"id":"chatcmpl-ID"`
		case strings.HasPrefix(m, `"id":"call_`):
			if len(m) != len(`"id":"call_"`)+24 {
				return m + " (want call_ and 24 alphanumerics)"
			}
			return `"id":"call_ID"`
		case len(m) == len(`"id":""`)+9:
			return `"id":"MISTRALID"`
		}
		return m
	})
}

// checkGolden compares got with testdata/toolcalls/name, or writes it there with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "toolcalls", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./engine/openai -run TestToolCallWire -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s:\n got %s\nwant %s", name, got, want)
	}
}

// streamedMessage adds up a chat stream's chunks of choice 0 as a client does, checking OpenAI's
// wire rules for tool calls: a call's first delta has its index, id, type "function", name and empty
// arguments; its later deltas only its index and a piece of the arguments.
func streamedMessage(t *testing.T, events []string) (content *string, calls []toolCallOut, finish string) {
	t.Helper()
	for _, ev := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content   *string           `json:"content"`
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				s := ""
				if content != nil {
					s = *content
				}
				s += *ch.Delta.Content
				content = &s
			}
			for _, raw := range ch.Delta.ToolCalls {
				var d map[string]any
				json.Unmarshal(raw, &d)
				idx := int(d["index"].(float64))
				fn := d["function"].(map[string]any)
				switch {
				case idx == len(calls):
					if d["type"] != "function" || d["id"] == nil || fn["name"] == nil || fn["arguments"] != "" || len(d) != 4 {
						t.Errorf("first delta of call %d: %s", idx, raw)
						continue
					}
					calls = append(calls, toolCallOut{ID: d["id"].(string), Type: "function", Function: toolCallFuncOut{Name: fn["name"].(string)}})
				case idx == len(calls)-1:
					if len(d) != 2 || len(fn) != 1 {
						t.Errorf("later delta of call %d: %s", idx, raw)
					}
					calls[idx].Function.Arguments += fn["arguments"].(string)
				default:
					t.Errorf("delta of call %d after %d calls: %s", idx, len(calls), raw)
				}
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return content, calls, finish
}

// TestToolCallWire: outputs of each form, in pieces that split names, tags and arguments mid-string,
// parsed into message.tool_calls and streamed as delta.tool_calls, against golden responses (ids and
// times normalised); the stream adds up to the complete response's message (but the ids, fresh each
// time).
func TestToolCallWire(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},` +
		`{"type":"function","function":{"name":"get_time"}}]`
	for _, tc := range []struct {
		name   string
		parser string
		script []string
		reason engine.FinishReason
	}{
		{"hermes", ToolParserHermes, []string{"I will check.\n", "<tool", "_call>\n{\"name\": \"get_", "weather\", \"arguments\": {\"city\": \"Pa",
			"ris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"}, ""},
		{"hermes_no_call", ToolParserHermes, []string{"It is ", "sunny <tool", "s> today.\n"}, ""},
		{"hermes_length", ToolParserHermes, []string{"<tool_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"ci"}, engine.FinishLength},
		{"llama3_json", ToolParserLlama3JSON, []string{"{\"name\": \"get_weather\", ", "\"parameters\": {\"city\": \"Os", "lo\"}}"}, ""},
		{"mistral", ToolParserMistral, []string{"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ro", "me\"}}, {\"name\": \"get_time\", \"arguments\": {}}]"}, ""},
		{"mistral_args", ToolParserMistral, []string{"Checking.[TOOL_CALLS]get_wea", "ther[AR", "GS]{\"city\": \"Ro", "me\"}[TOOL_CALLS]get_time[ARGS]{}"}, ""},
		{"mistral_args_length", ToolParserMistral, []string{"[TOOL_CALLS]get_weather[ARGS]{\"ci", "ty\": \"Ro"}, engine.FinishLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := templateConfig(t)
			cfg.ToolCallParser = tc.parser
			f := &fakeEngine{maxLen: 512, script: tc.script, scriptReason: tc.reason}
			_, ts := newFakeServer(t, cfg, f)
			body := `{"messages":[{"role":"user","content":"Weather in Paris?"}],` + tools
			status, _, whole := call(t, "POST", ts.URL+"/v1/chat/completions", "", body+`}`)
			if status != 200 {
				t.Fatalf("%d %s", status, whole)
			}
			checkGolden(t, tc.name+".json", normalizeWire(string(whole)))
			if keep := f.lastRequest().KeepSpecialTokens; keep != (tc.parser != ToolParserLlama3JSON) {
				t.Errorf("KeepSpecialTokens %v for %s", keep, tc.parser)
			}
			status, _, streamed := call(t, "POST", ts.URL+"/v1/chat/completions", "", body+`,"stream":true}`)
			if status != 200 {
				t.Fatalf("%d %s", status, streamed)
			}
			checkGolden(t, tc.name+".sse", normalizeWire(string(streamed)))

			var resp chatResponse
			if err := json.Unmarshal(whole, &resp); err != nil {
				t.Fatal(err)
			}
			msg := resp.Choices[0].Message
			content, calls, finish := streamedMessage(t, sseEvents(t, streamed))
			if len(calls) != len(msg.ToolCalls) {
				t.Fatalf("streamed %d calls, complete response %d", len(calls), len(msg.ToolCalls))
			}
			for i := range calls {
				calls[i].ID = msg.ToolCalls[i].ID
			}
			if !reflect.DeepEqual(content, msg.Content) || !reflect.DeepEqual(calls, msg.ToolCalls) || finish != *resp.Choices[0].FinishReason {
				t.Errorf("streamed content %v, calls %+v, finish %q; complete %v, %+v, %q", content, calls, finish,
					msg.Content, msg.ToolCalls, *resp.Choices[0].FinishReason)
			}
		})
	}
}

// TestToolUseChecks: tools, tool_choice and the history's tool messages are checked, with 400s
// naming the field.
func TestToolUseChecks(t *testing.T) {
	cfg := templateConfig(t)
	cfg.ToolCallParser = ToolParserHermes
	_, ts := newFakeServer(t, cfg, &fakeEngine{maxLen: 512})
	const user = `{"role":"user","content":"q"}`
	tool := func(name string) string {
		return `{"type":"function","function":{"name":"` + name + `","parameters":{"type":"object"}}}`
	}
	for _, tc := range []struct {
		name, body, param string
	}{
		{"tool_choice without tools", `{"messages":[` + user + `],"tool_choice":"auto"}`, "tool_choice"},
		{"unknown tool_choice", `{"messages":[` + user + `],"tools":[` + tool("f") + `],"tool_choice":"sometimes"}`, "tool_choice"},
		{"named function not among the tools", `{"messages":[` + user + `],"tools":[` + tool("f") + `],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice.function.name"},
		{"bad tool name", `{"messages":[` + user + `],"tools":[` + tool("a b") + `]}`, "tools[0].function.name"},
		{"two tools of one name", `{"messages":[` + user + `],"tools":[` + tool("f") + `,` + tool("f") + `]}`, "tools[1].function.name"},
		{"parameters not an object", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]}`, "tools[0].function.parameters"},
		{"tool message without id", `{"messages":[` + user + `,{"role":"tool","content":"r"}]}`, "messages[1].tool_call_id"},
		{"tool_call_id on a user message", `{"messages":[{"role":"user","content":"q","tool_call_id":"x"}]}`, "messages[0].tool_call_id"},
		{"tool_calls on a user message", `{"messages":[{"role":"user","content":"q","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls"},
		{"tool call without name", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.name"},
		{"required without a vocabulary", `{"messages":[` + user + `],"tools":[` + tool("f") + `],"tool_choice":"required"}`, "tools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+"/v1/chat/completions", "", tc.body)
			var e struct {
				Error struct {
					Param *string `json:"param"`
				} `json:"error"`
			}
			json.Unmarshal(body, &e)
			if status != 400 || e.Error.Param == nil || *e.Error.Param != tc.param {
				t.Errorf("%d %s; want 400 about %q", status, body, tc.param)
			}
		})
	}
}

func TestDetectToolParser(t *testing.T) {
	for _, tc := range []struct{ template, want string }{
		{`{{ '<tool_call>' }}`, ToolParserHermes},
		{`[TOOL_CALLS]`, ToolParserMistral},
		{`{{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}`, ToolParserMistral},
		{`{{- "<|python_tag|>" }}`, ToolParserLlama3JSON},
		{`{"name": function name, "parameters": dictionary of argument name and its value}`, ToolParserLlama3JSON},
		{`{{ messages }}`, ""},
	} {
		if got := DetectToolParser(tc.template); got != tc.want {
			t.Errorf("DetectToolParser(%q) = %q, want %q", tc.template, got, tc.want)
		}
	}
}

// byteVocab gives the 256 bytes as tokens 0-255 (constraint.TokenSource).
type byteVocab struct{}

func (byteVocab) TokenBytes(id int32) ([]byte, bool) { return []byte{byte(id)}, id >= 0 && id < 256 }

// TestToolConstraint: the constraint of tool_choice "required" or a named function, in each form,
// accepts the calls the form's parser reads (the functions' parameters schemas with their own $defs and
// $refs, rebased into the constraint's document) and refuses others.
func TestToolConstraint(t *testing.T) {
	vocab, err := constraint.NewVocabulary(byteVocab{}, 256)
	if err != nil {
		t.Fatal(err)
	}
	params := `{"type":"object","properties":{"p":{"$ref":"#/$defs/point"}},"required":["p"],"additionalProperties":false,` +
		`"$defs":{"point":{"type":"object","properties":{"x":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/point"},{"type":"null"}]}},` +
		`"required":["x","next"],"additionalProperties":false}}}`
	var tools []chatTool
	for _, raw := range []string{
		`{"type":"function","function":{"name":"walk","parameters":` + params + `}}`,
		`{"type":"function","function":{"name":"stop"}}`,
	} {
		var tool chatTool
		if err := json.Unmarshal([]byte(raw), &tool); err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	walk := `{"name": "walk", "arguments": {"p": {"x": 1, "next": {"x": 2, "next": null}}}}`
	stop := `{"name": "stop", "arguments": {}}`
	for _, tc := range []struct {
		form, choice string
		parallel     bool
		good, bad    []string
	}{
		{ToolParserHermes, "walk", true, []string{"<tool_call>\n" + walk + "\n</tool_call>"},
			[]string{"<tool_call>\n" + stop + "\n</tool_call>", "<tool_call>\n" + walk + "\n</tool_call>\n<tool_call>\n" + walk + "\n</tool_call>",
				`<tool_call>` + "\n" + `{"name": "walk", "arguments": {"p": {"x": 1}}}` + "\n</tool_call>"}},
		{ToolParserHermes, "required", true, []string{"<tool_call>\n" + stop + "\n</tool_call>\n<tool_call>\n" + walk + "\n</tool_call>"},
			[]string{"", "<tool_call>\n{\"name\": \"run\", \"arguments\": {}}\n</tool_call>"}},
		{ToolParserHermes, "required", false, []string{"<tool_call>\n" + stop + "\n</tool_call>"},
			[]string{"<tool_call>\n" + stop + "\n</tool_call>\n<tool_call>\n" + stop + "\n</tool_call>"}},
		{ToolParserLlama3JSON, "required", true, []string{strings.Replace(walk, "arguments", "parameters", 1)}, []string{walk}},
		{ToolParserMistral, "required", true, []string{"[TOOL_CALLS][" + walk + ", " + stop + "]"}, []string{"[TOOL_CALLS][]", "[" + walk + "]"}},
	} {
		t.Run(tc.form+"/"+tc.choice, func(t *testing.T) {
			tu := &toolUse{tools: tools, choice: tc.choice, parallel: tc.parallel, parser: tc.form, forced: -1}
			if tc.choice != "required" {
				tu.choice, tu.named = "function", tc.choice
			}
			s := &Server{tok: byteTokenizer{}}
			s.mistralTag, s.mistralArgs = mistralTokens(s.tok)
			oc, forced, aerr := s.toolConstraint(tu)
			if aerr != nil || forced != -1 {
				t.Fatalf("%v, forced %d", aerr, forced)
			}
			g, err := constraint.Compile(oc.spec, vocab, oc.opts)
			if err != nil {
				t.Fatalf("%v\n%+v", err, oc.spec)
			}
			accepts := func(text string) bool {
				m := g.NewMatcher()
				for _, b := range []byte(text) {
					if m.Accept(int32(b)) != nil {
						return false
					}
				}
				return m.Complete()
			}
			for _, text := range tc.good {
				if !accepts(text) {
					t.Errorf("refuses %q", text)
				}
				p := parsePieces(t, tc.form, false, []string{text})
				if len(p.Calls) == 0 {
					t.Errorf("the parser reads no call in %q", text)
				}
			}
			for _, text := range tc.bad {
				if accepts(text) {
					t.Errorf("accepts %q", text)
				}
			}
		})
	}
}

// FuzzRebaseRefs: rebaseRefs keeps any JSON value's structure (the same value but for the "$ref"
// strings it rebases) and fails on anything that is not one JSON value.
func FuzzRebaseRefs(f *testing.F) {
	for _, s := range []string{`{"$ref":"#/$defs/a","$defs":{"a":{"type":"integer"}}}`, `{"items":[{"$ref":"#"}],"x":1.5e3}`,
		`[1,"#",{"$ref":"other.json#/a"}]`, `{"a":`, `{} {}`, `"\u00e9"`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := rebaseRefs(data, "#/$defs/base")
		var in any
		if json.Unmarshal(data, &in) != nil {
			if err == nil {
				t.Fatalf("rebased %q, which is not one JSON value, into %q", data, out)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		var got any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q gave %q: %v", data, out, err)
		}
		if !reflect.DeepEqual(got, rebaseValueOf(in)) {
			t.Fatalf("%q gave %q", data, out)
		}
	})
}

// rebaseValueOf is what rebaseRefs should make of a decoded value.
func rebaseValueOf(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, "#") {
				out[k] = "#/$defs/base" + s[1:]
				continue
			}
			out[k] = rebaseValueOf(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rebaseValueOf(e)
		}
		return out
	}
	return v
}

// TestParallelToolCallsFalse: with parallel_tool_calls false, a response holds at most one tool call
// under tool_choice "auto" too (where the output is not constrained), complete or streamed, as
// OpenAI's API promises and vLLM enforces by keeping the first: the model's second call is dropped.
func TestParallelToolCallsFalse(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},` +
		`{"type":"function","function":{"name":"get_time"}}]`
	for _, tc := range []struct {
		name, parser string
		script       []string
	}{
		{"hermes", ToolParserHermes, []string{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n",
			"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"}},
		{"llama3_json", ToolParserLlama3JSON, []string{"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; ", "{\"name\": \"get_time\", \"parameters\": {}}"}},
		{"mistral-list", ToolParserMistral, []string{"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, ", "{\"name\": \"get_time\", \"arguments\": {}}]"}},
		{"mistral-args", ToolParserMistral, []string{"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "[TOOL_CALLS]get_time[ARGS]{}"}},
	} {
		for _, parallel := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/parallel=%v", tc.name, parallel), func(t *testing.T) {
				cfg := templateConfig(t)
				cfg.ToolCallParser = tc.parser
				_, ts := newFakeServer(t, cfg, &fakeEngine{maxLen: 512, script: tc.script})
				body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Weather in Paris?"}],%s,"parallel_tool_calls":%v`, tools, parallel)
				want := 2
				if !parallel {
					want = 1
				}
				status, _, whole := call(t, "POST", ts.URL+"/v1/chat/completions", "", body+`}`)
				if status != 200 {
					t.Fatalf("%d %s", status, whole)
				}
				var resp chatResponse
				if err := json.Unmarshal(whole, &resp); err != nil {
					t.Fatal(err)
				}
				msg := resp.Choices[0].Message
				if len(msg.ToolCalls) != want || msg.ToolCalls[0].Function.Name != "get_weather" || *resp.Choices[0].FinishReason != "tool_calls" {
					t.Errorf("complete response: %s; want %d calls, get_weather first", whole, want)
				}
				status, _, streamed := call(t, "POST", ts.URL+"/v1/chat/completions", "", body+`,"stream":true}`)
				if status != 200 {
					t.Fatalf("%d %s", status, streamed)
				}
				_, calls, finish := streamedMessage(t, sseEvents(t, streamed))
				if len(calls) != want || calls[0].Function.Name != "get_weather" || finish != "tool_calls" {
					t.Errorf("stream: calls %+v, finish %q; want %d calls, get_weather first", calls, finish, want)
				}
			})
		}
	}
}

// mistralTokenizer is byteTokenizer with Mistral's control tokens: [TOOL_CALLS] (258) and, with
// args (a tokenizer of v11 or later), [ARGS] (259), each encoded from its text and decoded to it
// unless special tokens are skipped. It is its own constraint.TokenSource: bytes for 0-255 only.
type mistralTokenizer struct{ args bool }

const (
	mistralToolCallsID = 258
	mistralArgsID      = 259
)

func (m mistralTokenizer) special(text string) (string, int32, bool) {
	switch {
	case strings.HasPrefix(text, mistralTag):
		return mistralTag, mistralToolCallsID, true
	case m.args && strings.HasPrefix(text, argsTag):
		return argsTag, mistralArgsID, true
	}
	return "", -1, false
}

func (m mistralTokenizer) Encode(text string, addSpecial bool) []int32 {
	var ids []int32
	if addSpecial {
		ids = append(ids, 256)
	}
	for len(text) > 0 {
		if tag, id, ok := m.special(text); ok {
			ids, text = append(ids, id), text[len(tag):]
			continue
		}
		ids, text = append(ids, int32(text[0])), text[1:]
	}
	return ids
}

func (m mistralTokenizer) Decode(ids []int32, skipSpecial bool) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id < 256:
			b.WriteByte(byte(id))
		case skipSpecial:
		case id == mistralToolCallsID:
			b.WriteString(mistralTag)
		case id == mistralArgsID && m.args:
			b.WriteString(argsTag)
		default:
			fmt.Fprintf(&b, "<%d>", id)
		}
	}
	return b.String()
}

func (mistralTokenizer) TokenBytes(id int32) ([]byte, bool) {
	return []byte{byte(id)}, id >= 0 && id < 256
}

// mistralTools are the tools of the Mistral tests: get_weather needs a city, get_time takes nothing.
const mistralTools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}},` +
	`{"type":"function","function":{"name":"get_time"}}]`

// TestMistralToolConstraint: a forced call (tool_choice "required" or named) of Mistral's form ends
// the prompt with [TOOL_CALLS] and constrains the output after it: for a tokenizer with [ARGS]
// (v11 and later) to name[ARGS]{arguments} calls, each after the first behind its own [TOOL_CALLS]
// (both special tokens, not their text), refusing the list; for an older one to the list, refusing
// the newer form. Names are the tools' (the named one's only), arguments valid under its schema.
func TestMistralToolConstraint(t *testing.T) {
	var req chatRequest
	if err := json.Unmarshal([]byte(`{`+mistralTools+`}`), &req); err != nil {
		t.Fatal(err)
	}
	weather := `get_weather[ARGS]{"city": "Paris"}`
	list := `[{"name": "get_weather", "arguments": {"city": "Paris"}}]`
	for _, tc := range []struct {
		name     string
		args     bool
		choice   string
		parallel bool
		good     []string
		bad      []string
	}{
		{"args/required", true, "required", true,
			[]string{weather, `get_time[ARGS]{}`, weather + `[TOOL_CALLS]get_time[ARGS]{}`, `get_weather[ARGS] {"city":"Rome"}[TOOL_CALLS]` + weather},
			[]string{"", list, `get_weather[ARGS]{}`, `get_weather[ARGS]{"city": 1}`, `get_weather[ARGS]{"city": "Paris", "x": 1}`,
				`run[ARGS]{}`, `get_weather{"city": "Paris"}`, weather + `get_time[ARGS]{}`, weather + `[TOOL_CALLS]`,
				`[TOOL_CALLS]` + weather, `get_time[ARGS][]`}},
		{"args/required/single", true, "required", false,
			[]string{weather, `get_time[ARGS]{}`}, []string{weather + `[TOOL_CALLS]get_time[ARGS]{}`}},
		{"args/named", true, "get_weather", true,
			[]string{weather}, []string{`get_time[ARGS]{}`, weather + `[TOOL_CALLS]` + weather, list}},
		{"list/required", false, "required", true,
			[]string{list, `[{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]`},
			[]string{weather, `get_time[ARGS]{}`, `[{"name": "run", "arguments": {}}]`, `[]`}},
		{"list/named", false, "get_time", true,
			[]string{`[{"name": "get_time", "arguments": {}}]`}, []string{list, `get_time[ARGS]{}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := mistralTokenizer{args: tc.args}
			vocab, err := constraint.NewVocabulary(tok, 260)
			if err != nil {
				t.Fatal(err)
			}
			tu := &toolUse{tools: req.Tools, choice: tc.choice, parallel: tc.parallel, parser: ToolParserMistral, forced: -1}
			if tc.choice != "required" {
				tu.choice, tu.named = "function", tc.choice
			}
			s := &Server{tok: tok}
			s.mistralTag, s.mistralArgs = mistralTokens(tok)
			oc, forced, aerr := s.toolConstraint(tu)
			if aerr != nil || forced != mistralToolCallsID || !tu.afterTag {
				t.Fatalf("%v, forced %d, afterTag %v", aerr, forced, tu.afterTag)
			}
			g, err := constraint.Compile(oc.spec, vocab, oc.opts)
			if err != nil {
				t.Fatalf("%v\n%+v", err, oc.spec)
			}
			accepts := func(ids []int32) bool {
				m := g.NewMatcher()
				mask := make([]uint64, vocab.MaskWords())
				for _, id := range ids {
					m.Mask(mask)
					if mask[id/64]&(1<<(id%64)) == 0 {
						return false
					}
					if err := m.Accept(id); err != nil {
						t.Fatalf("token %d in the mask but refused: %v", id, err)
					}
				}
				return m.Complete()
			}
			for _, text := range tc.good {
				ids := tok.Encode(text, false)
				if !accepts(ids) {
					t.Errorf("refuses %q (%v)", text, ids)
				}
				if tc.args && strings.Contains(text, argsTag) && accepts((byteTokenizer{}).Encode(text, false)) {
					t.Errorf("accepts %q with [ARGS] and [TOOL_CALLS] written as text", text)
				}
				p := parsePieces(t, ToolParserMistral, true, []string{tok.Decode(ids, false)})
				if len(p.Calls) == 0 || p.Content != "" {
					t.Errorf("the parser reads %+v in %q", p, text)
				}
			}
			for _, text := range tc.bad {
				if accepts(tok.Encode(text, false)) {
					t.Errorf("accepts %q", text)
				}
			}
		})
	}
}

// forcingEngine is a model that writes script's tokens while the request's constraint allows them
// (each must be in its mask, and is accepted), each with its text as the tokenizer decodes it; it
// finishes with FinishStop at the script's end or when the constraint is done, and with
// FinishError when the constraint refuses a token (refused counts them).
type forcingEngine struct {
	tok    mistralTokenizer
	script []int32

	mu       sync.Mutex
	requests []engine.Request
	refused  int
}

func (f *forcingEngine) Add(ctx context.Context, req engine.Request) (Stream, error) {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	ch := make(chan engine.Output, len(f.script)+1)
	usage := engine.Usage{PromptTokens: len(req.PromptIDs)}
	c := req.Constraint
	for i, id := range f.script {
		if c != nil {
			mask := make([]uint64, (mistralArgsID+64)/64)
			c.Mask(mask)
			if mask[id/64]&(1<<(id%64)) == 0 || c.Accept(id) != nil {
				f.mu.Lock()
				f.refused++
				f.mu.Unlock()
				ch <- engine.Output{FinishReason: engine.FinishError, Err: fmt.Errorf("token %d refused", id), Usage: usage}
				break
			}
		}
		usage.CompletionTokens++
		o := engine.Output{TokenIDs: []int32{id}, Text: f.tok.Decode([]int32{id}, !req.KeepSpecialTokens), Usage: usage}
		if i == len(f.script)-1 || c != nil && c.Done() {
			o.FinishReason = engine.FinishStop
			ch <- o
			break
		}
		ch <- o
	}
	close(ch)
	return &fakeStream{ch: ch}, nil
}

func (f *forcingEngine) Stats() engine.Stats { return engine.Stats{} }

func (f *forcingEngine) MaxModelLen() int { return 4096 }

// TestMistralForcedToolCalls: through the server, a forced call for a Mistral tokenizer with [ARGS]
// ends the prompt with [TOOL_CALLS] and lets a model write name[ARGS]{...} calls (the special tokens
// drawn as tokens, kept in the text for the parser), which come back as tool_calls, complete or
// streamed; the list form is refused there, and for an older tokenizer it is the reverse.
func TestMistralForcedToolCalls(t *testing.T) {
	argsForm := `get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}`
	listForm := `[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]`
	for _, tc := range []struct {
		name   string
		args   bool
		choice string
		script string
		calls  []string // the calls' names; none: the engine refuses a token
	}{
		{"args/required", true, `"required"`, argsForm, []string{"get_weather", "get_time"}},
		{"args/named", true, `{"type":"function","function":{"name":"get_weather"}}`, `get_weather[ARGS]{"city": "Paris"}`, []string{"get_weather"}},
		{"args/named/other", true, `{"type":"function","function":{"name":"get_weather"}}`, `get_time[ARGS]{}`, nil},
		{"args/list refused", true, `"required"`, listForm, nil},
		{"list/required", false, `"required"`, listForm, []string{"get_weather", "get_time"}},
		{"list/args refused", false, `"required"`, `get_time[ARGS]{}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := mistralTokenizer{args: tc.args}
			vocab, err := constraint.NewVocabulary(tok, 260)
			if err != nil {
				t.Fatal(err)
			}
			cfg := templateConfig(t)
			cfg.ToolCallParser, cfg.Vocabulary, cfg.VocabSize, cfg.ModelName, cfg.Logger = ToolParserMistral, vocab, 260, "fake-model", quietLogger()
			f := &forcingEngine{tok: tok, script: tok.Encode(tc.script, false)}
			srv, err := New(f, tok, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			body := `{"messages":[{"role":"user","content":"Weather in Paris?"}],` + mistralTools + `,"tool_choice":` + tc.choice
			for _, stream := range []bool{false, true} {
				status, _, data := call(t, "POST", ts.URL+"/v1/chat/completions", "", body+fmt.Sprintf(`,"stream":%v}`, stream))
				f.mu.Lock()
				req, refused := f.requests[len(f.requests)-1], f.refused
				f.refused = 0
				f.mu.Unlock()
				if p := req.PromptIDs; p[len(p)-1] != mistralToolCallsID || !req.KeepSpecialTokens || req.Constraint == nil {
					t.Fatalf("prompt ends with %d, KeepSpecialTokens %v, constraint %v", p[len(p)-1], req.KeepSpecialTokens, req.Constraint != nil)
				}
				if tc.calls == nil {
					if refused == 0 {
						t.Errorf("stream=%v: the constraint took %q: %d %s", stream, tc.script, status, data)
					}
					continue
				}
				if status != 200 || refused != 0 {
					t.Fatalf("stream=%v: %d, %d refused: %s", stream, status, refused, data)
				}
				var calls []toolCallOut
				var finish string
				if stream {
					_, calls, finish = streamedMessage(t, sseEvents(t, data))
				} else {
					var resp chatResponse
					if err := json.Unmarshal(data, &resp); err != nil {
						t.Fatal(err)
					}
					calls, finish = resp.Choices[0].Message.ToolCalls, *resp.Choices[0].FinishReason
				}
				var names []string
				for _, c := range calls {
					names = append(names, c.Function.Name)
					if !json.Valid([]byte(c.Function.Arguments)) {
						t.Errorf("stream=%v: arguments %q", stream, c.Function.Arguments)
					}
				}
				if !reflect.DeepEqual(names, tc.calls) || finish != "tool_calls" || calls[0].Function.Name == "get_weather" && calls[0].Function.Arguments != `{"city": "Paris"}` {
					t.Errorf("stream=%v: calls %+v, finish %q; want %v: %s", stream, calls, finish, tc.calls, data)
				}
			}
		})
	}
}
