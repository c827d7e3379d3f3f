package constraint

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Special-token terminals (Spec.SpecialTokens) and AnyOf, on a vocabulary whose special tokens
// are Mistral's [TOOL_CALLS] and [ARGS] and that also has their texts as ordinary tokens.

const (
	specTools = "[TOOL_CALLS]"
	specArgs  = "[ARGS]"
)

// specialVocab is testVocab's tokens, the texts "[TOOL_CALLS]" and "[ARGS]" as ordinary tokens, and
// then special tokens (no bytes): the ids of [TOOL_CALLS] and [ARGS], and an EOS.
func specialVocab(t testing.TB) (v *Vocabulary, toolCalls, args, eos int32) {
	t.Helper()
	var l listSource
	for b := range 256 {
		l = append(l, string([]byte{byte(b)}))
	}
	l = append(l, `{"`, `":`, `"}`, `get_`, `weather`, `time`, specTools, specArgs, "[", "]", "\xff\xff", "a\xff")
	toolCalls, args, eos = int32(len(l)), int32(len(l)+1), int32(len(l)+2)
	v, err := NewVocabulary(l, len(l)+3)
	if err != nil {
		t.Fatal(err)
	}
	return v, toolCalls, args, eos
}

// specialTokens writes text as a token sequence of v: each "[TOOL_CALLS]" and "[ARGS]" as the
// special token, the rest one token a byte (as written with the texts' ordinary tokens when plain).
func specialTokens(text string, toolCalls, args int32, plain bool) []int32 {
	var ids []int32
	for len(text) > 0 {
		switch {
		case !plain && strings.HasPrefix(text, specTools):
			ids, text = append(ids, toolCalls), text[len(specTools):]
		case !plain && strings.HasPrefix(text, specArgs):
			ids, text = append(ids, args), text[len(specArgs):]
		default:
			ids, text = append(ids, int32(text[0])), text[1:]
		}
	}
	return ids
}

// acceptsIDs reports whether g takes ids, checking each against the mask, and is complete after.
func acceptsIDs(t *testing.T, g *Grammar, ids []int32) bool {
	t.Helper()
	m := g.NewMatcher()
	mask := make([]uint64, g.vocab.MaskWords())
	for _, id := range ids {
		m.Mask(mask)
		allowed := mask[id>>6]&(1<<(id&63)) != 0
		err := m.Accept(id)
		if allowed != (err == nil) {
			t.Fatalf("token %d: mask says %v, Accept %v", id, allowed, err)
		}
		if err != nil {
			return false
		}
	}
	return m.Complete()
}

// toolSpec is the constraint of Mistral's newer tool-call form: after a [TOOL_CALLS] that ends the
// prompt, name[ARGS]{arguments}, and up to maxCalls calls, each after its own [TOOL_CALLS].
func toolSpec(toolCalls, args int32, maxCalls int, names ...string) Spec {
	params := map[string]string{
		"get_weather": `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`,
		"get_time":    `{"type":"object","properties":{},"additionalProperties":false}`,
	}
	spec := Spec{Kind: AnyOf, Separator: specTools, MaxRepeat: maxCalls,
		SpecialTokens: map[string]int32{specTools: toolCalls, specArgs: args}}
	for _, n := range names {
		spec.Alternatives = append(spec.Alternatives, Spec{Kind: JSONSchema, Text: params[n], Prefix: n + specArgs})
	}
	return spec
}

func TestSpecialTokenTerminals(t *testing.T) {
	v, toolCalls, args, eos := specialVocab(t)
	for _, tc := range []struct {
		name      string
		spec      Spec
		good, bad []string
		badPlain  []string // refused when the special tokens' texts are written as ordinary tokens
	}{
		{"prefix", Spec{Kind: Regex, Text: "[a-z]+", Prefix: specArgs, SpecialTokens: map[string]int32{specArgs: args}},
			[]string{"[ARGS]abc"}, []string{"abc", "[ARGS]", "[ARGS][ARGS]a"}, []string{"[ARGS]abc"}},
		{"mid-literal", Spec{Kind: Choice, Choices: []string{"x"}, Prefix: "a[ARGS]b", Suffix: "[TOOL_CALLS]",
			SpecialTokens: map[string]int32{specArgs: args, specTools: toolCalls}},
			[]string{"a[ARGS]bx[TOOL_CALLS]"}, []string{"abx", "a[ARGS]bx"}, []string{"a[ARGS]bx[TOOL_CALLS]"}},
		{"required", toolSpec(toolCalls, args, 3, "get_weather", "get_time"),
			[]string{`get_weather[ARGS]{"city":"Paris"}`, `get_time[ARGS]{}`,
				`get_weather[ARGS]{"city":"Paris"}[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS] {"city": "Rome"}`},
			[]string{``, `get_weather{"city":"Paris"}`, `get_weather[ARGS]{}`, `get_weather[ARGS]{"town":"Paris"}`,
				`run[ARGS]{}`, `get_time[ARGS]{}get_time[ARGS]{}`, `get_time[ARGS]{}[TOOL_CALLS]`,
				`[{"name": "get_time", "arguments": {}}]`, `get_time[ARGS]{}[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_time[ARGS]{}`},
			[]string{`get_time[ARGS]{}`}},
		{"named", toolSpec(toolCalls, args, 1, "get_weather"),
			[]string{`get_weather[ARGS]{"city":"Paris"}`},
			[]string{`get_time[ARGS]{}`, `get_weather[ARGS]{"city":"Paris"}[TOOL_CALLS]get_weather[ARGS]{"city":"Paris"}`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := compileT(t, tc.spec, v)
			for _, s := range tc.good {
				if !acceptsIDs(t, g, specialTokens(s, toolCalls, args, false)) {
					t.Errorf("refuses %q", s)
				}
			}
			for _, s := range tc.bad {
				if acceptsIDs(t, g, specialTokens(s, toolCalls, args, false)) {
					t.Errorf("accepts %q", s)
				}
			}
			for _, s := range append(tc.badPlain, tc.good...) {
				if strings.Contains(s, "[") && acceptsIDs(t, g, specialTokens(s, toolCalls, args, true)) {
					t.Errorf("accepts %q with the special tokens' texts as ordinary tokens", s)
				}
			}
			// The mask is the tokens Accept takes, special tokens and all, on random walks.
			rng := rand.New(rand.NewPCG(1, 2))
			for range 20 {
				randomWalk(t, g, rng, 40, 0.2)
			}
		})
	}

	// Where no special token is named, none is allowed, nor a token with the escape byte.
	g := compileT(t, toolSpec(toolCalls, args, 2, "get_time"), v)
	m := g.NewMatcher()
	for _, id := range specialTokens("get_time[ARGS]{}", toolCalls, args, false) {
		if err := m.Accept(id); err != nil {
			t.Fatal(err)
		}
	}
	mask := make([]uint64, v.MaskWords())
	m.Mask(mask)
	if mask[toolCalls>>6]&(1<<(toolCalls&63)) == 0 || mask[args>>6]&(1<<(args&63)) != 0 || mask[eos>>6]&(1<<(eos&63)) != 0 {
		t.Errorf("after a call: [TOOL_CALLS] allowed %v, [ARGS] %v, EOS %v; want only [TOOL_CALLS]",
			mask[toolCalls>>6]&(1<<(toolCalls&63)) != 0, mask[args>>6]&(1<<(args&63)) != 0, mask[eos>>6]&(1<<(eos&63)) != 0)
	}
	if err := m.Accept(eos); err == nil {
		t.Error("accepts EOS, a special token the constraint does not name")
	}
	for id := range int32(v.Size()) {
		if b := v.tokens[id]; b != nil && !v.special(id) && slices.Contains(b, specialEscape) {
			t.Errorf("token %d (%q) has the escape byte", id, b)
		}
	}
}

func TestSpecialTokenErrors(t *testing.T) {
	v, toolCalls, args, _ := specialVocab(t)
	word := int32('a')
	for _, tc := range []struct {
		name string
		spec Spec
		want error
	}{
		{"not special", Spec{Kind: Regex, Text: "a", Prefix: "[X]", SpecialTokens: map[string]int32{"[X]": word}}, ErrSyntax},
		{"outside", Spec{Kind: Regex, Text: "a", Prefix: "[X]", SpecialTokens: map[string]int32{"[X]": int32(v.Size())}}, ErrSyntax},
		{"empty text", Spec{Kind: Regex, Text: "a", SpecialTokens: map[string]int32{"": args}}, ErrSyntax},
		{"nested not special", Spec{Kind: AnyOf, Alternatives: []Spec{{Kind: Regex, Text: "a", SpecialTokens: map[string]int32{"[X]": word}}}}, ErrSyntax},
		{"no alternatives", Spec{Kind: AnyOf}, ErrSyntax},
		{"bad alternative", Spec{Kind: AnyOf, Alternatives: []Spec{{Kind: Regex, Text: "a"}, {Kind: Regex, Text: "("}}}, ErrSyntax},
		{"prefix not UTF-8", Spec{Kind: Regex, Text: "a", Prefix: "\xff\x00\x00\x01\x00"}, ErrSyntax},
		{"choice not UTF-8", Spec{Kind: Choice, Choices: []string{"\xff"}}, ErrSyntax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Compile(tc.spec, v, Options{}); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	deep := Spec{Kind: Regex, Text: "a"}
	for range maxSpecDepth + 1 {
		deep = Spec{Kind: AnyOf, Alternatives: []Spec{deep}}
	}
	if _, err := Compile(deep, v, Options{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("alternatives nested too deep: %v", err)
	}
	// An alternative's special tokens are its own; the Spec around it does not see them.
	inner := Spec{Kind: AnyOf, Prefix: specArgs, Alternatives: []Spec{{Kind: Regex, Text: "a", Prefix: specArgs, SpecialTokens: map[string]int32{specArgs: args}}}}
	g := compileT(t, inner, v)
	if !acceptsIDs(t, g, append(specialTokens(specArgs, toolCalls, args, true), args, 'a')) {
		t.Error("the outer prefix is not the text, or the inner not the token")
	}
}

// TestCacheSpecialKey: specs that differ only in their alternatives or special tokens are
// different entries of the cache.
func TestCacheSpecialKey(t *testing.T) {
	v, toolCalls, args, _ := specialVocab(t)
	c := NewCache(8)
	specs := []Spec{
		toolSpec(toolCalls, args, 1, "get_time"),
		toolSpec(toolCalls, args, 1, "get_weather"),
		toolSpec(toolCalls, args, 1, "get_time", "get_weather"),
		toolSpec(args, toolCalls, 1, "get_time"),
		{Kind: AnyOf, Alternatives: []Spec{{Kind: JSONSchema, Text: `{"type":"object","properties":{},"additionalProperties":false}`, Prefix: "get_time" + specArgs}}},
	}
	seen := map[*Grammar]int{}
	for i, s := range specs {
		g, err := c.Compile(s, v, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if j, ok := seen[g]; ok {
			t.Errorf("specs %d and %d share a cache entry", j, i)
		}
		seen[g] = i
		if again, _ := c.Compile(s, v, Options{}); again != g {
			t.Errorf("spec %d compiled twice", i)
		}
	}
}

// TestSpecialTokenRealVocab: on real vocabularies (byte-level BPE, whose byte tokens include 0xFF),
// a special-token terminal allows exactly that token where it stands, and the text after it as the
// tokenizer encodes it.
func TestSpecialTokenRealVocab(t *testing.T) {
	for _, tc := range []struct{ vocab, special string }{
		{"llama3", "<|start_header_id|>"},
		{"qwen3", "<|im_start|>"},
	} {
		t.Run(tc.vocab, func(t *testing.T) {
			rv := loadRealVocab(t, tc.vocab)
			ids := rv.tok.Encode(tc.special, false)
			if len(ids) != 1 || !rv.vocab.special(ids[0]) {
				t.Fatalf("%s encodes to %v, not one special token", tc.special, ids)
			}
			id := ids[0]
			g := compileT(t, Spec{Kind: JSONObject, Prefix: tc.special, SpecialTokens: map[string]int32{tc.special: id}}, rv.vocab)
			m := g.NewMatcher()
			mask := make([]uint64, rv.vocab.MaskWords())
			m.Mask(mask)
			if n := maskCount(mask); n != 1 || mask[id>>6]&(1<<(id&63)) == 0 {
				t.Fatalf("at the start %d tokens allowed, want %s (%d) alone", n, tc.special, id)
			}
			text := `{"a": [1, "ÿ東京"]}`
			for _, tok := range append([]int32{id}, rv.tok.Encode(text, false)...) {
				if err := m.Accept(tok); err != nil {
					t.Fatal(err)
				}
			}
			if !m.Complete() {
				t.Error("not complete")
			}
			if plain := compileT(t, Spec{Kind: JSONObject, Prefix: tc.special}, rv.vocab); plain.NewMatcher().Accept(id) == nil {
				t.Errorf("%s's text as a plain prefix takes the special token", tc.special)
			}
		})
	}
}
