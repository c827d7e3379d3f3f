package chattemplate

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// Python's str case methods map each character by Unicode's full case mapping: the simple mapping of
// UnicodeData, which Go's unicode package has, except where SpecialCasing gives several characters
// or another one unconditionally ('ß'.upper() is "SS", 'ﬁ'.upper() "FI", 'İ'.lower() is "i̇",
// 'ǆ'.title() "ǅ", 'ᾳ'.upper() "ΑΙ"). str.lower adds one context rule, final sigma: 'Σ' lowers to
// 'ς' after a cased character (case-ignorable ones between skipped) not followed by another. The
// language-specific rules of SpecialCasing (Turkish, Lithuanian) are not Python's.

// fullCaseTable holds the characters whose full upper-, lower- or titlecase mapping is not the
// simple one, with that mapping.
type fullCaseTable struct{ upper, lower, title map[rune]string }

// fullCase is the table, filled once from golang.org/x/text/cases (which implements SpecialCasing)
// over the letters of the categories Lu, Ll and Lt, the only characters SpecialCasing maps.
var fullCase = sync.OnceValue(func() *fullCaseTable {
	t := &fullCaseTable{map[rune]string{}, map[rune]string{}, map[rune]string{}}
	upper, lower, title := cases.Upper(language.Und), cases.Lower(language.Und), cases.Title(language.Und)
	add := func(r rune) {
		s := string(r)
		if u := upper.String(s); u != string(unicode.ToUpper(r)) {
			t.upper[r] = u
		}
		if l := lower.String(s); l != string(unicode.ToLower(r)) {
			t.lower[r] = l
		}
		if ti := title.String(s); ti != string(unicode.ToTitle(r)) {
			t.title[r] = ti
		}
	}
	for _, tab := range []*unicode.RangeTable{unicode.Lu, unicode.Ll, unicode.Lt} {
		for _, rng := range tab.R16 {
			for r := rune(rng.Lo); r <= rune(rng.Hi); r += rune(rng.Stride) {
				add(r)
			}
		}
		for _, rng := range tab.R32 {
			for r := rune(rng.Lo); r <= rune(rng.Hi); r += rune(rng.Stride) {
				add(r)
			}
		}
	}
	return t
})

// caseKind is one of the full mappings.
type caseKind int

const (
	toUpper caseKind = iota
	toLower
	toTitle
)

// writeCase writes r's full mapping of kind to b.
func writeCase(b *strings.Builder, r rune, kind caseKind) {
	if r < utf8.RuneSelf {
		switch {
		case kind == toLower && 'A' <= r && r <= 'Z':
			r += 'a' - 'A'
		case kind != toLower && 'a' <= r && r <= 'z':
			r -= 'a' - 'A'
		}
		b.WriteByte(byte(r))
		return
	}
	t := fullCase()
	special := t.upper
	switch kind {
	case toLower:
		special = t.lower
	case toTitle:
		special = t.title
	}
	if s, ok := special[r]; ok {
		b.WriteString(s)
		return
	}
	switch kind {
	case toUpper:
		r = unicode.ToUpper(r)
	case toLower:
		r = unicode.ToLower(r)
	default:
		r = unicode.ToTitle(r)
	}
	b.WriteRune(r)
}

// isCased is Unicode's Cased property: the Lowercase, Uppercase and titlecase characters.
func isCased(r rune) bool { return pyIsLower(r) || pyIsUpper(r) || unicode.IsTitle(r) }

// isCaseIgnorable is Unicode's Case_Ignorable property: the categories Mn, Me, Cf, Lm and Sk and the
// characters of Word_Break MidLetter, MidNumLet and Single_Quote.
func isCaseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', 0xb7, 0x387, 0x55f, 0x5f4, 0x2018, 0x2019, 0x2024, 0x2027, 0xfe13, 0xfe52, 0xfe55, 0xff07, 0xff0e, 0xff1a:
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// writeLower writes the full lowercase mapping of runes[i] to b, with Python's final-sigma rule:
// 'Σ' becomes 'ς' when a cased character comes before it and none after it (case-ignorable
// characters skipped both ways).
func writeLower(b *strings.Builder, runes []rune, i int) {
	if runes[i] != 'Σ' {
		writeCase(b, runes[i], toLower)
		return
	}
	j := i - 1
	for j >= 0 && isCaseIgnorable(runes[j]) {
		j--
	}
	final := j >= 0 && isCased(runes[j])
	if final {
		j = i + 1
		for j < len(runes) && isCaseIgnorable(runes[j]) {
			j++
		}
		final = j == len(runes) || !isCased(runes[j])
	}
	if final {
		b.WriteRune('ς')
	} else {
		b.WriteRune('σ')
	}
}

// isASCII reports whether s has only ASCII characters.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// pyUpper is Python's str.upper.
func pyUpper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	var b strings.Builder
	for _, r := range s {
		writeCase(&b, r, toUpper)
	}
	return b.String()
}

// pyLower is Python's str.lower.
func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	runes := []rune(s)
	var b strings.Builder
	for i := range runes {
		writeLower(&b, runes, i)
	}
	return b.String()
}

// pyCapitalize is Python's str.capitalize: the first character titlecased, the rest lowercased.
func pyCapitalize(s string) string {
	runes := []rune(s)
	var b strings.Builder
	for i, r := range runes {
		if i == 0 {
			writeCase(&b, r, toTitle)
		} else {
			writeLower(&b, runes, i)
		}
	}
	return b.String()
}

// pyTitle is Python's str.title: a character after a cased one is lowercased, any other titlecased.
func pyTitle(s string) string {
	runes := []rune(s)
	var b strings.Builder
	prevCased := false
	for i, r := range runes {
		if prevCased {
			writeLower(&b, runes, i)
		} else {
			writeCase(&b, r, toTitle)
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// pySwapcase is Python's str.swapcase: Uppercase characters lowercased, Lowercase ones uppercased.
func pySwapcase(s string) string {
	runes := []rune(s)
	var b strings.Builder
	for i, r := range runes {
		switch {
		case pyIsUpper(r):
			writeLower(&b, runes, i)
		case pyIsLower(r):
			writeCase(&b, r, toUpper)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pyCasefold is Python's str.casefold: Unicode's full case folding, which golang.org/x/text/cases
// implements, but for Cherokee: Unicode folds its letters to the capitals (which came first), where
// x/text folds them to the small letters.
func pyCasefold(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	return strings.Map(func(r rune) rune {
		if 0x13f8 <= r && r <= 0x13fd || 0xab70 <= r && r <= 0xabbf {
			return unicode.ToUpper(r)
		}
		return r
	}, cases.Fold().String(s))
}

// pyIsLowerString and pyIsUpperString are Python's str.islower and str.isupper: some cased character,
// and none of the other case (titlecase characters count as upper for islower and as lower for
// isupper).
func pyIsLowerString(s string) bool { return pyCasedOnly(s, pyIsLower, pyIsUpper) }

func pyIsUpperString(s string) bool { return pyCasedOnly(s, pyIsUpper, pyIsLower) }

// pyCasedOnly reports whether s has a character of case is and none of case other or titlecase.
func pyCasedOnly(s string, is, other func(rune) bool) bool {
	cased := false
	for _, r := range s {
		if other(r) || unicode.IsTitle(r) {
			return false
		}
		cased = cased || is(r)
	}
	return cased
}
