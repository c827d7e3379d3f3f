package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// pattern finds where a string should be split: HuggingFace's Pattern::find_matches. findMatches
// calls emit with consecutive spans covering s, each marked as a match of the pattern or not.
type pattern interface {
	findMatches(s string, emit func(start, end int, isMatch bool))
}

// literalPattern matches an exact string.
type literalPattern string

func (p literalPattern) findMatches(s string, emit func(start, end int, isMatch bool)) {
	if p == "" {
		if s != "" {
			emit(0, len(s), false)
		}
		return
	}
	prev := 0
	for prev < len(s) {
		i := strings.Index(s[prev:], string(p))
		if i < 0 {
			break
		}
		start := prev + i
		if start > prev {
			emit(prev, start, false)
		}
		emit(start, start+len(p), true)
		prev = start + len(p)
	}
	if prev < len(s) {
		emit(prev, len(s), false)
	}
}

// runePattern matches single runes for which match is true (Digits, Metaspace's split).
type runePattern func(r rune) bool

func (p runePattern) findMatches(s string, emit func(start, end int, isMatch bool)) {
	last := 0
	for i, r := range s {
		if p(r) {
			if last < i {
				emit(last, i, false)
			}
			end := i + utf8.RuneLen(r)
			emit(i, end, true)
			last = end
		}
	}
	if last < len(s) {
		emit(last, len(s), false)
	}
}

// invertedPattern swaps matches and non-matches (Split's "invert": true).
type invertedPattern struct{ inner pattern }

func (p invertedPattern) findMatches(s string, emit func(start, end int, isMatch bool)) {
	p.inner.findMatches(s, func(start, end int, isMatch bool) { emit(start, end, !isMatch) })
}

// regexPattern runs a regexp2 regular expression (the split patterns use look-ahead, which Go's
// regexp lacks). regexp2 reports rune offsets; they are converted to byte offsets incrementally, so a
// whole split is linear in the text (gotokenizers' splitpattern restarts from the string's start on
// every match, which is quadratic: 12 s on 160 KB).
type regexPattern struct{ re *regexp2.Regexp }

func compileRegexPattern(expr string) (regexPattern, error) {
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return regexPattern{}, err
	}
	return regexPattern{re: re}, nil
}

func (p regexPattern) findMatches(s string, emit func(start, end int, isMatch bool)) {
	if s == "" {
		return
	}
	runes := []rune(s)
	bytePos, runePos := 0, 0
	toByte := func(r int) int {
		for ; runePos < r; runePos++ {
			bytePos += utf8.RuneLen(runes[runePos])
		}
		return bytePos
	}
	prev := 0
	m, err := p.re.FindRunesMatch(runes)
	for m != nil && err == nil {
		start := toByte(m.Index)
		end := toByte(m.Index + m.Length)
		if start > prev {
			emit(prev, start, false)
		}
		emit(start, end, true)
		prev = end
		m, err = p.re.FindNextMatch(m)
	}
	if prev < len(s) {
		emit(prev, len(s), false)
	}
}

// The split patterns of well-known byte-level tokenizers, matched by fastPattern.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// fastPattern is a hand-written matcher for exactly the patterns above, about ten times faster
// than regexp2 on them. It follows the backtracking semantics of the regular expression alternative
// by alternative; FuzzFastPattern checks it against regexp2 on the same pattern text.
type fastPattern struct {
	gpt2      bool // the GPT-2 pattern; otherwise the Llama 3 / Qwen 2 family
	maxDigits int  // \p{N}{1,maxDigits}; 0 for \p{N}+ (GPT-2)
}

// lookupFastPattern returns the fast matcher for a pattern text, if there is one.
func lookupFastPattern(expr string) (fastPattern, bool) {
	switch expr {
	case gpt2Pattern:
		return fastPattern{gpt2: true}, true
	case llama3Pattern:
		return fastPattern{maxDigits: 3}, true
	case qwen2Pattern:
		return fastPattern{maxDigits: 1}, true
	}
	return fastPattern{}, false
}

// Character classes of the patterns, with an ASCII table in front of Go's Unicode tables
// (\s is White_Space, which is unicode.IsSpace, as in regexp2 and Oniguruma).
const (
	classLetter = 1 << iota
	classNumber
	classSpace
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range rune(utf8.RuneSelf) {
		switch {
		case unicode.IsLetter(r):
			t[r] = classLetter
		case unicode.IsNumber(r):
			t[r] = classNumber
		case unicode.IsSpace(r):
			t[r] = classSpace
		}
	}
	return t
}()

func runeClass(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return 0
}

// at decodes the rune at i, with its class; at the end of s it returns size 0.
func at(s string, i int) (r rune, size int, class uint8) {
	if i >= len(s) {
		return 0, 0, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, runeClass(r)
}

// scanClass returns the end of the run of runes of the given class starting at i.
func scanClass(s string, i int, class uint8) int {
	for i < len(s) {
		_, size, c := at(s, i)
		if c != class {
			break
		}
		i += size
	}
	return i
}

// scanOther returns the end of the run of [^\s\p{L}\p{N}] starting at i.
func scanOther(s string, i int) int { return scanClass(s, i, 0) }

func (p fastPattern) findMatches(s string, emit func(start, end int, isMatch bool)) {
	gap := -1
	for i := 0; i < len(s); {
		var end int
		if p.gpt2 {
			end = p.matchGPT2(s, i)
		} else {
			end = p.matchLlama3(s, i)
		}
		if end <= i {
			// No alternative matches here (cannot happen with these patterns, kept for safety).
			if gap < 0 {
				gap = i
			}
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			continue
		}
		if gap >= 0 {
			emit(gap, i, false)
			gap = -1
		}
		emit(i, end, true)
		i = end
	}
	if gap >= 0 {
		emit(gap, len(s), false)
	}
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i (s[i] == '\”) and returns its end, or -1.
func contraction(s string, i int, ignoreCase bool) int {
	lower := func(j int) byte {
		if j >= len(s) {
			return 0
		}
		c := s[j]
		if ignoreCase && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch c := lower(i + 1); c {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return i + 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return i + 3
		}
	}
	return -1
}

// matchSpaces handles the whitespace alternatives shared by both families at i (a space rune):
// optionally \s*[\r\n]+ (Llama 3), then \s+(?!\S), then \s+.
func matchSpaces(s string, i int, newlines bool) int {
	end, lastStart, lastNewline := i, i, -1
	for end < len(s) {
		r, size, c := at(s, end)
		if c != classSpace {
			break
		}
		if r == '\r' || r == '\n' {
			lastNewline = end
		}
		lastStart = end
		end += size
	}
	if newlines && lastNewline >= 0 {
		return lastNewline + 1
	}
	if end == len(s) || lastStart == i {
		return end
	}
	return lastStart
}

// matchLlama3 is (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,n}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ at i.
func (p fastPattern) matchLlama3(s string, i int) int {
	r, size, class := at(s, i)
	if r == '\'' {
		if end := contraction(s, i, true); end > 0 {
			return end
		}
	}
	switch class {
	case classLetter:
		return scanClass(s, i+size, classLetter)
	case classNumber:
		end := i + size
		for n := 1; n < p.maxDigits; n++ {
			_, sz, c := at(s, end)
			if c != classNumber {
				break
			}
			end += sz
		}
		return end
	}
	if r != '\r' && r != '\n' {
		if _, sz, c := at(s, i+size); c == classLetter {
			return scanClass(s, i+size+sz, classLetter)
		}
	}
	punct := i
	if r == ' ' {
		punct = i + 1
	}
	if _, sz, c := at(s, punct); sz > 0 && c == 0 {
		end := scanOther(s, punct+sz)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	if class == classSpace {
		return matchSpaces(s, i, true)
	}
	return -1
}

// matchGPT2 is 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ at i.
func (p fastPattern) matchGPT2(s string, i int) int {
	r, size, class := at(s, i)
	if r == '\'' {
		if end := contraction(s, i, false); end > 0 {
			return end
		}
	}
	start, c := i, class
	if r == ' ' {
		if _, sz, next := at(s, i+1); sz > 0 && next != classSpace {
			start, size, c = i+1, sz, next
		}
	}
	switch c {
	case classLetter, classNumber:
		return scanClass(s, start+size, c)
	case 0:
		return scanOther(s, start+size)
	}
	if class == classSpace {
		return matchSpaces(s, i, false)
	}
	return -1
}
