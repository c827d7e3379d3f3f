package constraint

import (
	"errors"
	"testing"
)

// checkCompiled walks g a little: a random walk whose masks agree with Accept, which must not
// panic.
func checkCompiled(t *testing.T, g *Grammar, seed []byte) {
	m := g.NewMatcher()
	mask := make([]uint64, g.vocab.MaskWords())
	for i := 0; i < len(seed) && i < 16; i++ {
		m.Mask(mask)
		n := maskCount(mask)
		if n == 0 {
			if !m.Complete() {
				t.Fatalf("no token allowed and not complete")
			}
			return
		}
		k := int(seed[i]) % n
		for id := range int32(g.vocab.size) {
			if mask[id>>6]&(1<<(id&63)) != 0 {
				if k == 0 {
					if err := m.Accept(id); err != nil {
						t.Fatalf("masked token %d refused: %v", id, err)
					}
					break
				}
				k--
			}
		}
		if seed[i]%7 == 0 {
			m.Rollback(1)
		}
	}
}

// fuzzCompile compiles spec and checks the result or the error's kind.
func fuzzCompile(t *testing.T, spec Spec, walk []byte) {
	g, err := compileLazy(spec, fuzzVocab(t), Options{})
	if err != nil {
		if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrEmpty) {
			t.Fatalf("error of no known kind: %v", err)
		}
		return
	}
	checkCompiled(t, g, walk)
}

var fuzzVocabCache *Vocabulary

func fuzzVocab(t *testing.T) *Vocabulary {
	if fuzzVocabCache == nil {
		fuzzVocabCache = testVocab(t)
	}
	return fuzzVocabCache
}

func FuzzSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"string","maxLength":3}},"required":["a"]}`,
		`{"anyOf":[{"type":"integer","minimum":-2.5,"exclusiveMaximum":1e2},{"enum":[null,"x",[1]]}]}`,
		`{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"$ref":"#/$defs/n"}`,
		`{"allOf":[{"properties":{"a":{"minimum":1}}},{"properties":{"a":{"type":"integer"}},"additionalProperties":false}]}`,
		`{"type":"string","pattern":"^(ab|c)+\\d?$","format":"date"}`,
		`{"prefixItems":[{"const":1}],"items":false}`,
		`{"oneOf":[{"type":"string"},{"type":"number","maximum":0}]}`,
	} {
		f.Add(s, []byte("\x03\x07\x10\x01"))
	}
	f.Fuzz(func(t *testing.T, schema string, walk []byte) {
		fuzzCompile(t, Spec{Kind: JSONSchema, Text: schema}, walk)
	})
}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`[a-z]+\d{2,3}`, `(a|bc)*?x`, `^\w+@[^\s]+$`, `[^\x00-\x7f]{1,2}.`, `\u00e9|\u{1F600}`, `a{2,}b?`} {
		f.Add(s, []byte("\x02\x05"))
	}
	f.Fuzz(func(t *testing.T, re string, walk []byte) {
		fuzzCompile(t, Spec{Kind: Regex, Text: re}, walk)
		// As a JSON Schema pattern too: a search, inside a JSON string.
		if s, err := canonicalJSON(re); err == nil {
			fuzzCompile(t, Spec{Kind: JSONSchema, Text: `{"type":"string","pattern":` + s + `}`}, walk)
		}
	})
}

func FuzzGBNF(f *testing.F) {
	for _, s := range []string{
		"root ::= (\"a\" | [b-d]+)* tail\ntail ::= \"x\"{1,3} # end\n",
		`root ::= "[" (item ("," item)*)? "]"
item ::= [0-9]+ | root`,
		"root ::= [^\"\\\\] . \"\\u00e9\\n\"",
	} {
		f.Add(s, []byte("\x09\x01\x04"))
	}
	f.Fuzz(func(t *testing.T, src string, walk []byte) {
		fuzzCompile(t, Spec{Kind: GBNF, Text: src}, walk)
	})
}

// FuzzMatcher feeds random token ids (allowed or not) to matchers of a few grammars, with
// rollbacks: nothing may panic, and Accept must agree with the mask.
func FuzzMatcher(f *testing.F) {
	f.Add(uint8(0), []byte("\x7b\x22\x01\xff\x10"))
	f.Add(uint8(3), []byte("abc\x00\x7f\x80"))
	specs := []Spec{
		{Kind: JSONObject},
		{Kind: JSONSchema, Text: `{"type":"object","properties":{"name":{"type":"string","maxLength":4},"n":{"type":"number","minimum":0}}}`},
		{Kind: Regex, Text: `[a-c]+(x|y)?\d`},
		{Kind: GBNF, Text: `root ::= "(" root ")" | [a-z]*`},
		{Kind: Choice, Choices: []string{"yes", "no"}},
	}
	f.Fuzz(func(t *testing.T, which uint8, ops []byte) {
		v := fuzzVocab(t)
		g, err := compileLazy(specs[int(which)%len(specs)], v, Options{})
		if err != nil {
			t.Fatal(err)
		}
		m := g.NewMatcher()
		mask := make([]uint64, v.MaskWords())
		for i := 0; i+1 < len(ops); i += 2 {
			if ops[i] == 0xff {
				m.Rollback(int(ops[i+1] % 4))
				continue
			}
			id := int32(ops[i])<<1 | int32(ops[i+1]&1)
			id %= int32(v.size)
			m.Mask(mask)
			allowed := mask[id>>6]&(1<<(id&63)) != 0
			if err := m.Accept(id); (err == nil) != allowed {
				t.Fatalf("token %d: mask says %v, Accept %v", id, allowed, err)
			}
			_ = m.Complete()
			_ = m.Done()
		}
	})
}
