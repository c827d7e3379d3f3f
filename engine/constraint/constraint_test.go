package constraint

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		name   string
		spec   Spec
		accept []string
		reject []string
	}{
		{"choice", Spec{Kind: Choice, Choices: []string{"yes", "no", "maybe so"}},
			[]string{"yes", "no", "maybe so"}, []string{"", "ye", "yes ", "No"}},
		{"regex", Spec{Kind: Regex, Text: `[a-c]+(x|yz)?\d{2,3}`},
			[]string{"a12", "abcx123", "cyz00"}, []string{"", "a1", "dx12", "a1234", "ayx12"}},
		{"regex-unicode", Spec{Kind: Regex, Text: `[^a-z]{2}.`},
			[]string{"東京!", "AB😀"}, []string{"ab!", "東京\n"}},
		{"gbnf", Spec{Kind: GBNF, Text: "root ::= greeting \" \" name # comment\ngreeting ::= \"hi\" | \"hello\"\nname ::= [A-Z] [a-z]*\n"},
			[]string{"hi Bob", "hello X"}, []string{"hi bob", "hey Bob", "hi "}},
		{"gbnf-recursive", Spec{Kind: GBNF, Text: `root ::= "(" root ")" | "x"`},
			[]string{"x", "((x))"}, []string{"(x", "()", "(x))"}},
		{"gbnf-layout", Spec{Kind: GBNF, Text: gbnfJSON},
			[]string{`{"a": [1, -2.5e3, "x\u00e9"], "b": {}}`, "[ ]", `"s" `}, []string{`{"a" 1}`, `[1,]`, "{\n\n}"}},
		{"wrapped", Spec{Kind: JSONSchema, Text: `{"type":"object","properties":{"name":{"enum":["f","g"]}},"required":["name"],"additionalProperties":false}`,
			Prefix: "<tool_call>\n", Suffix: "\n</tool_call>", Separator: "\n", MaxRepeat: 2},
			[]string{"<tool_call>\n{\"name\":\"f\"}\n</tool_call>", "<tool_call>\n{\"name\":\"f\"}\n</tool_call>\n<tool_call>\n{\"name\":\"g\"}\n</tool_call>"},
			[]string{"{\"name\":\"f\"}", "<tool_call>\n{\"name\":\"f\"}\n</tool_call>\n", "<tool_call>\n{\"name\":\"f\"}\n</tool_call>\n<tool_call>\n{\"name\":\"f\"}\n</tool_call>\n<tool_call>\n{\"name\":\"f\"}\n</tool_call>"}},
		{"json_object", Spec{Kind: JSONObject},
			[]string{`{}`, `{"a": [1, -2.5e3, "x\n", {"b": null}], "c": true}`, " {\n  \"k\": \"é\"\n}"},
			[]string{`[]`, `{"a"}`, `{"a": 01}`, `{"a": "\x"}`, "{\"a\": \"\x01\"}", `{"a":1,}`, "{          }"}},
		{"schema-object", Spec{Kind: JSONSchema, Text: `{"type":"object","properties":{"name":{"type":"string","maxLength":3},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name"],"additionalProperties":false}`},
			[]string{`{"name":"Bob"}`, `{"name": "", "age": 150}`, `{"name":"é","age":0}`},
			[]string{`{}`, `{"age":3}`, `{"name":"Bobby"}`, `{"name":"a","age":151}`, `{"name":"a","age":-1}`, `{"name":"a","x":1}`, `{"age":1,"name":"a"}`}},
		{"schema-additional", Spec{Kind: JSONSchema, Text: `{"properties":{"a":{"type":"integer"}}}`},
			[]string{`{"a":1,"b":"x"}`, `{"b":2}`, `"any"`, `[1]`},
			[]string{`{"a":"x"}`, `{"b":1,"a":"x"}`}},
		{"schema-range", Spec{Kind: JSONSchema, Text: `{"type":"number","exclusiveMinimum":-1.5,"maximum":20}`},
			[]string{"-1.49", "0", "-0", "20", "19.999", "-1"}, []string{"-1.5", "-2", "20.0001", "21", "1e1", "100"}},
		{"schema-int-range", Spec{Kind: JSONSchema, Text: `{"type":"integer","minimum":1.5,"exclusiveMaximum":1000}`},
			[]string{"2", "999", "10"}, []string{"1", "1000", "2.0", "0", "-5"}},
		{"schema-enum", Spec{Kind: JSONSchema, Text: `{"enum":["a",1,null,{"x":[true]}],"type":["string","object","null"]}`},
			[]string{`"a"`, `null`, `{"x":[true]}`}, []string{`1`, `"b"`}},
		{"schema-recursive", Spec{Kind: JSONSchema, Text: `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"}`},
			[]string{`{"v":1}`, `{"v":1,"next":{"v":2,"next":{"v":3}}}`}, []string{`{"v":1,"next":{}}`, `{}`}},
		{"schema-recursive-anyof", Spec{Kind: JSONSchema, Text: `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"}`},
			[]string{`{"v":1,"next":null}`, `{"v":1,"next":{"v":2,"next":{"v":3,"next":null}}}`}, []string{`{"v":1}`, `{"v":1,"next":{"v":2}}`, `{"v":1,"next":1}`}},
		{"schema-recursive-root-oneof", Spec{Kind: JSONSchema, Text: `{"type":"object","properties":{"kids":{"type":"array","items":{"oneOf":[{"$ref":"#"},{"type":"string"}]}}},"additionalProperties":false}`},
			[]string{`{}`, `{"kids":["a",{"kids":[{}]}]}`}, []string{`{"kids":[1]}`, `{"kids":[{"x":1}]}`}},
		{"schema-array", Spec{Kind: JSONSchema, Text: `{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"boolean"},"minItems":2,"maxItems":3}`},
			[]string{`["a",true]`, `["a", false, true]`}, []string{`["a"]`, `[true,true]`, `["a",true,true,true]`}},
		{"schema-format", Spec{Kind: JSONSchema, Text: `{"type":"array","items":[{"format":"date"},{"format":"date-time"},{"format":"uuid"},{"format":"email"}]}`},
			[]string{`["2024-02-29","2023-12-31T23:59:59.5+01:00","123e4567-e89b-12d3-a456-426614174000","a.b@example.com"]`},
			[]string{`["2023-02-29"]`, `["2024-13-01"]`, `["2024-01-01","2024-01-01T24:00:00Z"]`}},
		{"schema-pattern", Spec{Kind: JSONSchema, Text: `{"type":"string","pattern":"^[a-z]+\\d$","minLength":3}`},
			[]string{`"ab1"`, `"abcd9"`}, []string{`"a1"`, `"ab"`, `"AB1"`}},
		{"schema-pattern-search", Spec{Kind: JSONSchema, Text: `{"type":"string","pattern":"o+"}`},
			[]string{`"foo"`, `"o"`, `"\"o\""`}, []string{`"f"`, `""`}},
		{"schema-anyof", Spec{Kind: JSONSchema, Text: `{"anyOf":[{"type":"string","maxLength":1},{"type":"integer"}]}`},
			[]string{`"a"`, `5`}, []string{`"ab"`, `1.5`}},
		{"schema-oneof-disjoint", Spec{Kind: JSONSchema, Text: `{"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},{"type":"object","properties":{"k":{"const":"b"},"n":{"type":"integer"}},"required":["k"]}]}`},
			[]string{`{"k":"a"}`, `{"k":"b","n":1}`}, []string{`{"k":"c"}`}},
		{"schema-counts", Spec{Kind: JSONSchema, Text: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"minProperties":1,"maxProperties":2,"additionalProperties":{"type":"boolean"}}`},
			[]string{`{"a":1}`, `{"x":true}`, `{"a":1,"b":2}`, `{"b":2,"y":false}`}, []string{`{}`, `{"a":1,"b":2,"x":true}`, `{"x":true,"y":true,"z":true}`}},
		{"schema-array-unbounded", Spec{Kind: JSONSchema, Text: `{"type":"array","items":{"type":"integer"}}`},
			[]string{`[]`, `[1]`, `[1,2,3]`}, []string{`[1,]`, `[,1]`}},
		{"schema-multiple", Spec{Kind: JSONSchema, Text: `{"type":"number","multipleOf":0.25,"maximum":2}`},
			[]string{"0", "0.25", "-1.5", "2", "1.750"}, []string{"0.3", "2.25", "0.125"}},
		{"schema-multiple-int", Spec{Kind: JSONSchema, Text: `{"type":"integer","multipleOf":1.5}`},
			[]string{"0", "3", "-12", "300"}, []string{"1", "1.5", "4"}},
		{"schema-formats", Spec{Kind: JSONSchema, Text: `{"type":"array","prefixItems":[{"format":"ipv4"},{"format":"duration"},{"format":"hostname"},{"format":"time"}]}`},
			[]string{`["192.168.0.255","P1Y2M3DT4H5M6S","example.com","23:59:59z"]`, `["0.0.0.0","PT1S","a","00:00:00+01:00"]`},
			[]string{`["256.1.1.1"]`, `["1.1.1.1","P"]`, `["1.1.1.1","PT"]`, `["1.1.1.1","P1D","-a"]`}},
		{"schema-pydantic", Spec{Kind: JSONSchema, Text: `{"$defs": {"Pet": {"properties": {"name": {"title": "Name", "type": "string"},
			"kind": {"enum": ["cat", "dog"], "title": "Kind", "type": "string"}}, "required": ["name", "kind"], "title": "Pet", "type": "object"}},
			"properties": {"owner": {"title": "Owner", "type": "string"}, "pets": {"items": {"$ref": "#/$defs/Pet", "description": "a pet"}, "title": "Pets", "type": "array"},
			"age": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null, "title": "Age"}}, "required": ["owner", "pets"], "title": "Person", "type": "object"}`},
			[]string{`{"owner": "Ann", "pets": [{"name": "Rex", "kind": "dog"}], "age": null}`, `{"owner":"B","pets":[]}`},
			[]string{`{"owner": "Ann", "pets": [{"name": "Rex", "kind": "cow"}]}`, `{"pets": []}`}},
		{"schema-zod", Spec{Kind: JSONSchema, Text: `{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"tags":{"type":"array","items":{"type":"string"},"minItems":1},
			"score":{"type":"number","minimum":0,"maximum":1},"when":{"type":"string","format":"date-time"}},"required":["id","tags","score"],
			"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`},
			[]string{`{"id":"123e4567-e89b-12d3-a456-426614174000","tags":["a"],"score":0.5}`},
			[]string{`{"id":"123e4567-e89b-12d3-a456-426614174000","tags":[],"score":0.5}`, `{"id":"x","tags":["a"],"score":0.5}`}},
		{"schema-pattern-properties", Spec{Kind: JSONSchema, Text: `{"type":"object","properties":{"x_a":{"type":"string"},"b":{}},
			"patternProperties":{"^x_":{"type":"integer"}},"propertyNames":{"maxLength":3},"additionalProperties":{"type":"boolean"}}`},
			[]string{`{}`, `{"x_b":1}`, `{"b":null,"c":true}`, `{"x_1":2,"zz":false}`},
			[]string{`{"x_a":"s"}`, `{"x_b":true}`, `{"c":1}`, `{"long":true}`, `{"x_bc":1}`}},
		{"schema-allof", Spec{Kind: JSONSchema, Text: `{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]}`},
			[]string{`{"a":1,"b":"x"}`}, []string{`{"a":1}`, `{"b":"x"}`}},
	}
	v := testVocab(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := compileT(t, tc.spec, v)
			checkMatches(t, g, tc.accept, tc.reject)
			rng := rand.New(rand.NewPCG(1, 2))
			for range 5 {
				text, ok := randomWalk(t, g, rng, 60, 0.3)
				if ok && !g.match([]byte(text)) {
					t.Errorf("random walk %q complete but does not match", text)
				}
			}
		})
	}
}

func TestRefused(t *testing.T) {
	tests := []struct {
		spec Spec
		want error
	}{
		{Spec{Kind: JSONSchema, Text: `{"type":"object","dependencies":{}}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"patternProperties":{"^a":{},"b$":{}}}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"propertyNames":{"enum":["a"]}}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"not":{}}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"format":"uri"}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"multipleOf":0}`}, ErrSyntax},
		{Spec{Kind: JSONSchema, Text: `{"multipleOf":1.23456}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"oneOf":[{"type":"integer"},{"minimum":2}]}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"$ref":"http://example.com/s.json"}`}, ErrUnsupported},
		{Spec{Kind: JSONSchema, Text: `{"type":`}, ErrSyntax},
		{Spec{Kind: JSONSchema, Text: `{"$ref":"#/$defs/missing"}`}, ErrSyntax},
		{Spec{Kind: JSONSchema, Text: `{"type":"string","maxLength":1,"minLength":2}`}, ErrEmpty},
		{Spec{Kind: Regex, Text: `a(?=b)`}, ErrUnsupported},
		{Spec{Kind: Regex, Text: `(a)\1`}, ErrUnsupported},
		{Spec{Kind: Regex, Text: `a\bb`}, ErrUnsupported},
		{Spec{Kind: Regex, Text: `a^b`}, ErrUnsupported},
		{Spec{Kind: Regex, Text: `(a`}, ErrSyntax},
		{Spec{Kind: GBNF, Text: `root ::= root "a" | "b"`}, ErrUnsupported},
		{Spec{Kind: GBNF, Text: `root ::= x`}, ErrSyntax},
		{Spec{Kind: GBNF, Text: `root ::= <think>`}, ErrUnsupported},
		{Spec{Kind: GBNF, Text: `start ::= "a"`}, ErrSyntax},
		{Spec{Kind: "xml"}, ErrUnsupported},
	}
	v := testVocab(t)
	for _, tc := range tests {
		_, err := Compile(tc.spec, v, Options{})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s %q: %v, want %v", tc.spec.Kind, tc.spec.Text, err, tc.want)
		}
	}
}

// TestMaskRealVocab checks masks against Accept, token by token, on the Llama 3 and Qwen3
// vocabularies along a tokenized output of the nested schema (multi-byte tokens crossing JSON's
// syntax, characters split across byte-level tokens).
func TestMaskRealVocab(t *testing.T) {
	names := []string{"llama3", "qwen3"}
	if raceEnabled {
		names = names[:1] // the race detector slows this tenfold; the plain run checks both
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			rv := loadRealVocab(t, name)
			g := compileT(t, Spec{Kind: JSONSchema, Text: nestedSchema}, rv.vocab)
			ids := rv.tok.Encode(nestedSample, false)
			m := g.NewMatcher()
			mask := make([]uint64, rv.vocab.MaskWords())
			stride := 7
			if testing.Short() || raceEnabled {
				stride = 100
			}
			for k, id := range ids {
				if k%stride == 0 {
					m.Mask(mask)
					want := bruteMask(m)
					for i := range mask {
						if mask[i] != want[i] {
							t.Fatalf("token %d: mask word %d = %064b, want %064b", k, i, mask[i], want[i])
						}
					}
				}
				if err := m.Accept(id); err != nil {
					t.Fatalf("token %d (%q): %v", k, rv.vocab.tokens[id], err)
				}
			}
			if !m.Complete() {
				t.Error("sample incomplete")
			}
		})
	}
}

// gbnfJSON is JSON in GBNF, laid out as llama.cpp's grammars are: bodies on the next line, rules
// continued inside parentheses, comments, an empty alternative.
const gbnfJSON = `
# JSON values
root ::= value
value ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
    string ":" ws value     # first member
    ("," ws string ":" ws value)*
  )? "}" ws

array ::= "[" ws ( value ("," ws value)* )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws

number ::= "-"? ([0-9] | [1-9] [0-9]{1,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}
`

// TestRollback: rolling back tokens restores the earlier masks and completeness exactly.
func TestRollback(t *testing.T) {
	v := testVocab(t)
	g := compileT(t, Spec{Kind: JSONSchema, Text: `{"type":"array","items":{"type":"string","maxLength":2},"maxItems":2}`}, v)
	m := g.NewMatcher()
	var masks [][]uint64
	var complete []bool
	text := `["ab","é"]`
	for i := 0; i < len(text); i++ {
		mask := make([]uint64, v.MaskWords())
		m.Mask(mask)
		masks, complete = append(masks, mask), append(complete, m.Complete())
		if err := m.Accept(int32(text[i])); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if !m.Complete() || m.NumAccepted() != len(text) {
		t.Fatalf("complete %v after %d tokens", m.Complete(), m.NumAccepted())
	}
	for _, n := range []int{1, 3, 4} {
		m.Rollback(n)
		k := m.NumAccepted()
		mask := make([]uint64, v.MaskWords())
		m.Mask(mask)
		if !slices.Equal(mask, masks[k]) || m.Complete() != complete[k] {
			t.Fatalf("after rolling back to %d tokens: mask or completeness differs", k)
		}
	}
	m.Rollback(100)
	if m.NumAccepted() != 0 {
		t.Fatalf("%d tokens after rolling back everything", m.NumAccepted())
	}
}
