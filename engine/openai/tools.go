package openai

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/constraint"
)

// Tool calling (chat completions). The request's tools go to the chat template as transformers
// passes them (the list of {"type": "function", "function": {...}} objects as sent, keys in order),
// and its history's assistant tool_calls and tool messages too (arguments parsed from their JSON
// string into an object, as vLLM does before rendering). The model's output is split by the
// tool-call parser of its form (toolparse.go: Config.ToolCallParser, or the form the chat template
// teaches) into message.tool_calls, finish_reason "tool_calls", or streamed as delta.tool_calls.
//
// tool_choice: "none" renders the tools but parses no calls; "auto" (the default with tools) parses
// the output without constraining it; "required" and {"type": "function", "function": {"name"}}
// constrain it (engine/constraint) to calls in the model's form whose arguments are valid under the
// function's parameters schema: Hermes' <tool_call> blocks (up to maxParallelCalls of them, or one
// when parallel_tool_calls is false), Llama 3.1's one JSON object, Mistral's [TOOL_CALLS] list
// ([TOOL_CALLS], when a special token, ends the prompt instead: the first token the model would have
// had to pick), or, for tokenizers whose vocabulary has [ARGS] as a special token (Mistral Small
// 3.1+, Magistral, Devstral: the models trained on it), Mistral's newer form: after the
// [TOOL_CALLS] that ends the prompt, name[ARGS]{arguments} per call, the calls after the first
// each after its own [TOOL_CALLS], those tokens written by the constraint as special-token
// terminals (constraint.Spec.SpecialTokens). A function's strict flag is accepted: constrained
// calls always validate, and "auto" does not constrain.

// maxParallelCalls bounds the calls of a constrained output with parallel_tool_calls.
const maxParallelCalls = 8

// toolFunction is a tool's function.
type toolFunction struct {
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// chatTool is one entry of tools; raw is its JSON as sent, for the template.
type chatTool struct {
	Type     string        `json:"type"`
	Function *toolFunction `json:"function"`
	raw      json.RawMessage
}

// UnmarshalJSON decodes the tool and keeps its text.
func (t *chatTool) UnmarshalJSON(b []byte) error {
	type plain chatTool
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*t = chatTool(p)
	t.raw = slices.Clone(b)
	return nil
}

// chatToolCall is one of an assistant message's tool_calls (in the history).
type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolChoiceObject is tool_choice naming a function.
type toolChoiceObject struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// toolCallOut is a tool call of a response's message.
type toolCallOut struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Function toolCallFuncOut `json:"function"`
}

type toolCallFuncOut struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// toolCallDelta is a streamed piece of a tool call: the first of a call has its id, type, name and
// empty arguments; the others a piece of its arguments.
type toolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolUse is a chat request's tool use, checked.
type toolUse struct {
	tools    []chatTool
	choice   string // "none", "auto", "required" or "function"
	named    string // the function tool_choice names
	parallel bool
	parser   string // the tool-call form; "" when calls are not parsed
	afterTag bool   // the prompt ends with the form's tag (Mistral's [TOOL_CALLS] token): forced
	forced   int32  // the token id that ends the prompt then; -1 for none
	mistral  bool   // call ids of Mistral's form: nine alphanumerics
}

// toolName is what OpenAI allows as a function's name.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolUse checks the request's tools, tool_choice and parallel_tool_calls.
func (s *Server) toolUse(req *chatRequest) (*toolUse, *apiError) {
	tu := &toolUse{tools: req.Tools, choice: "auto", parallel: true, forced: -1}
	if req.ParallelToolCalls != nil {
		tu.parallel = *req.ParallelToolCalls
	}
	names := map[string]bool{}
	for i, t := range req.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			aerr := unsupportedParameter(param + ".type")
			aerr.Message = fmt.Sprintf("Unsupported parameter: '%s.type' %q: only function tools are supported.", param, t.Type)
			return nil, aerr
		}
		if t.Function == nil {
			return nil, badRequest(param+".function", "'%s.function' is required.", param)
		}
		if !toolName.MatchString(t.Function.Name) {
			return nil, badRequest(param+".function.name", "'%s.function.name' %q must be 1 to 64 letters, digits, underscores or dashes.", param, t.Function.Name)
		}
		if names[t.Function.Name] {
			return nil, badRequest(param+".function.name", "Two tools are named %q.", t.Function.Name)
		}
		names[t.Function.Name] = true
		if p := bytes.TrimSpace(t.Function.Parameters); present(p) && p[0] != '{' {
			return nil, badRequest(param+".function.parameters", "'%s.function.parameters' must be a JSON Schema object.", param)
		}
	}
	if raw := bytes.TrimSpace(req.ToolChoice); present(raw) {
		var name string
		if raw[0] == '"' {
			if err := json.Unmarshal(raw, &name); err != nil {
				return nil, badRequest("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function.")
			}
			switch name {
			case "none", "auto", "required":
				tu.choice = name
			default:
				return nil, badRequest("tool_choice", "'tool_choice' %q must be \"none\", \"auto\", \"required\" or a function.", name)
			}
		} else {
			var obj toolChoiceObject
			if err := json.Unmarshal(raw, &obj); err != nil {
				return nil, badRequest("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}.")
			}
			if field := unknownIn(raw, reflect.TypeFor[toolChoiceObject](), "tool_choice"); field != "" {
				return nil, unsupportedParameter(field)
			}
			if obj.Type != "function" {
				return nil, badRequest("tool_choice.type", "'tool_choice.type' must be \"function\".")
			}
			if !names[obj.Function.Name] {
				return nil, badRequest("tool_choice.function.name", "'tool_choice' names %q, which is not among the tools.", obj.Function.Name)
			}
			tu.choice, tu.named = "function", obj.Function.Name
		}
	}
	if len(req.Tools) == 0 {
		if tu.choice != "none" && present(req.ToolChoice) {
			return nil, badRequest("tool_choice", "'tool_choice' %s needs 'tools'.", strconv.Quote(tu.choice))
		}
		tu.choice = "none"
		return tu, nil
	}
	if tu.choice == "none" {
		return tu, nil
	}
	if s.toolParser == "" {
		aerr := unsupportedParameter("tools")
		aerr.Message = "Unsupported parameter: 'tools': this model's chat template teaches no tool-call form gollm knows (start the server with --tool-call-parser hermes, llama3_json or mistral, or a --chat-template that renders tools)."
		return nil, aerr
	}
	tu.parser = s.toolParser
	tu.mistral = tu.parser == ToolParserMistral
	return tu, nil
}

// constrained reports whether the output is constrained to tool calls.
func (tu *toolUse) constrained() bool {
	return tu.parser != "" && (tu.choice == "required" || tu.choice == "function")
}

// offers reports whether the model may call t: every tool, or only the one tool_choice names.
func (tu *toolUse) offers(t chatTool) bool {
	return tu.choice != "function" || t.Function.Name == tu.named
}

// toolSchema returns the JSON Schema of a call tu allows (an object whose argsKey holds the
// arguments) without its $defs, and the members of those $defs (each function's parameters, their
// own references rebased to where they live), which the document's root must hold.
func (tu *toolUse) toolSchema(argsKey string) (call, defs string, err error) {
	var alts, members []string
	for i, t := range tu.tools {
		if !tu.offers(t) {
			continue
		}
		params := t.Function.params()
		def := fmt.Sprintf("gollm_tool_%d", i)
		rebased, err := rebaseRefs(params, "#/$defs/"+def)
		if err != nil {
			return "", "", fmt.Errorf("tools[%d].function.parameters: %w", i, err)
		}
		members = append(members, strconv.Quote(def)+":"+string(rebased))
		name, _ := json.Marshal(t.Function.Name)
		alts = append(alts, fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%s},%q:{"$ref":"#/$defs/%s"}},"required":["name",%q],"additionalProperties":false}`,
			name, argsKey, def, argsKey))
	}
	call = alts[0]
	if len(alts) > 1 {
		call = `{"anyOf":[` + strings.Join(alts, ",") + `]}`
	}
	return call, strings.Join(members, ","), nil
}

// params returns the function's parameters schema: an object without properties when it has none.
func (f *toolFunction) params() []byte {
	if p := bytes.TrimSpace(f.Parameters); present(p) {
		return p
	}
	return []byte(`{"type":"object","properties":{},"additionalProperties":false}`)
}

// specialToken returns the id of text when tok encodes it as one special token (one that decodes to
// nothing when special tokens are skipped), else -1.
func specialToken(tok Tokenizer, text string) int32 {
	if ids := tok.Encode(text, false); len(ids) == 1 && tok.Decode(ids, true) == "" {
		return ids[0]
	}
	return -1
}

// mistralTokens returns the ids of Mistral's [TOOL_CALLS] and [ARGS] where tok has each as one
// special token, -1 where not (New keeps them for a server of the Mistral tool parser).
func mistralTokens(tok Tokenizer) (tag, args int32) {
	return specialToken(tok, mistralTag), specialToken(tok, argsTag)
}

// withDefs adds $defs members defs to the schema object schema.
func withDefs(schema, defs string) string {
	return `{"$defs":{` + defs + `},` + strings.TrimPrefix(schema, "{")
}

// constraint returns the constraint of a "required" or named tool_choice, in the form of tu's parser
// (for Mistral's, the newer name[ARGS]{...} form when the tokenizer has [ARGS] as a special token,
// else the list). forced is the token id to end the prompt with (Mistral's [TOOL_CALLS], when it
// is one special token), -1 for none.
func (s *Server) toolConstraint(tu *toolUse) (oc *outputConstraint, forced int32, aerr *apiError) {
	param := "tools" // a compile error names a keyword of a parameters schema
	calls := 1
	if tu.parallel && tu.choice == "required" {
		calls = maxParallelCalls
	}
	forced = -1
	spec := constraint.Spec{Kind: constraint.JSONSchema}
	tag, args := int32(-1), int32(-1)
	if tu.parser == ToolParserMistral {
		tag, args = s.mistralTag, s.mistralArgs
	}
	if tag >= 0 && args >= 0 {
		// Mistral's newer form: [TOOL_CALLS] ends the prompt; then name[ARGS]{arguments} (each
		// function's own parameters schema, a document of its own), the next calls each after a
		// [TOOL_CALLS] of the constraint's.
		spec = constraint.Spec{Kind: constraint.AnyOf, Separator: mistralTag, MaxRepeat: calls,
			SpecialTokens: map[string]int32{mistralTag: tag, argsTag: args}}
		for _, t := range tu.tools {
			if !tu.offers(t) {
				continue
			}
			spec.Alternatives = append(spec.Alternatives, constraint.Spec{Kind: constraint.JSONSchema,
				Text: string(t.Function.params()), Prefix: t.Function.Name + argsTag})
		}
		tu.afterTag = true
		return &outputConstraint{param: param, spec: spec}, tag, nil
	}
	argsKey := "arguments"
	if tu.parser == ToolParserLlama3JSON {
		argsKey = "parameters"
	}
	call, defs, err := tu.toolSchema(argsKey)
	switch tu.parser {
	case ToolParserHermes:
		spec.Text = withDefs(call, defs)
		spec.Prefix, spec.Suffix, spec.Separator, spec.MaxRepeat = "<tool_call>\n", "\n</tool_call>", "\n", calls
	case ToolParserLlama3JSON:
		// Llama 3.1 calls one function at a time (its template refuses more in the history).
		spec.Text = withDefs(call, defs)
	case ToolParserMistral:
		spec.Text = withDefs(fmt.Sprintf(`{"type":"array","minItems":1,"maxItems":%d,"items":%s}`, calls, call), defs)
		if tag >= 0 {
			forced = tag
			tu.afterTag = true
		} else {
			spec.Prefix = mistralTag
		}
	}
	if err != nil {
		return nil, -1, badRequest("tools", "Invalid 'tools': %v.", err)
	}
	return &outputConstraint{param: param, spec: spec}, forced, nil
}

// rebaseRefs rewrites the document-local "$ref" values of a JSON Schema ("#..." pointers) to point
// under base, where the schema is to live in a larger document; the rest is kept, keys in order.
func rebaseRefs(schema []byte, base string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var out bytes.Buffer
	if err := rebaseValue(dec, &out, base, false, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return out.Bytes(), nil
}

func rebaseValue(dec *json.Decoder, out *bytes.Buffer, base string, isRef bool, depth int) error {
	if depth > 512 {
		return fmt.Errorf("nesting too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		closing := byte('}')
		if t == '[' {
			closing = ']'
		}
		out.WriteByte(byte(t))
		for i := 0; dec.More(); i++ {
			if i > 0 {
				out.WriteByte(',')
			}
			ref := false
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := json.Marshal(k)
				out.Write(key)
				out.WriteByte(':')
				ref = k == "$ref"
			}
			if err := rebaseValue(dec, out, base, ref, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		out.WriteByte(closing)
	case string:
		if isRef && strings.HasPrefix(t, "#") {
			t = base + strings.TrimPrefix(t, "#")
		}
		b, _ := json.Marshal(t)
		out.Write(b)
	case json.Number:
		out.WriteString(t.String())
	case bool:
		out.WriteString(strconv.FormatBool(t))
	case nil:
		out.WriteString("null")
	}
	return nil
}

// historyToolCalls turns an assistant message's tool calls into the template's form: each call's
// JSON with its arguments an object (parsed from the string; vLLM's {} when it is not JSON).
func historyToolCalls(i int, calls []chatToolCall) ([]json.RawMessage, *apiError) {
	out := make([]json.RawMessage, len(calls))
	for j, c := range calls {
		param := fmt.Sprintf("messages[%d].tool_calls[%d]", i, j)
		if c.Type != "function" {
			return nil, badRequest(param+".type", "'%s.type' must be \"function\".", param)
		}
		if c.Function.Name == "" {
			return nil, badRequest(param+".function.name", "'%s.function.name' is required.", param)
		}
		args := bytes.TrimSpace([]byte(c.Function.Arguments))
		if !json.Valid(args) || len(args) == 0 || args[0] != '{' && args[0] != '[' {
			args = []byte("{}")
		}
		id, _ := json.Marshal(c.ID)
		name, _ := json.Marshal(c.Function.Name)
		out[j] = json.RawMessage(fmt.Sprintf(`{"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}`, id, name, args))
	}
	return out, nil
}

// newToolCallID returns a new call id: "call_" and 24 alphanumerics, or for Mistral's forms the nine
// alphanumerics their templates want back (those that render ids check them; the others ignore them).
func newToolCallID(mistral bool) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	n := 24
	if mistral {
		n = 9
	}
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	if mistral {
		return string(b)
	}
	return "call_" + string(b)
}

// toolOutput follows one choice's output through its tool-call parser.
type toolOutput struct {
	parser  toolParser
	mistral bool
	// single keeps the first call only (parallel_tool_calls false): the parser may read more where
	// the output is not constrained ("auto").
	single  bool
	content strings.Builder
	calls   []toolCallOut
}

func newToolOutput(tu *toolUse) *toolOutput {
	return &toolOutput{parser: newToolParser(tu.parser, tu.afterTag), mistral: tu.mistral, single: !tu.parallel}
}

// apply records events and returns them as stream deltas: content, then each call's first delta
// (id, type, name, empty arguments) and argument pieces, one delta each.
func (o *toolOutput) apply(events []toolEvent) (content string, deltas []toolCallDelta) {
	for _, ev := range events {
		if o.single && ev.kind != evContent && ev.call > 0 {
			continue
		}
		switch ev.kind {
		case evContent:
			o.content.WriteString(ev.text)
			content += ev.text
		case evCallStart:
			c := toolCallOut{ID: newToolCallID(o.mistral), Type: "function", Function: toolCallFuncOut{Name: ev.name}}
			o.calls = append(o.calls, c)
			d := toolCallDelta{Index: ev.call, ID: c.ID, Type: "function"}
			d.Function.Name = ev.name
			deltas = append(deltas, d)
		case evArgs:
			o.calls[ev.call].Function.Arguments += ev.text
			d := toolCallDelta{Index: ev.call}
			d.Function.Arguments = ev.text
			deltas = append(deltas, d)
		}
	}
	return content, deltas
}

// message is the complete response's message: content (null when empty and calls were made) and
// the calls.
func (o *toolOutput) message() chatMessageOut {
	m := chatMessageOut{Role: "assistant", ToolCalls: o.calls}
	if text := o.content.String(); text != "" || len(o.calls) == 0 {
		m.Content = &text
	}
	return m
}

// finishReason is a choice's finish_reason: "tool_calls" when it stopped after making calls.
func (o *toolOutput) finishReason(r engine.FinishReason) *string {
	if len(o.calls) > 0 && r == engine.FinishStop {
		return strPtr("tool_calls")
	}
	return finishReason(r)
}
