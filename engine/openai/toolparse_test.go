package openai

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// parsedCall is a call as the events of a parse add up to it.
type parsedCall struct {
	Name, Args string
}

// parsed is what the events of a parse add up to.
type parsed struct {
	Content string
	Calls   []parsedCall
}

// joinEvents adds up events, checking their order: a call's start before its arguments, calls in
// order, content only before the first call.
func joinEvents(t testing.TB, events []toolEvent) parsed {
	t.Helper()
	var p parsed
	for _, ev := range events {
		switch ev.kind {
		case evContent:
			if len(p.Calls) > 0 {
				t.Fatalf("content %q after a call began", ev.text)
			}
			p.Content += ev.text
		case evCallStart:
			if ev.call != len(p.Calls) {
				t.Fatalf("call %d starts after %d calls", ev.call, len(p.Calls))
			}
			p.Calls = append(p.Calls, parsedCall{Name: ev.name})
		case evArgs:
			if ev.call != len(p.Calls)-1 {
				t.Fatalf("arguments of call %d while call %d is the last", ev.call, len(p.Calls)-1)
			}
			p.Calls[ev.call].Args += ev.text
		}
	}
	return p
}

// parsePieces feeds pieces to a new parser of form and finishes it.
func parsePieces(t testing.TB, form string, afterTag bool, pieces []string) parsed {
	t.Helper()
	p := newToolParser(form, afterTag)
	var events []toolEvent
	for _, piece := range pieces {
		events = append(events, p.feed(piece)...)
	}
	events = append(events, p.finish()...)
	return joinEvents(t, events)
}

// splits returns ways to cut text into pieces: whole, byte by byte, and a few random cuts.
func splits(text string, seed uint64) [][]string {
	out := [][]string{{text}}
	bytes := make([]string, len(text))
	for i := 0; i < len(text); i++ {
		bytes[i] = text[i : i+1]
	}
	out = append(out, bytes)
	rng := rand.New(rand.NewPCG(seed, 1))
	for range 4 {
		var pieces []string
		for i := 0; i < len(text); {
			n := 1 + rng.IntN(6)
			pieces = append(pieces, text[i:min(len(text), i+n)])
			i += n
		}
		out = append(out, pieces)
	}
	return out
}

func TestToolParsers(t *testing.T) {
	weather := `{"city": "Paris", "unit": "celsius"}`
	for _, tc := range []struct {
		name     string
		form     string
		afterTag bool
		text     string
		want     parsed
	}{
		{"hermes one call", ToolParserHermes, false,
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + weather + "}\n</tool_call>",
			parsed{Calls: []parsedCall{{"get_weather", weather}}}},
		{"hermes content then two calls", ToolParserHermes, false,
			"Let me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
			parsed{Content: "Let me check.", Calls: []parsedCall{{"a", `{"x": [1, {"y": "}"}]}`}, {"b", "{}"}}}},
		{"hermes arguments with escapes and tags inside strings", ToolParserHermes, false,
			`<tool_call>{"name": "say", "arguments": {"text": "a \"<tool_call>\" \\ \u00e9 </tool_call>"}}</tool_call>`,
			parsed{Calls: []parsedCall{{"say", `{"text": "a \"<tool_call>\" \\ \u00e9 </tool_call>"}`}}}},
		{"hermes arguments before name", ToolParserHermes, false,
			`<tool_call>{"arguments": {"q": 1}, "name": "f"}</tool_call>`,
			parsed{Calls: []parsedCall{{"f", `{"q": 1}`}}}},
		{"hermes no arguments", ToolParserHermes, false,
			`<tool_call>{"name": "now"}</tool_call>`, parsed{Calls: []parsedCall{{"now", "{}"}}}},
		{"hermes scalar and string arguments", ToolParserHermes, false,
			"<tool_call>{\"name\": \"n\", \"arguments\": 42}</tool_call><tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
			parsed{Calls: []parsedCall{{"n", "42"}, {"s", `"{\"a\": 1}"`}}}},
		{"hermes plain text", ToolParserHermes, false, "No tools needed. <tool is not a tag\n",
			parsed{Content: "No tools needed. <tool is not a tag\n"}},
		{"hermes broken call is content", ToolParserHermes, false, "Hi\n<tool_call>\nnot json</tool_call>",
			parsed{Content: "Hi\n<tool_call>\nnot json</tool_call>"}},
		{"hermes call without name is content", ToolParserHermes, false, "<tool_call>{\"arguments\": {}}</tool_call>",
			parsed{Content: "<tool_call>{\"arguments\": {}}</tool_call>"}},
		{"hermes text after calls is dropped", ToolParserHermes, false,
			"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nDone!",
			parsed{Calls: []parsedCall{{"f", "{}"}}}},
		{"hermes text between calls", ToolParserHermes, false,
			"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nand then <tool_c\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"n\": 1}}\n</tool_call>\nDone.",
			parsed{Calls: []parsedCall{{"a", "{}"}, {"b", `{"n": 1}`}}}},
		{"hermes call without its closing tag", ToolParserHermes, false,
			"<tool_call>{\"name\": \"a\", \"arguments\": {}}\n<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
			parsed{Calls: []parsedCall{{"a", "{}"}, {"b", "{}"}}}},
		{"hermes cut mid-arguments", ToolParserHermes, false,
			"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par",
			parsed{Calls: []parsedCall{{"f", `{"city": "Par`}}}},
		{"hermes cut mid-name", ToolParserHermes, false, "ok <tool_call>\n{\"name\": \"get_wea",
			parsed{Content: "ok <tool_call>\n{\"name\": \"get_wea"}},
		{"hermes cut in the tag", ToolParserHermes, false, "Sure <tool_ca", parsed{Content: "Sure <tool_ca"}},
		{"llama3 call", ToolParserLlama3JSON, false, `{"name": "get_weather", "parameters": ` + weather + `}`,
			parsed{Calls: []parsedCall{{"get_weather", weather}}}},
		{"llama3 python tag and two calls", ToolParserLlama3JSON, false,
			` <|python_tag|>{"name": "a", "parameters": {"k": true}}; {"name": "b", "parameters": {"n": -1.5e3}}`,
			parsed{Calls: []parsedCall{{"a", `{"k": true}`}, {"b", `{"n": -1.5e3}`}}}},
		{"llama3 arguments key", ToolParserLlama3JSON, false, `{"name": "a", "arguments": {"k": null}}`,
			parsed{Calls: []parsedCall{{"a", `{"k": null}`}}}},
		{"llama3 content", ToolParserLlama3JSON, false, "  The answer is {42}.", parsed{Content: "  The answer is {42}."}},
		{"llama3 JSON that is no call", ToolParserLlama3JSON, false, `{"answer": 42}`, parsed{Content: `{"answer": 42}`}},
		{"llama3 only white space", ToolParserLlama3JSON, false, " \n", parsed{Content: " \n"}},
		{"mistral calls", ToolParserMistral, false,
			`Checking.[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [2]}}]`,
			parsed{Content: "Checking.", Calls: []parsedCall{{"a", `{"x": 1}`}, {"b", `{"y": [2]}`}}}},
		{"mistral after a forced tag", ToolParserMistral, true, ` [{"name": "a", "arguments": {}}]`,
			parsed{Calls: []parsedCall{{"a", "{}"}}}},
		{"mistral empty list, then a call", ToolParserMistral, false,
			`[TOOL_CALLS][] ok [TOOL_CALLS][{"name": "f", "arguments": {}}]`,
			parsed{Content: "[TOOL_CALLS][] ok", Calls: []parsedCall{{"f", "{}"}}}},
		{"mistral tag twice", ToolParserMistral, false,
			`[TOOL_CALLS] [TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}]`,
			parsed{Content: "[TOOL_CALLS]", Calls: []parsedCall{{"f", `{"a": 1}`}}}},
		{"mistral tag without list is content", ToolParserMistral, false, "[TOOL_CALLS]a", parsed{Content: "[TOOL_CALLS]a"}},
		{"mistral content", ToolParserMistral, false, "[TOOL] no", parsed{Content: "[TOOL] no"}},
		{"mistral args one call", ToolParserMistral, false, `[TOOL_CALLS]get_weather[ARGS]` + weather,
			parsed{Calls: []parsedCall{{"get_weather", weather}}}},
		{"mistral args two calls", ToolParserMistral, false,
			`[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}`,
			parsed{Calls: []parsedCall{{"get_weather", `{"city": "Paris"}`}, {"get_time", "{}"}}}},
		{"mistral args text before, white space between calls", ToolParserMistral, false,
			"Let me look.\n[TOOL_CALLS]a-1[ARGS] {\"x\": 1}\n [TOOL_CALLS]b_2[ARGS][1, 2]",
			parsed{Content: "Let me look.", Calls: []parsedCall{{"a-1", `{"x": 1}`}, {"b_2", "[1, 2]"}}}},
		{"mistral args nested, brackets and tags in strings", ToolParserMistral, false,
			`[TOOL_CALLS]f[ARGS]{"a": [{"b": "}]\"[TOOL_CALLS]g[ARGS]{"}], "c": {}}`,
			parsed{Calls: []parsedCall{{"f", `{"a": [{"b": "}]\"[TOOL_CALLS]g[ARGS]{"}], "c": {}}`}}}},
		{"mistral args call id skipped", ToolParserMistral, false,
			`[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"q": 1}[TOOL_CALLS]g[ARGS]{}`,
			parsed{Calls: []parsedCall{{"f", `{"q": 1}`}, {"g", "{}"}}}},
		{"mistral args after a forced tag", ToolParserMistral, true, `f[ARGS]{"a": true}`,
			parsed{Calls: []parsedCall{{"f", `{"a": true}`}}}},
		{"mistral args text after calls is dropped", ToolParserMistral, false,
			`[TOOL_CALLS]f[ARGS]{} Done. [TOOL_CALLS]g[ARGS]{}`, parsed{Calls: []parsedCall{{"f", "{}"}}}},
		{"mistral args then a list ends the parsing", ToolParserMistral, false,
			`[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS][{"name": "g", "arguments": {}}]`, parsed{Calls: []parsedCall{{"f", "{}"}}}},
		{"mistral args cut in the name", ToolParserMistral, false, "ok [TOOL_CALLS]get_wea",
			parsed{Content: "ok [TOOL_CALLS]get_wea"}},
		{"mistral args cut in [ARGS]", ToolParserMistral, false, "ok [TOOL_CALLS]f[AR", parsed{Content: "ok [TOOL_CALLS]f[AR"}},
		{"mistral args cut before the arguments", ToolParserMistral, false, "[TOOL_CALLS]f[ARGS] ",
			parsed{Content: "[TOOL_CALLS]f[ARGS] "}},
		{"mistral args cut in the arguments", ToolParserMistral, false, `Hi [TOOL_CALLS]f[ARGS]{"city": "Par`,
			parsed{Content: "Hi", Calls: []parsedCall{{"f", `{"city": "Par`}}}},
		{"mistral args second call cut in its name", ToolParserMistral, false, `[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g`,
			parsed{Calls: []parsedCall{{"f", "{}"}}}},
		{"mistral name without [ARGS] is content", ToolParserMistral, false, `[TOOL_CALLS]f{"a": 1} and more`,
			parsed{Content: `[TOOL_CALLS]f{"a": 1} and more`}},
		{"mistral name with another tag is content", ToolParserMistral, false, `[TOOL_CALLS]f[ARG]{} [TOOL_CALLS]g[ARGS]{}`,
			parsed{Content: "[TOOL_CALLS]f[ARG]{}", Calls: []parsedCall{{"g", "{}"}}}},
		{"mistral args not a container is content", ToolParserMistral, false, `[TOOL_CALLS]f[ARGS]"x"`,
			parsed{Content: `[TOOL_CALLS]f[ARGS]"x"`}},
		{"mistral args name with a space is content", ToolParserMistral, false, `[TOOL_CALLS]get weather[ARGS]{}`,
			parsed{Content: `[TOOL_CALLS]get weather[ARGS]{}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, pieces := range splits(tc.text, uint64(len(tc.name))) {
				got := parsePieces(t, tc.form, tc.afterTag, pieces)
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("split %d %q:\n got %+v\nwant %+v", i, pieces, got, tc.want)
				}
			}
		})
	}
}

// FuzzToolParsers: whatever the text and however it is split, each parser's events are in order
// and add up to the same content and calls as the whole text fed at once; the content and the calls'
// text come from the output (content is a prefix of it up to trailing white space, or all of it).
// Seeds: calls of every form (Mistral's two), well formed and broken.
func FuzzToolParsers(f *testing.F) {
	for _, s := range []string{
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"x\\\"}\"]}}\n</tool_call>",
		"Hi\n<tool_call>{\"arguments\": 1, \"name\": \"g\"}</tool_call><tool_call>{\"name\":\"h\"}",
		`<|python_tag|>{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"z": "y"}}`,
		`[TOOL_CALLS][{"name": "f", "arguments": {"q": "[TOOL_CALLS]"}}, {"name": "g"}]`,
		`ok [TOOL_CALLS]f[ARGS]{"a": [1, "]}[ARGS]"]} [TOOL_CALLS]g[CALL_ID]x1[ARGS][]`,
		"[TOOL_CALLS]f[AR [TOOL_CALLS]g[ARGS]{\"b\": {}}[TOOL_CALLS]h[ARGS]{",
		"<tool_call><tool_call>{\"name\": 1}", "{\"name\": \"\\u00e9\", \"parameters\": tru", "",
	} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		for _, form := range ToolParsers {
			for _, afterTag := range []bool{false, true} {
				if afterTag && form != ToolParserMistral {
					continue
				}
				want := parsePieces(t, form, afterTag, []string{text})
				for _, pieces := range splits(text, seed)[1:] {
					if got := parsePieces(t, form, afterTag, pieces); !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: split %q:\n got %+v\nwant %+v", form, pieces, got, want)
					}
				}
				if len(want.Calls) == 0 && want.Content != text {
					t.Fatalf("%s: no calls, content %q, want the whole text %q", form, want.Content, text)
				}
				if !strings.HasPrefix(text, want.Content) {
					t.Fatalf("%s: content %q is not a prefix of %q", form, want.Content, text)
				}
				for _, c := range want.Calls {
					if c.Name == "" || !strings.Contains(text, c.Args) && c.Args != "{}" {
						t.Fatalf("%s: call %+v is not in the text %q", form, c, text)
					}
				}
			}
		}
	})
}

// TestToolParsersRoundTrip: calls of random names and arguments, written in each form (Mistral's two
// in turn; as the chat templates write them, with json.Marshal's arguments), parse back to themselves, however split.
func TestToolParsersRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 200 {
		n := 1 + rng.IntN(3)
		var want parsed
		for range n {
			args := map[string]any{"s": fmt.Sprintf("v%d \"q\" {}[]<tool_call>", rng.IntN(100)), "n": rng.IntN(1000), "l": []any{true, nil, 1.5}}
			b, _ := json.Marshal(args)
			want.Calls = append(want.Calls, parsedCall{Name: fmt.Sprintf("fn_%d", rng.IntN(50)), Args: string(b)})
		}
		for _, form := range ToolParsers {
			var sb strings.Builder
			switch form {
			case ToolParserHermes:
				for _, c := range want.Calls {
					fmt.Fprintf(&sb, "<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>\n", c.Name, c.Args)
				}
			case ToolParserLlama3JSON:
				for k, c := range want.Calls {
					if k > 0 {
						sb.WriteString("; ")
					}
					fmt.Fprintf(&sb, "{\"name\": %q, \"parameters\": %s}", c.Name, c.Args)
				}
			case ToolParserMistral:
				if i%2 == 1 { // the newer form, as its templates write it
					for _, c := range want.Calls {
						fmt.Fprintf(&sb, "[TOOL_CALLS]%s[ARGS]%s", c.Name, c.Args)
					}
					break
				}
				sb.WriteString("[TOOL_CALLS][")
				for k, c := range want.Calls {
					if k > 0 {
						sb.WriteString(", ")
					}
					fmt.Fprintf(&sb, "{\"name\": %q, \"arguments\": %s}", c.Name, c.Args)
				}
				sb.WriteString("]")
			}
			for _, pieces := range splits(sb.String(), uint64(i)) {
				if got := parsePieces(t, form, false, pieces); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s %q:\n got %+v\nwant %+v", form, pieces, got, want)
				}
			}
		}
	}
}
