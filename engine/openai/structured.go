package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gollm/gollm/engine/constraint"
)

// Structured output: the request fields that constrain what a completion may say, in the forms the
// clients in use send them, each turned into a constraint.Spec compiled against the model's
// vocabulary (Config.Vocabulary; compilations cached by Config.Constraints) and given to every
// choice's engine request as its own matcher:
//
//   - OpenAI's response_format: {"type": "text"} (nothing), {"type": "json_object"} (any JSON
//     object), {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}
//     (a value valid under schema; strict or not, the schema is enforced);
//   - vLLM's structured_outputs: {"json": schema (an object or its text), "regex", "choice",
//     "grammar" (GBNF), "json_object": true}, with disable_any_whitespace (compact JSON) and
//     disable_fallback (gollm has no fallback) honoured; whitespace_pattern, structural_tag and
//     disable_additional_properties are refused by name;
//   - vLLM's older guided_json, guided_regex, guided_choice and guided_grammar, with
//     guided_decoding_backend accepted as "auto" only (gollm has one constraint engine) and
//     guided_whitespace_pattern refused by name;
//   - llama.cpp's grammar (GBNF) and json_schema (a schema object).
//
// One of them per request: two are a 400 naming both. A constraint that does not compile is a 400
// naming the field and, through engine/constraint's message, the keyword or feature it refuses. A
// constrained completion that reaches max_tokens ends with finish_reason "length", its JSON perhaps
// unfinished (as OpenAI's).

// responseFormat is OpenAI's response_format.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// structuredOutputs is vLLM's structured_outputs (StructuredOutputsParams).
type structuredOutputs struct {
	JSON                        json.RawMessage `json:"json"`
	Regex                       *string         `json:"regex"`
	Choice                      []string        `json:"choice"`
	Grammar                     *string         `json:"grammar"`
	JSONObject                  *bool           `json:"json_object"`
	DisableFallback             *bool           `json:"disable_fallback"`
	DisableAnyWhitespace        *bool           `json:"disable_any_whitespace"`
	DisableAdditionalProperties *bool           `json:"disable_additional_properties"`
	WhitespacePattern           *string         `json:"whitespace_pattern"`
	StructuralTag               json.RawMessage `json:"structural_tag"`
}

// constraintFields are the request fields of both endpoints that constrain the output.
type constraintFields struct {
	ResponseFormat          *responseFormat    `json:"response_format"`
	StructuredOutputs       *structuredOutputs `json:"structured_outputs"`
	GuidedJSON              json.RawMessage    `json:"guided_json"`
	GuidedRegex             *string            `json:"guided_regex"`
	GuidedChoice            []string           `json:"guided_choice"`
	GuidedGrammar           *string            `json:"guided_grammar"`
	GuidedDecodingBackend   *string            `json:"guided_decoding_backend"`
	GuidedWhitespacePattern *string            `json:"guided_whitespace_pattern"`
	// Grammar and JSONSchema are llama.cpp's.
	Grammar    *string         `json:"grammar"`
	JSONSchema json.RawMessage `json:"json_schema"`
}

// outputConstraint is what one request field asks the output to be.
type outputConstraint struct {
	param string // the field, as the 400s name it
	spec  constraint.Spec
	opts  constraint.Options
}

// present reports whether a raw JSON field was sent with a value other than null.
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// schemaText returns a JSON Schema sent as an object, or as a string holding one (vLLM accepts both).
func schemaText(param string, raw json.RawMessage) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(param, "'%s' must be a JSON Schema (an object, or a string holding one).", param)
		}
		raw = []byte(strings.TrimSpace(s))
	}
	if len(raw) == 0 || raw[0] != '{' && string(raw) != "true" && string(raw) != "false" {
		return "", badRequest(param, "'%s' must be a JSON Schema (an object, or a string holding one).", param)
	}
	return string(raw), nil
}

// constraints lists the output constraints the fields ask for, each with the field that asks.
func (f *constraintFields) constraints() ([]outputConstraint, *apiError) {
	var out []outputConstraint
	add := func(param string, spec constraint.Spec) {
		out = append(out, outputConstraint{param: param, spec: spec})
	}
	if rf := f.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
			if rf.JSONSchema != nil {
				return nil, badRequest("response_format.json_schema", "'response_format.json_schema' goes with type \"json_schema\", not %q.", rf.Type)
			}
		case "json_object":
			if rf.JSONSchema != nil {
				return nil, badRequest("response_format.json_schema", "'response_format.json_schema' goes with type \"json_schema\", not %q.", rf.Type)
			}
			add("response_format", constraint.Spec{Kind: constraint.JSONObject})
		case "json_schema":
			if rf.JSONSchema == nil || !present(rf.JSONSchema.Schema) {
				return nil, badRequest("response_format.json_schema.schema", "'response_format' of type \"json_schema\" needs 'json_schema.schema'.")
			}
			text, aerr := schemaText("response_format.json_schema.schema", rf.JSONSchema.Schema)
			if aerr != nil {
				return nil, aerr
			}
			add("response_format.json_schema.schema", constraint.Spec{Kind: constraint.JSONSchema, Text: text})
		case "":
			return nil, badRequest("response_format.type", "'response_format' needs a 'type': \"text\", \"json_object\" or \"json_schema\".")
		default:
			aerr := unsupportedParameter("response_format.type")
			aerr.Message = fmt.Sprintf("Unsupported parameter: 'response_format.type' %q is not supported by this server (\"text\", \"json_object\" and \"json_schema\" are).", rf.Type)
			return nil, aerr
		}
	}
	if so := f.StructuredOutputs; so != nil {
		switch {
		case so.WhitespacePattern != nil:
			return nil, unsupportedParameter("structured_outputs.whitespace_pattern")
		case present(so.StructuralTag):
			return nil, unsupportedParameter("structured_outputs.structural_tag")
		case so.DisableAdditionalProperties != nil && *so.DisableAdditionalProperties:
			return nil, unsupportedParameter("structured_outputs.disable_additional_properties")
		}
		var opts constraint.Options
		if so.DisableAnyWhitespace != nil && *so.DisableAnyWhitespace {
			opts.MaxWhitespace = -1
		}
		n := len(out)
		if present(so.JSON) {
			text, aerr := schemaText("structured_outputs.json", so.JSON)
			if aerr != nil {
				return nil, aerr
			}
			add("structured_outputs.json", constraint.Spec{Kind: constraint.JSONSchema, Text: text})
		}
		if so.Regex != nil {
			add("structured_outputs.regex", constraint.Spec{Kind: constraint.Regex, Text: *so.Regex})
		}
		if so.Choice != nil {
			add("structured_outputs.choice", constraint.Spec{Kind: constraint.Choice, Choices: so.Choice})
		}
		if so.Grammar != nil {
			add("structured_outputs.grammar", constraint.Spec{Kind: constraint.GBNF, Text: *so.Grammar})
		}
		if so.JSONObject != nil && *so.JSONObject {
			add("structured_outputs.json_object", constraint.Spec{Kind: constraint.JSONObject})
		}
		if len(out) == n {
			return nil, badRequest("structured_outputs", "'structured_outputs' needs one of 'json', 'regex', 'choice', 'grammar' and 'json_object'.")
		}
		for i := n; i < len(out); i++ {
			out[i].opts = opts
		}
	}
	if f.GuidedWhitespacePattern != nil {
		return nil, unsupportedParameter("guided_whitespace_pattern")
	}
	if b := f.GuidedDecodingBackend; b != nil && *b != "" && *b != "auto" {
		aerr := unsupportedParameter("guided_decoding_backend")
		aerr.Message = fmt.Sprintf("Unsupported parameter: 'guided_decoding_backend' %q: this server has one constraint engine; send \"auto\" or leave the field out.", *b)
		return nil, aerr
	}
	if present(f.GuidedJSON) {
		text, aerr := schemaText("guided_json", f.GuidedJSON)
		if aerr != nil {
			return nil, aerr
		}
		add("guided_json", constraint.Spec{Kind: constraint.JSONSchema, Text: text})
	}
	if f.GuidedRegex != nil {
		add("guided_regex", constraint.Spec{Kind: constraint.Regex, Text: *f.GuidedRegex})
	}
	if f.GuidedChoice != nil {
		add("guided_choice", constraint.Spec{Kind: constraint.Choice, Choices: f.GuidedChoice})
	}
	if f.GuidedGrammar != nil {
		add("guided_grammar", constraint.Spec{Kind: constraint.GBNF, Text: *f.GuidedGrammar})
	}
	if f.Grammar != nil {
		add("grammar", constraint.Spec{Kind: constraint.GBNF, Text: *f.Grammar})
	}
	if present(f.JSONSchema) {
		text, aerr := schemaText("json_schema", f.JSONSchema)
		if aerr != nil {
			return nil, aerr
		}
		add("json_schema", constraint.Spec{Kind: constraint.JSONSchema, Text: text})
	}
	return out, nil
}

// oneConstraint checks that at most one constraint is asked for and returns it (nil: none).
func oneConstraint(cs []outputConstraint) (*outputConstraint, *apiError) {
	switch len(cs) {
	case 0:
		return nil, nil
	case 1:
		return &cs[0], nil
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = "'" + c.param + "'"
	}
	return nil, badRequest(cs[1].param, "%s each constrain the output; send one of them.", strings.Join(names, " and "))
}

// compile compiles c against the model's vocabulary (through the server's cache). Its errors are
// 400s naming c's field, with the constraint's own message (which names the keyword or feature).
func (s *Server) compile(c *outputConstraint) (*constraint.Grammar, *apiError) {
	if s.cfg.Vocabulary == nil {
		aerr := unsupportedParameter(c.param)
		aerr.Message = fmt.Sprintf("Unsupported parameter: '%s': this server has no constraint vocabulary for its model, so it cannot constrain the output.", c.param)
		return nil, aerr
	}
	g, err := s.constraints.Compile(c.spec, s.cfg.Vocabulary, c.opts)
	if err != nil {
		aerr := badRequest(c.param, "Invalid '%s': %v.", c.param, err)
		if errors.Is(err, constraint.ErrUnsupported) {
			aerr.Code = strPtr("unsupported_constraint")
		}
		return nil, aerr
	}
	return g, nil
}

// requestConstraint returns the compiled constraint a request asks for: one of its constraint fields,
// or the tool calls its tool_choice requires (tu; nil on /v1/completions); nil for none.
func (s *Server) requestConstraint(f *constraintFields, tu *toolUse) (*constraint.Grammar, *apiError) {
	cs, aerr := f.constraints()
	if aerr != nil {
		return nil, aerr
	}
	if tu != nil && tu.constrained() {
		tc, forced, aerr := s.toolConstraint(tu)
		if aerr != nil {
			return nil, aerr
		}
		cs = append(cs, *tc)
		tu.forced = forced
	}
	oc, aerr := oneConstraint(cs)
	if oc == nil || aerr != nil {
		return nil, aerr
	}
	return s.compile(oc)
}
