package engine

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/gollm/gollm/engine/constraint"
)

// byteSource gives the byteTokenizer's token bytes: ids below 256 are bytes, the rest special.
type byteSource struct{}

func (byteSource) TokenBytes(id int32) ([]byte, bool) {
	if id < 0 || id >= 256 {
		return nil, false
	}
	return []byte{byte(id)}, true
}

// TestConstraint: structured output on the tiny random model at temperature 1. Constrained requests
// (a JSON schema, a choice that ends without EOS, a regex with logprobs) share steps with
// unconstrained ones, whose tokens must not change; every constrained output that stops is valid,
// and logprobs stay those of the raw logits.
func TestConstraint(t *testing.T) {
	dir := writeTinyModel(t, 5)
	m := loadTinyModel(t, dir, 512, 8)
	e := newEngine(t, m, Config{})
	vocab, err := constraint.NewVocabulary(byteSource{}, 300)
	if err != nil {
		t.Fatal(err)
	}
	compile := func(spec constraint.Spec) *constraint.Grammar {
		g, err := constraint.Compile(spec, vocab, constraint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	schema := compile(constraint.Spec{Kind: constraint.JSONSchema, Text: `{"type":"object","properties":{
		"ok":{"type":"boolean"},"n":{"type":"integer","minimum":-5,"maximum":5},"s":{"type":"string","maxLength":4},
		"list":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},"required":["ok","n","s","list"],"additionalProperties":false}`})
	choice := compile(constraint.Spec{Kind: constraint.Choice, Choices: []string{"red", "green", "blue"}})
	regex := compile(constraint.Spec{Kind: constraint.Regex, Text: `[a-f]{3}-\d{2}`})

	prompt := []int32{256, 'j', 's', 'o', 'n'}
	plain := Request{PromptIDs: prompt, MaxTokens: 6, IgnoreEOS: true}
	base := runConcurrent(t, e, []Request{plain})[0]
	for round := range 8 {
		seed := uint64(round)
		sampled := SamplingParams{Temperature: 1, Seed: &seed}
		reqs := []Request{
			plain,
			{PromptIDs: prompt, MaxTokens: 120, Sampling: sampled, Constraint: schema.NewMatcher()},
			{PromptIDs: prompt, MaxTokens: 20, Sampling: sampled, Constraint: choice.NewMatcher(), IgnoreEOS: true},
			{PromptIDs: prompt, MaxTokens: 20, Sampling: sampled, Constraint: regex.NewMatcher(), Logprobs: true, TopLogprobs: 2},
		}
		got := runConcurrent(t, e, reqs)
		if !slices.Equal(got[0].ids, base.ids) {
			t.Errorf("round %d: unconstrained neighbour %v, want %v", round, got[0].ids, base.ids)
		}
		if got[1].reason == FinishStop {
			var v struct {
				OK   *bool    `json:"ok"`
				N    *int     `json:"n"`
				S    *string  `json:"s"`
				List []string `json:"list"`
			}
			if err := json.Unmarshal([]byte(got[1].text), &v); err != nil || v.OK == nil || v.N == nil || *v.N < -5 || *v.N > 5 ||
				v.S == nil || len([]rune(*v.S)) > 4 || len(v.List) > 3 {
				t.Errorf("round %d: schema output %q invalid (%v)", round, got[1].text, err)
			}
		}
		if got[2].reason != FinishStop || !slices.Contains([]string{"red", "green", "blue"}, got[2].text) {
			t.Errorf("round %d: choice output %q (%s)", round, got[2].text, got[2].reason)
		}
		if got[3].reason == FinishStop {
			if len(got[3].text) != 6 || got[3].text[3] != '-' {
				t.Errorf("round %d: regex output %q", round, got[3].text)
			}
		}
		// Raw logprobs: the alternatives include tokens the regex does not allow, and the chosen
		// token's rank counts them too.
		outside := false
		for _, lp := range got[3].logprobs {
			for _, top := range lp.Top {
				if top.ID >= 256 || !slices.Contains([]byte("abcdef0123456789-"), byte(top.ID)) {
					outside = true
				}
			}
		}
		if len(got[3].logprobs) != len(got[3].ids) || !outside {
			t.Errorf("round %d: %d logprobs for %d tokens, none outside the regex: masked, not raw", round, len(got[3].logprobs), len(got[3].ids))
		}
	}
	closeAndCheckPool(t, e)
}
