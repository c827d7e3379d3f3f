package constraint

import (
	"errors"
	"testing"
)

// TestGBNFRepetitionBlanks: as in llama.cpp's parser, blanks and comments may come before a
// repetition operator and inside its braces (newlines too inside parentheses), and operators may
// follow one another; at the top level a newline still ends the rule.
func TestGBNFRepetitionBlanks(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		accept []string
		reject []string
	}{
		{"star", `root ::= "x" *`, []string{"", "x", "xxx"}, []string{"y", "xy"}},
		{"plus-group", `root ::= ("a" | "b") +`, []string{"a", "ab", "bba"}, []string{"", "c"}},
		{"optional", `root ::= "a" ?  "b"`, []string{"b", "ab"}, []string{"a", "aab"}},
		{"tab", "root ::= \"a\"\t+", []string{"a", "aa"}, []string{""}},
		{"braces", `root ::= [0-9] {2,3}`, []string{"12", "123"}, []string{"1", "1234"}},
		{"braces-inner", `root ::= [0-9]{ 2 , 3 }`, []string{"12", "123"}, []string{"1", "1234"}},
		{"braces-open", `root ::= [0-9] { 2, }`, []string{"12", "12345"}, []string{"1"}},
		{"braces-exact", `root ::= [0-9] {2}`, []string{"12"}, []string{"1", "123"}},
		{"ref", "root ::= x *\nx ::= \"ab\"", []string{"", "abab"}, []string{"a", "aba"}},
		{"nested-newline", "root ::= ( \"a\"\n  * )", []string{"", "aa"}, []string{"b"}},
		{"nested-comment", "root ::= (\"a\" # many\n * \"b\")", []string{"b", "aab"}, []string{"a", "ba"}},
		{"stacked", `root ::= "a"+ ?`, []string{"", "a", "aa"}, []string{"b"}},
		{"stacked-spaced", `root ::= "ab" * {0,1} "c"`, []string{"c", "ababc"}, []string{"ac"}},
	}
	v := testVocab(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := compileT(t, Spec{Kind: GBNF, Text: tc.src}, v)
			checkMatches(t, g, tc.accept, tc.reject)
		})
	}
	for _, src := range []string{
		"root ::= \"x\"\n*",     // a newline ends the rule at the top level
		"root ::= \"x\" # c\n+", // so does a comment's
		`root ::= *`,            // nothing to repeat
		`root ::= "a" | * "b"`,  // nor here
		`root ::= "a" { 1, 2`,   // unclosed
		`root ::= "a" {,2}`,     // no lower count
		`root ::= "a" {3,1}`,    // out of order
		`root ::= "a" {1 2}`,    // no comma
	} {
		if _, err := Compile(Spec{Kind: GBNF, Text: src}, v, Options{}); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: %v, want a syntax error", src, err)
		}
	}
}
