package tokenizer

import (
	"strings"
	"unicode"
)

// piece is a span of text on its way to the model.
type piece struct {
	text string
	// atStart reports that the piece begins at offset 0 of the original input (what HuggingFace
	// reads from offsets_original for Metaspace's prepend_scheme "first").
	atStart bool
}

// preTokenizer splits a piece into the words the model tokenizes one by one, calling emit for each
// non-empty word in order.
type preTokenizer interface {
	preTokenize(p piece, emit func(piece))
}

// splitBehavior is what HuggingFace's SplitDelimiterBehavior does with the matches of a pattern.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

// splitPiece splits p at the matches of pat, keeping, dropping or merging them as b says
// (HuggingFace's NormalizedString::split), and emits the non-empty parts.
func splitPiece(p piece, pat pattern, b splitBehavior, emit func(piece)) {
	s := p.text
	out := func(start, end int) {
		if end > start {
			emit(piece{text: s[start:end], atStart: p.atStart && start == 0})
		}
	}
	switch b {
	case splitIsolated:
		pat.findMatches(s, func(start, end int, _ bool) { out(start, end) })
		return
	case splitRemoved:
		pat.findMatches(s, func(start, end int, isMatch bool) {
			if !isMatch {
				out(start, end)
			}
		})
		return
	}
	type span struct {
		start, end int
		isMatch    bool
	}
	var spans []span
	pat.findMatches(s, func(start, end int, isMatch bool) { spans = append(spans, span{start, end, isMatch}) })
	var merged []span
	previousMatch := false
	switch b {
	case splitContiguous:
		for _, sp := range spans {
			if sp.isMatch == previousMatch && len(merged) > 0 {
				merged[len(merged)-1].end = sp.end
			} else {
				merged = append(merged, sp)
			}
			previousMatch = sp.isMatch
		}
	case splitMergedWithPrevious:
		for _, sp := range spans {
			if sp.isMatch && !previousMatch && len(merged) > 0 {
				merged[len(merged)-1].end = sp.end
			} else {
				merged = append(merged, sp)
			}
			previousMatch = sp.isMatch
		}
	case splitMergedWithNext:
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.isMatch && !previousMatch && len(merged) > 0 {
				merged[len(merged)-1].start = sp.start
			} else {
				merged = append(merged, sp)
			}
			previousMatch = sp.isMatch
		}
		for i, j := 0, len(merged)-1; i < j; i, j = i+1, j-1 {
			merged[i], merged[j] = merged[j], merged[i]
		}
	}
	for _, sp := range merged {
		out(sp.start, sp.end)
	}
}

// splitPreTokenizer is "Split": a string or regex pattern, a behaviour and an optional inversion.
type splitPreTokenizer struct {
	pattern  pattern
	behavior splitBehavior
}

func (s splitPreTokenizer) preTokenize(p piece, emit func(piece)) {
	splitPiece(p, s.pattern, s.behavior, emit)
}

// byteLevelPreTokenizer is "ByteLevel": an optional leading space, an optional split with the GPT-2
// pattern, then every byte mapped to a printable rune. When it is the tokenizer's last
// pre-tokenizer, mapBytes is false and the model reads the raw bytes instead (same result, less
// work).
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	useRegex       bool
	mapBytes       bool
}

var gpt2FastPattern, _ = lookupFastPattern(gpt2Pattern)

func (b *byteLevelPreTokenizer) preTokenize(p piece, emit func(piece)) {
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	final := emit
	if b.mapBytes {
		final = func(q piece) {
			q.text = byteLevelEncode(q.text)
			emit(q)
		}
	}
	if b.useRegex {
		splitPiece(p, gpt2FastPattern, splitIsolated, final)
		return
	}
	final(p)
}

// digitsPreTokenizer is "Digits": numbers split from the rest, each digit alone when individual.
type digitsPreTokenizer struct{ individual bool }

func (d digitsPreTokenizer) preTokenize(p piece, emit func(piece)) {
	b := splitContiguous
	if d.individual {
		b = splitIsolated
	}
	splitPiece(p, runePattern(unicode.IsNumber), b, emit)
}

// prependScheme is Metaspace's prepend_scheme.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspacePreTokenizer is "Metaspace": spaces become the replacement rune (▁), which is also
// prepended as the scheme says, and the text is split before each replacement rune when split is set.
type metaspacePreTokenizer struct {
	replacement rune
	scheme      prependScheme
	split       bool
}

func (m metaspacePreTokenizer) preTokenize(p piece, emit func(piece)) {
	rep := string(m.replacement)
	s := strings.ReplaceAll(p.text, " ", rep)
	if !strings.HasPrefix(s, rep) && (m.scheme == prependAlways || m.scheme == prependFirst && p.atStart) {
		s = rep + s
	}
	q := piece{text: s, atStart: p.atStart}
	if !m.split {
		emit(q)
		return
	}
	splitPiece(q, runePattern(func(r rune) bool { return r == m.replacement }), splitMergedWithNext, emit)
}

// sequencePreTokenizer applies pre-tokenizers in order, each to every piece of the previous.
type sequencePreTokenizer []preTokenizer

func (seq sequencePreTokenizer) preTokenize(p piece, emit func(piece)) {
	switch len(seq) {
	case 0:
		emit(p)
	case 1:
		seq[0].preTokenize(p, emit)
	default:
		rest := seq[1:]
		seq[0].preTokenize(p, func(q piece) { rest.preTokenize(q, emit) })
	}
}
