package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode"
)

// TestAddedTokenClasses: the single_word rule's word characters (isWordRune) and the lstrip and rstrip
// rules' white space (unicode.IsSpace) are the Rust regex crate's \w and \s, which HuggingFace's
// AddedVocabulary uses: \w is \p{Alphabetic}, \p{M}, \p{Nd}, \p{Pc} and \p{Join_Control}, \s is
// \p{White_Space}. testdata/unicode/classes.json holds those classes as Node's ICU has them
// (testdata/unicode/classes.mjs writes it); code points that Go's Unicode tables leave unassigned
// are skipped, since ICU's Unicode may be newer.
func TestAddedTokenClasses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "unicode", "classes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var classes struct {
		Unicode string    `json:"unicode"`
		Word    [][2]rune `json:"word"`
		Space   [][2]rune `json:"space"`
	}
	if err := json.Unmarshal(data, &classes); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		ranges [][2]rune
		is     func(rune) bool
	}{
		{"\\w (isWordRune)", classes.Word, isWordRune},
		{"\\s (unicode.IsSpace)", classes.Space, unicode.IsSpace},
	} {
		in := func(r rune) bool {
			i, found := slices.BinarySearchFunc(c.ranges, r, func(rg [2]rune, r rune) int {
				switch {
				case rg[1] < r:
					return -1
				case rg[0] > r:
					return 1
				}
				return 0
			})
			return found && c.ranges[i][0] <= r
		}
		bad := 0
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.Cc, unicode.Cf, unicode.Co) {
				continue // unassigned in Go's Unicode (or a surrogate)
			}
			if want := in(r); c.is(r) != want {
				if bad++; bad <= 10 {
					t.Errorf("%s: %U is %v, want %v (Unicode %s)", c.name, r, c.is(r), want, classes.Unicode)
				}
			}
		}
		if bad > 10 {
			t.Errorf("%s: %d code points in all", c.name, bad)
		}
	}
}

// TestSingleWordUnicode: a single_word added token next to a word character is not matched, with word
// characters as the regex crate's \w has them: letter numbers (Ⅰ, U+2160) and other alphabetic
// symbols (the circled letters Ⓐ, U+24B6, and ⓐ, U+24D0) included. The ids are HF tokenizers 0.23.2's.
func TestSingleWordUnicode(t *testing.T) {
	var f map[string]any
	if err := json.Unmarshal(tinyByteLevelJSON(t, false), &f); err != nil {
		t.Fatal(err)
	}
	const mask = 272 // after the tiny tokenizer's <|eot|>
	f["added_tokens"] = append(f["added_tokens"].([]any), map[string]any{"id": mask, "content": "<m>",
		"single_word": true, "lstrip": false, "rstrip": false, "normalized": false, "special": false})
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := tok.Token(mask); s != "<m>" {
		t.Fatalf("id %d is %q, want <m>", mask, s)
	}
	// The tiny vocabulary's ids of single bytes are the bytes; none of these merge.
	tests := []struct {
		text string
		want []int32
	}{
		{"Ⅰ<m>", []int32{0xE2, 0x85, 0xA0, '<', 'm', '>'}},
		{"<m>Ⓐ", []int32{'<', 'm', '>', 0xE2, 0x92, 0xB6}},
		{"ⓐ<m>", []int32{0xE2, 0x93, 0x90, '<', 'm', '>'}},
		{"ᾼ<m>", []int32{0xE1, 0xBE, 0xBC, '<', 'm', '>'}},
		{"x<m>", []int32{'x', '<', 'm', '>'}},
		{"Ⅰ <m> Ⓐ", []int32{0xE2, 0x85, 0xA0, ' ', mask, ' ', 0xE2, 0x92, 0xB6}},
		{"<m>", []int32{mask}},
	}
	for _, tc := range tests {
		if got := tok.Encode(tc.text, false); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}
