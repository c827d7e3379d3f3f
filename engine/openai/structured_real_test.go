package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/engine/openai"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights/chattemplate"
)

// realServer serves the built-in model in-process with the tools chat template of
// testdata/openai/tools_template.jinja (Hermes' form): the model, for checking outputs against its
// vocabulary, and the base URL.
func realServer(t *testing.T) (*llm.Model, string) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	m, err := llm.Load(context.Background(), "", llm.Config{Device: model.DeviceCPU, KVBlocks: 256, MaxNumSeqs: 8, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	src, err := os.ReadFile("testdata/openai/tools_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := chattemplate.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := m.NewServer(openai.Config{ChatTemplate: tpl, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return m, ts.URL
}

// postJSON posts body and returns the status and the raw answer.
func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// choiceOut is a choice's text (or message content) and finish reason, from a response or a stream.
type choiceOut struct {
	text   string
	finish string
	calls  []toolCall
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// choicesOf reads the choices of a completion or chat response, streamed or not.
func choicesOf(t *testing.T, data []byte, stream bool) []choiceOut {
	t.Helper()
	type choice struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message *struct {
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		Delta *struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	var out []choiceOut
	at := func(i int) *choiceOut {
		for len(out) <= i {
			out = append(out, choiceOut{})
		}
		return &out[i]
	}
	take := func(c choice) {
		o := at(c.Index)
		o.text += c.Text
		if c.Message != nil {
			if c.Message.Content != nil {
				o.text += *c.Message.Content
			}
			o.calls = c.Message.ToolCalls
		}
		if d := c.Delta; d != nil {
			if d.Content != nil {
				o.text += *d.Content
			}
			for _, tc := range d.ToolCalls {
				if tc.Index == len(o.calls) {
					o.calls = append(o.calls, toolCall{ID: tc.ID, Type: "function"})
					o.calls[tc.Index].Function.Name = tc.Function.Name
				}
				o.calls[tc.Index].Function.Arguments += tc.Function.Arguments
			}
		}
		if c.FinishReason != nil {
			o.finish = *c.FinishReason
		}
	}
	if !stream {
		var resp struct{ Choices []choice }
		if err := json.Unmarshal(data, &resp); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		for _, c := range resp.Choices {
			take(c)
		}
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct{ Choices []choice }
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		for _, c := range chunk.Choices {
			take(c)
		}
	}
	return out
}

// checkText checks text against spec with a matcher of its own, over the model's vocabulary: every
// token of the text (as the tokenizer encodes it: a constraint allows any spelling of its bytes) must
// be allowed, and the whole complete when the choice stopped.
func checkText(t *testing.T, m *llm.Model, spec constraint.Spec, opts constraint.Options, text, finish string) {
	t.Helper()
	vocab, err := m.Vocabulary()
	if err != nil {
		t.Fatal(err)
	}
	g, err := constraint.Compile(spec, vocab, opts)
	if err != nil {
		t.Fatal(err)
	}
	mt := g.NewMatcher()
	for _, id := range m.Tokenizer().Encode(text, false) {
		if err := mt.Accept(id); err != nil {
			t.Errorf("output %q: %v", text, err)
			return
		}
	}
	switch finish {
	case "stop":
		if !mt.Complete() {
			t.Errorf("output %q stopped incomplete", text)
		}
	case "length":
	default:
		t.Errorf("output %q: finish_reason %q", text, finish)
	}
}

const personSchema = `{"type":"object","properties":{"name":{"type":"string","maxLength":6},"n":{"type":"integer","minimum":0,"maximum":99},` +
	`"ok":{"type":"boolean"}},"required":["name","n","ok"],"additionalProperties":false}`

// TestStructuredOutputs sends every wire form of structured output to the built-in model, on both
// endpoints, streamed on one of them, with n = 2 and with logprobs, at temperature 1: every choice's output is
// allowed by the constraint's own matcher (complete when it stopped; finish_reason "length" where it
// ran out of tokens), and most of them stop.
func TestStructuredOutputs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	m, base := realServer(t)
	quoted, _ := json.Marshal(personSchema)
	regex := `[a-z]{2,5}-[0-9]{1,3}`
	gbnf := `root ::= "(" item ("," item)* ")"` + "\n" + `item ::= [a-c]+ | "x"`
	choices := []string{"red", "green", "blue"}
	choicesJSON, _ := json.Marshal(choices)
	js := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	type form struct {
		name  string
		field string // the request's constraint, a JSON member
		spec  constraint.Spec
		opts  constraint.Options
	}
	forms := []form{
		{"response_format json_object", `"response_format":{"type":"json_object"}`, constraint.Spec{Kind: constraint.JSONObject}, constraint.Options{}},
		{"response_format json_schema", `"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":` + personSchema + `}}`,
			constraint.Spec{Kind: constraint.JSONSchema, Text: personSchema}, constraint.Options{}},
		{"structured_outputs json", `"structured_outputs":{"json":` + personSchema + `}`, constraint.Spec{Kind: constraint.JSONSchema, Text: personSchema}, constraint.Options{}},
		{"structured_outputs json as text, compact", `"structured_outputs":{"json":` + string(quoted) + `,"disable_any_whitespace":true,"disable_fallback":true}`,
			constraint.Spec{Kind: constraint.JSONSchema, Text: personSchema}, constraint.Options{MaxWhitespace: -1}},
		{"structured_outputs regex", `"structured_outputs":{"regex":` + js(regex) + `}`, constraint.Spec{Kind: constraint.Regex, Text: regex}, constraint.Options{}},
		{"structured_outputs choice", `"structured_outputs":{"choice":` + string(choicesJSON) + `}`, constraint.Spec{Kind: constraint.Choice, Choices: choices}, constraint.Options{}},
		{"structured_outputs grammar", `"structured_outputs":{"grammar":` + js(gbnf) + `}`, constraint.Spec{Kind: constraint.GBNF, Text: gbnf}, constraint.Options{}},
		{"structured_outputs json_object", `"structured_outputs":{"json_object":true}`, constraint.Spec{Kind: constraint.JSONObject}, constraint.Options{}},
		{"guided_json", `"guided_json":` + personSchema + `,"guided_decoding_backend":"auto"`, constraint.Spec{Kind: constraint.JSONSchema, Text: personSchema}, constraint.Options{}},
		{"guided_regex", `"guided_regex":` + js(regex), constraint.Spec{Kind: constraint.Regex, Text: regex}, constraint.Options{}},
		{"guided_choice", `"guided_choice":` + string(choicesJSON), constraint.Spec{Kind: constraint.Choice, Choices: choices}, constraint.Options{}},
		{"guided_grammar", `"guided_grammar":` + js(gbnf), constraint.Spec{Kind: constraint.GBNF, Text: gbnf}, constraint.Options{}},
		{"grammar (llama.cpp)", `"grammar":` + js(gbnf), constraint.Spec{Kind: constraint.GBNF, Text: gbnf}, constraint.Options{}},
		{"json_schema (llama.cpp)", `"json_schema":` + personSchema, constraint.Spec{Kind: constraint.JSONSchema, Text: personSchema}, constraint.Options{}},
	}
	if raceEnabled {
		forms = []form{forms[1], forms[4], forms[12]}
	}
	stopped, total := 0, 0
	for i, f := range forms {
		for k, endpoint := range []string{"chat", "completions"} {
			// Each form on both endpoints, streamed on one of them (which, alternating).
			stream := (i+k)%2 == 1
			name := fmt.Sprintf("%s/%s/stream=%v", f.name, endpoint, stream)
			t.Run(name, func(t *testing.T) {
				body := fmt.Sprintf(`{"max_tokens":48,"temperature":1,"seed":%d,"n":2,"stream":%v,%s`, i, stream, f.field)
				path := "/v1/completions"
				if endpoint == "chat" {
					path = "/v1/chat/completions"
					body += `,"messages":[{"role":"user","content":"Give me a record."}],"logprobs":true,"top_logprobs":2}`
				} else {
					body += `,"prompt":"// A record:\n","logprobs":2}`
				}
				status, data := postJSON(t, base+path, body)
				if status != 200 {
					t.Fatalf("%d %s", status, data)
				}
				outs := choicesOf(t, data, stream)
				if len(outs) != 2 {
					t.Fatalf("%d choices: %s", len(outs), data)
				}
				for _, o := range outs {
					checkText(t, m, f.spec, f.opts, o.text, o.finish)
					total++
					if o.finish == "stop" {
						stopped++
					}
				}
			})
		}
	}
	t.Logf("%d of %d constrained outputs stopped within 48 tokens", stopped, total)
	if stopped < total/2 {
		t.Errorf("only %d of %d outputs stopped within max_tokens", stopped, total)
	}
}

// TestStructuredOutputErrors: constraints that cannot be served are 400s naming the field and what is
// wrong with it.
func TestStructuredOutputErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	_, base := realServer(t)
	for _, tc := range []struct {
		name, body, param, says string
	}{
		{"two constraints", `{"prompt":"x","guided_regex":"a","response_format":{"type":"json_object"}}`, "guided_regex", "'response_format' and 'guided_regex'"},
		{"unsupported keyword", `{"prompt":"x","guided_json":{"type":"object","not":{"type":"string"}}}`, "guided_json", `keyword "not"`},
		{"schema of the wrong type", `{"prompt":"x","json_schema":[1]}`, "json_schema", "JSON Schema"},
		{"regex syntax", `{"prompt":"x","structured_outputs":{"regex":"(a"}}`, "structured_outputs.regex", "missing )"},
		{"grammar syntax", `{"prompt":"x","grammar":"root ::= undefined_rule"}`, "grammar", "undefined_rule"},
		{"empty choice", `{"prompt":"x","guided_choice":[]}`, "guided_choice", "at least one"},
		{"unsatisfiable schema", `{"prompt":"x","guided_json":{"type":"integer","minimum":5,"maximum":1}}`, "guided_json", "admits no output"},
		{"json_schema without schema", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a"}}}`,
			"response_format.json_schema.schema", "needs"},
		{"empty structured_outputs", `{"prompt":"x","structured_outputs":{}}`, "structured_outputs", "needs one of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/completions"
			if strings.Contains(tc.body, "messages") {
				path = "/v1/chat/completions"
			}
			status, data := postJSON(t, base+path, tc.body)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			json.Unmarshal(data, &e)
			if status != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.says) {
				t.Errorf("%d %s; want 400 about %q saying %q", status, data, tc.param, tc.says)
			}
		})
	}
}

const weatherParams = `{"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7}},` +
	`"required":["city","days"],"additionalProperties":false}`

const timeParams = `{"type":"object","properties":{},"additionalProperties":false}`

// toolsBody is a chat request offering two tools, with more fields.
func toolsBody(extra string) string {
	return `{"messages":[{"role":"user","content":"What is the weather in Paris this week?"}],"max_tokens":160,"temperature":1,"seed":5,` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Forecast for a city.","parameters":` + weatherParams + `}},` +
		`{"type":"function","function":{"name":"get_time","description":"The time now.","parameters":` + timeParams + `}}]` + extra + `}`
}

// TestToolCalls drives tool calling on the built-in model with a Hermes-form template: tool_choice
// named and "required" (constrained, so that even this tiny model writes valid calls: the arguments are
// checked against the function's parameters schema by a matcher of their own), streamed and not (the
// stream adds up to the same calls), parallel_tool_calls, "auto" and "none", and a conversation that
// goes on after a call with its result.
func TestToolCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	m, base := realServer(t)
	url := base + "/v1/chat/completions"
	checkCall := func(t *testing.T, c toolCall) {
		t.Helper()
		if !strings.HasPrefix(c.ID, "call_") || c.Type != "function" {
			t.Errorf("call %+v", c)
		}
		switch c.Function.Name {
		case "get_weather":
			checkText(t, m, constraint.Spec{Kind: constraint.JSONSchema, Text: weatherParams}, constraint.Options{}, c.Function.Arguments, "stop")
		case "get_time":
			checkText(t, m, constraint.Spec{Kind: constraint.JSONSchema, Text: timeParams}, constraint.Options{}, c.Function.Arguments, "stop")
		default:
			t.Errorf("call of %q", c.Function.Name)
		}
	}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("named/stream=%v", stream), func(t *testing.T) {
			status, data := postJSON(t, url, toolsBody(fmt.Sprintf(`,"stream":%v,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`, stream)))
			if status != 200 {
				t.Fatalf("%d %s", status, data)
			}
			o := choicesOf(t, data, stream)[0]
			if len(o.calls) != 1 || o.calls[0].Function.Name != "get_weather" || o.finish != "tool_calls" || o.text != "" {
				t.Fatalf("choice %+v: %s", o, data)
			}
			checkCall(t, o.calls[0])
		})
	}
	if raceEnabled {
		return
	}
	t.Run("streamed calls are the complete response's", func(t *testing.T) {
		body := `,"tool_choice":"required","n":2`
		_, whole := postJSON(t, url, toolsBody(body))
		_, streamed := postJSON(t, url, toolsBody(body+`,"stream":true`))
		a, b := choicesOf(t, whole, false), choicesOf(t, streamed, true)
		for i := range a {
			if len(a[i].calls) == 0 || len(a[i].calls) != len(b[i].calls) || a[i].finish != b[i].finish {
				t.Fatalf("choice %d: %+v then streamed %+v", i, a[i], b[i])
			}
			for k := range a[i].calls {
				checkCall(t, a[i].calls[k])
				if a[i].calls[k].Function != b[i].calls[k].Function {
					t.Errorf("choice %d call %d: %+v, streamed %+v", i, k, a[i].calls[k].Function, b[i].calls[k].Function)
				}
			}
		}
	})
	t.Run("required, one call", func(t *testing.T) {
		for seed := range 4 {
			status, data := postJSON(t, url, strings.Replace(toolsBody(`,"tool_choice":"required","parallel_tool_calls":false`), `"seed":5`, fmt.Sprintf(`"seed":%d`, seed), 1))
			o := choicesOf(t, data, false)[0]
			if status != 200 || len(o.calls) != 1 || o.finish != "tool_calls" {
				t.Fatalf("%d %s", status, data)
			}
			checkCall(t, o.calls[0])
		}
	})
	t.Run("auto and none", func(t *testing.T) {
		for _, choice := range []string{`"auto"`, `"none"`} {
			status, data := postJSON(t, url, toolsBody(`,"tool_choice":`+choice))
			o := choicesOf(t, data, false)
			if status != 200 || len(o) != 1 {
				t.Fatalf("%d %s", status, data)
			}
			for _, c := range o[0].calls {
				if choice == `"none"` {
					t.Errorf("tool_choice none made a call: %s", data)
				}
				if !strings.HasPrefix(c.ID, "call_") || c.Function.Name == "" {
					t.Errorf("call %+v", c)
				}
			}
		}
	})
	t.Run("multi-turn", func(t *testing.T) {
		_, first := postJSON(t, url, toolsBody(`,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`))
		var resp struct {
			Choices []struct {
				Message json.RawMessage `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(first, &resp); err != nil || len(resp.Choices) != 1 {
			t.Fatalf("%v: %s", err, first)
		}
		call := choicesOf(t, first, false)[0].calls[0]
		msgs := `[{"role":"user","content":"What is the weather in Paris this week?"},` + string(resp.Choices[0].Message) +
			`,{"role":"tool","tool_call_id":"` + call.ID + `","content":"Sunny, 21 C."},{"role":"user","content":"And the time?"}]`
		body := strings.Replace(toolsBody(`,"tool_choice":{"type":"function","function":{"name":"get_time"}}`),
			`[{"role":"user","content":"What is the weather in Paris this week?"}]`, msgs, 1)
		status, data := postJSON(t, url, body)
		o := choicesOf(t, data, false)
		if status != 200 || len(o[0].calls) != 1 || o[0].calls[0].Function.Name != "get_time" {
			t.Fatalf("%d %s", status, data)
		}
		checkCall(t, o[0].calls[0])
	})
}
