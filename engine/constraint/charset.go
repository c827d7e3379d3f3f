package constraint

import (
	"slices"
	"unicode/utf8"
)

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// runeSet is a set of Unicode scalar values: sorted, disjoint, non-adjacent ranges.
type runeSet []runeRange

// anyRune holds every Unicode scalar value (the surrogates D800-DFFF are not characters).
var anyRune = runeSet{{0, 0xD7FF}, {0xE000, utf8.MaxRune}}

// newRuneSet normalizes ranges into a runeSet (sorted, merged, surrogates removed).
func newRuneSet(rs ...runeRange) runeSet {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b runeRange) int { return int(a.lo - b.lo) })
	var out runeSet
	for _, r := range rs {
		if r.lo > r.hi {
			continue
		}
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out.intersect(anyRune)
}

// single returns the set holding r alone.
func single(r rune) runeSet { return newRuneSet(runeRange{r, r}) }

// union returns s ∪ t.
func (s runeSet) union(t runeSet) runeSet {
	return newRuneSet(append(slices.Clone(s), t...)...)
}

// intersect returns s ∩ t.
func (s runeSet) intersect(t runeSet) runeSet {
	var out runeSet
	i, j := 0, 0
	for i < len(s) && j < len(t) {
		lo, hi := max(s[i].lo, t[j].lo), min(s[i].hi, t[j].hi)
		if lo <= hi {
			out = append(out, runeRange{lo, hi})
		}
		if s[i].hi < t[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// negate returns the scalar values not in s.
func (s runeSet) negate() runeSet {
	var out runeSet
	next := rune(0)
	for _, r := range s {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return out.intersect(anyRune)
}

// minus returns s \ t.
func (s runeSet) minus(t runeSet) runeSet { return s.intersect(t.negate()) }

// byteRange is an inclusive range of byte values.
type byteRange struct{ lo, hi byte }

// utf8Sequences calls emit with the byte-range sequences whose concatenations are exactly the
// UTF-8 encodings of the scalar values in [lo, hi]: each sequence matches one encoded length and
// splits where the encodings' continuation bytes stop covering their full range.
func utf8Sequences(lo, hi rune, emit func([]byteRange)) {
	if lo > hi {
		return
	}
	if lo < 0xD800 && hi > 0xDFFF {
		utf8Sequences(lo, 0xD7FF, emit)
		utf8Sequences(0xE000, hi, emit)
		return
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	if lo > hi {
		return
	}
	for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && hi > m {
			utf8Sequences(lo, m, emit)
			utf8Sequences(m+1, hi, emit)
			return
		}
	}
	if hi < utf8.RuneSelf {
		emit([]byteRange{{byte(lo), byte(hi)}})
		return
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, emit)
				utf8Sequences((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, hi&^m-1, emit)
				utf8Sequences(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [utf8.UTFMax]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([]byteRange, n)
	for i := range n {
		seq[i] = byteRange{a[i], b[i]}
	}
	emit(seq)
}

// jsonEscape returns how a JSON string writes r when r cannot appear raw (a quote, a backslash, a
// control character), as encoding/json and JSON.stringify write it; "" when r is written raw.
func jsonEscape(r rune) string {
	switch r {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return `\u00` + string(hex[r>>4]) + string(hex[r&15])
	}
	return ""
}

// jsonSpecial are the characters a JSON string must escape.
var jsonSpecial = newRuneSet(runeRange{0, 0x1F}, runeRange{'"', '"'}, runeRange{'\\', '\\'})
