package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNoTemplate is returned by Parse for an empty template (a model folder without one).
var ErrNoTemplate = errors.New("chattemplate: no chat template")

// Template is a parsed chat template. It is immutable and safe for concurrent use.
type Template struct {
	source  string
	body    []node
	globals map[string]value
	// now gives strftime_now its time; time.Now when nil.
	now func() time.Time
}

// Message is one chat message; Content is its text (the server joins text parts first).
type Message struct {
	Role    string
	Content string
	// ToolCalls are the tool calls of an assistant message, each a JSON object passed to the template
	// as a dict with its keys in order ({"id", "type", "function": {"name", "arguments"}} in OpenAI's
	// form; transformers' templates want arguments as an object, not a JSON string). The message has
	// no tool_calls key when there are none, so that templates' "is defined" tests see none.
	ToolCalls []json.RawMessage
	// ToolCallID is a tool message's tool_call_id, and Name a message's name; each is passed only when
	// it is not empty.
	ToolCallID, Name string
}

// Input is what a chat template is rendered with, as transformers passes it.
type Input struct {
	Messages []Message
	// AddGenerationPrompt asks the template to end with the start of an assistant turn.
	AddGenerationPrompt bool
	// Special tokens, by their tokenizer_config.json names; empty ones are passed as None.
	BOSToken, EOSToken, PadToken, UnkToken string
	// Extra holds further variables (for example enable_thinking), as JSON decodes them.
	Extra map[string]any
	// Tools are the tools offered to the model, each a JSON object ({"type": "function", "function":
	// {"name", "description", "parameters"}}), passed as the list tools with their keys in order; nil
	// passes tools as None, as transformers does without tools.
	Tools []json.RawMessage
}

// Parse parses a Jinja chat template.
func Parse(source string) (*Template, error) {
	if strings.TrimSpace(source) == "" {
		return nil, ErrNoTemplate
	}
	segs, err := lex(source)
	if err != nil {
		return nil, err
	}
	body, err := parse(segs)
	if err != nil {
		return nil, err
	}
	t := &Template{source: source, body: body}
	t.globals = map[string]value{
		"raise_exception": &function{name: "raise_exception", call: func(args []value, _ *dict) (value, error) {
			msg := ""
			if len(args) > 0 {
				msg = str(args[0])
			}
			return nil, &RaiseError{Message: msg}
		}},
		"strftime_now": &function{name: "strftime_now", call: func(args []value, _ *dict) (value, error) {
			if len(args) != 1 {
				return nil, errors.New("strftime_now takes a format")
			}
			now := time.Now
			if t.now != nil {
				now = t.now
			}
			return strftime(now(), str(args[0])), nil
		}},
		"namespace": &function{name: "namespace", call: func(args []value, kw *dict) (value, error) {
			d := newDict()
			d.namespace = true
			for _, a := range args {
				if src, ok := a.(*dict); ok {
					d.update(src)
				}
			}
			if kw != nil {
				d.update(kw)
			}
			return d, nil
		}},
		"range": &function{name: "range", call: rangeFunc},
		"dict": &function{name: "dict", call: func(args []value, kw *dict) (value, error) {
			d := newDict()
			if kw != nil {
				d.update(kw)
			}
			return d, nil
		}},
	}
	return t, nil
}

// Execute renders the template with the given variables, converted from Go values as
// encoding/json decodes them (nil, bool, float64 or json.Number, string, []any, map[string]any)
// plus int and []string.
func (t *Template) Execute(vars map[string]any) (string, error) {
	root := newScope(nil)
	for k, v := range vars {
		c, err := fromGo(v)
		if err != nil {
			return "", fmt.Errorf("chattemplate: variable %q: %w", k, err)
		}
		root.vars[k] = c
	}
	r := &renderer{env: t}
	var out strings.Builder
	err := r.execBody(&out, t.body, newScope(root))
	switch {
	case errors.Is(err, errBreak), errors.Is(err, errContinue):
		return "", err
	case err != nil:
		return "", err
	}
	return out.String(), nil
}

// Source returns the template's text.
func (t *Template) Source() string { return t.source }

// Render renders a conversation. Messages become dicts with "role" and "content", then "tool_calls",
// "tool_call_id" and "name" where they have them; special tokens that are empty are passed as None,
// and tools as None when there are none.
func (t *Template) Render(in Input) (string, error) {
	msgs := &list{items: make([]value, len(in.Messages))}
	for i, m := range in.Messages {
		d := newDict()
		d.set("role", m.Role)
		d.set("content", m.Content)
		if len(m.ToolCalls) > 0 {
			calls := &list{items: make([]value, len(m.ToolCalls))}
			for j, c := range m.ToolCalls {
				v, err := fromJSON(c)
				if err != nil {
					return "", fmt.Errorf("chattemplate: message %d: tool call %d: %w", i, j, err)
				}
				calls.items[j] = v
			}
			d.set("tool_calls", calls)
		}
		if m.ToolCallID != "" {
			d.set("tool_call_id", m.ToolCallID)
		}
		if m.Name != "" {
			d.set("name", m.Name)
		}
		msgs.items[i] = d
	}
	var tools value // None
	if in.Tools != nil {
		l := &list{items: make([]value, len(in.Tools))}
		for i, tool := range in.Tools {
			v, err := fromJSON(tool)
			if err != nil {
				return "", fmt.Errorf("chattemplate: tool %d: %w", i, err)
			}
			l.items[i] = v
		}
		tools = l
	}
	vars := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": in.AddGenerationPrompt,
		"tools":                 tools,
	}
	for name, tok := range map[string]string{"bos_token": in.BOSToken, "eos_token": in.EOSToken, "pad_token": in.PadToken, "unk_token": in.UnkToken} {
		if tok == "" {
			vars[name] = nil
		} else {
			vars[name] = tok
		}
	}
	for k, v := range in.Extra {
		if _, set := vars[k]; !set {
			vars[k] = v
		}
	}
	return t.Execute(vars)
}

func rangeFunc(args []value, _ *dict) (value, error) {
	ints := make([]int64, len(args))
	for i, a := range args {
		n, ok := a.(int64)
		if !ok && isInt(a) {
			return nil, errors.New("range argument too large")
		}
		if !ok {
			return nil, fmt.Errorf("range needs integers, got %s", typeName(a))
		}
		ints[i] = n
	}
	var start, stop, step int64 = 0, 0, 1
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, errors.New("range takes 1 to 3 arguments")
	}
	if step == 0 {
		return nil, errors.New("range step must not be zero")
	}
	out := &list{}
	for i := start; step > 0 && i < stop || step < 0 && i > stop; i += step {
		if len(out.items) >= maxSteps {
			return nil, errors.New("range too long")
		}
		out.items = append(out.items, i)
	}
	return out, nil
}

// strftime formats t with the C strftime directives chat templates use (dates for system prompts).
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case '-':
			if i+1 < len(format) && format[i+1] == 'd' {
				i++
				fmt.Fprintf(&b, "%d", t.Day())
			} else {
				b.WriteString("%-")
			}
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'B':
			b.WriteString(t.Month().String())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
