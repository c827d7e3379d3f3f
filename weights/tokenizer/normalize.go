package tokenizer

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites the text of a segment between added tokens before pre-tokenization.
// Offsets are not tracked: gollm needs ids, not alignments.
type normalizer interface {
	normalize(s string) string
}

// unicodeNormalizer is NFC, NFD, NFKC or NFKD.
type unicodeNormalizer struct{ form norm.Form }

func (n unicodeNormalizer) normalize(s string) string {
	if n.form.IsNormalString(s) {
		return s
	}
	return n.form.String(s)
}

// prependNormalizer adds a prefix to non-empty text.
type prependNormalizer struct{ prefix string }

func (n prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

// replaceNormalizer replaces every match of a pattern (string or regex) with content.
type replaceNormalizer struct {
	pattern pattern
	content string
}

func (n replaceNormalizer) normalize(s string) string { return replaceAll(s, n.pattern, n.content) }

func replaceAll(s string, p pattern, content string) string {
	if lit, ok := p.(literalPattern); ok {
		if lit == "" {
			return s
		}
		return strings.ReplaceAll(s, string(lit), content)
	}
	var sb strings.Builder
	p.findMatches(s, func(start, end int, isMatch bool) {
		if isMatch {
			sb.WriteString(content)
		} else {
			sb.WriteString(s[start:end])
		}
	})
	return sb.String()
}

// lowercaseNormalizer lower-cases rune by rune like Rust's char::to_lowercase: the simple case
// mapping plus SpecialCasing's one unconditional expansion, U+0130 → "i\u0307"; no final-sigma rule.
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	for _, r := range s {
		if r == '\u0130' {
			sb.WriteString("i\u0307")
			continue
		}
		sb.WriteRune(unicode.ToLower(r))
	}
	return sb.String()
}

// stripNormalizer removes leading and/or trailing white space.
type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// sequenceNormalizer applies normalizers in order.
type sequenceNormalizer []normalizer

func (seq sequenceNormalizer) normalize(s string) string {
	for _, n := range seq {
		s = n.normalize(s)
	}
	return s
}
