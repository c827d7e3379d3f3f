package constraint

import (
	"regexp"
	"testing"
)

// TestRepeatLoopPrivate: an unbounded repetition loops back to a state of its own, so that the
// loop cannot reach what else starts or ends where the repetition starts (an alternative beside
// it, the exit of an enclosing optional or repetition, a second use of its rule).
func TestRepeatLoopPrivate(t *testing.T) {
	tests := []struct {
		name   string
		spec   Spec
		accept []string
		reject []string
	}{
		{"gbnf-alt", Spec{Kind: GBNF, Text: `root ::= "a"* | "b"`},
			[]string{"", "aa", "b"}, []string{"ab", "aab", "ba"}},
		{"gbnf-alt-star-star", Spec{Kind: GBNF, Text: `root ::= "a"* | "b"*`},
			[]string{"", "aa", "bb"}, []string{"ab", "ba", "abab"}},
		{"gbnf-rule-twice", Spec{Kind: GBNF, Text: "root ::= x \"-\" x\nx ::= \"a\"* | \"b\"\n"},
			[]string{"-", "aa-b", "b-", "-a"}, []string{"ab-b", "b-ab", "ab-", "-ba"}},
		{"gbnf-opt", Spec{Kind: GBNF, Text: `root ::= ("a"* "b")?`},
			[]string{"", "b", "aab"}, []string{"a", "aa"}},
		{"gbnf-star", Spec{Kind: GBNF, Text: `root ::= ("a"* "b")*`},
			[]string{"", "b", "bab", "aabb"}, []string{"a", "ba", "aba"}},
		{"gbnf-plus", Spec{Kind: GBNF, Text: `root ::= ("a"* "b")+`},
			[]string{"b", "abab", "bb"}, []string{"", "ba", "aba"}},
		{"gbnf-bounded", Spec{Kind: GBNF, Text: `root ::= ("a"* "b"){0,3}`},
			[]string{"", "b", "abab", "bbb"}, []string{"a", "ba", "bbbb"}},
		{"gbnf-at-least", Spec{Kind: GBNF, Text: `root ::= ("a"* "b"){2,}`},
			[]string{"bb", "abab", "bbbb"}, []string{"b", "bba", "ab"}},
		{"regex-alt", Spec{Kind: Regex, Text: `(a*b|c)d`},
			[]string{"bd", "aabd", "cd"}, []string{"acd", "abdd"}},
		{"regex-opt", Spec{Kind: Regex, Text: `x(a*b)?y`},
			[]string{"xy", "xby", "xaaby"}, []string{"xay", "xaay"}},
		{"schema-pattern", Spec{Kind: JSONSchema, Text: `{"type":"string","pattern":"^(a*|b)$"}`},
			[]string{`""`, `"aa"`, `"b"`}, []string{`"ab"`, `"ba"`}},
		{"schema-items", Spec{Kind: JSONSchema, Text: `{"type":"array","items":{"type":"string","pattern":"^(x*y)?$"}}`},
			[]string{`[]`, `[""]`, `["xy","y"]`}, []string{`["x"]`, `["y","xx"]`}},
	}
	v := testVocab(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.spec.Kind == Regex { // the table agrees with Go's regexp (RE2)
				re := regexp.MustCompile(`^(?:` + tc.spec.Text + `)$`)
				for _, s := range tc.accept {
					if !re.MatchString(s) {
						t.Fatalf("regexp rejects %q", s)
					}
				}
				for _, s := range tc.reject {
					if re.MatchString(s) {
						t.Fatalf("regexp accepts %q", s)
					}
				}
			}
			g := compileT(t, tc.spec, v)
			checkMatches(t, g, tc.accept, tc.reject)
		})
	}
}
