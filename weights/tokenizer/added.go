package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's "added_tokens".
type addedToken struct {
	id         int32
	content    string
	singleWord bool // match only when not inside a word
	lstrip     bool // also swallow white space on the left
	rstrip     bool // also swallow white space on the right
	normalized bool // match in the normalized text rather than the raw input
	special    bool // skipped by Decode(..., skipSpecial=true)
}

// addedMatcher finds added tokens in text the way HuggingFace's AddedVocabulary does: an
// Aho-Corasick search with leftmost-longest semantics, then the single_word, lstrip and rstrip rules.
type addedMatcher struct {
	tokens     []addedToken
	nodes      []trieNode
	firstBytes [256]bool
	onlyFirst  int // the one byte every token starts with, or -1
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into tokens, -1 when no token ends here
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{tokens: tokens, nodes: []trieNode{{token: -1}}, onlyFirst: -1}
	for i, tok := range tokens {
		if tok.content == "" {
			continue
		}
		n := int32(0)
		for j := 0; j < len(tok.content); j++ {
			c := tok.content[j]
			if m.nodes[n].next == nil {
				m.nodes[n].next = map[byte]int32{}
			}
			child, ok := m.nodes[n].next[c]
			if !ok {
				child = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{token: -1})
				m.nodes[n].next[c] = child
			}
			n = child
		}
		if m.nodes[n].token < 0 {
			m.nodes[n].token = int32(i)
		}
		m.firstBytes[tok.content[0]] = true
	}
	count := 0
	for b, ok := range m.firstBytes {
		if ok {
			count++
			m.onlyFirst = b
		}
	}
	if count != 1 {
		m.onlyFirst = -1
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.nodes) == 1 }

// longestAt returns the token index and end of the longest token starting at i, or -1. A token that
// skip refuses (given its index and the match's end) does not count; skip may be nil.
func (m *addedMatcher) longestAt(s string, i int, skip func(tok int32, end int) bool) (int32, int) {
	best, bestEnd := int32(-1), -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		child, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = child
		if t := m.nodes[n].token; t >= 0 && (skip == nil || !skip(t, j+1)) {
			best, bestEnd = t, j+1
		}
	}
	return best, bestEnd
}

// split calls emit for consecutive segments of s: plain text with id -1, or an added token with its
// id. Every byte of s is in exactly one segment, except the white space an lstrip or rstrip token
// swallows, which belongs to the token's segment.
func (m *addedMatcher) split(s string, emit func(start, end int, id int32)) {
	m.splitSkipping(s, nil, emit)
}

// splitSkipping is split with the matches skip refuses (given a token's index and the match's bytes
// [start, end)) left as plain text, as if those tokens were not added tokens; skip may be nil.
func (m *addedMatcher) splitSkipping(s string, skip func(tok int32, start, end int) bool, emit func(start, end int, id int32)) {
	if m.empty() || s == "" {
		emit(0, len(s), -1)
		return
	}
	last := 0
	for i := 0; i < len(s); {
		if m.onlyFirst >= 0 {
			k := indexByteFrom(s, i, byte(m.onlyFirst))
			if k < 0 {
				break
			}
			i = k
		} else if !m.firstBytes[s[i]] {
			i++
			continue
		}
		var skipAt func(tok int32, end int) bool
		if skip != nil {
			at := i
			skipAt = func(tok int32, end int) bool { return skip(tok, at, end) }
		}
		t, end := m.longestAt(s, i, skipAt)
		if t < 0 {
			i++
			continue
		}
		tok := &m.tokens[t]
		start, stop := i, end
		if tok.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				// Discarded; like HuggingFace's find_iter the search resumes after the match.
				i = end
				continue
			}
		}
		if tok.lstrip {
			start = max(trimRightSpaceIndex(s[:start]), last)
		}
		if tok.rstrip {
			stop += len(s[stop:]) - len(trimLeftSpace(s[stop:]))
		}
		if last < start {
			emit(last, start, -1)
		}
		emit(start, stop, tok.id)
		last = stop
		i = max(end, stop)
	}
	if last < len(s) {
		emit(last, len(s), -1)
	}
}

func indexByteFrom(s string, from int, c byte) int {
	for i := from; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// isWordRune is the Rust regex crate's Unicode \w, which HuggingFace's single_word rule uses: the
// Alphabetic property (letters, letter numbers and Other_Alphabetic, such as circled letters), marks,
// decimal digits, connector punctuation and the joiners (Join_Control).
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) ||
		unicode.In(r, unicode.M, unicode.Pc, unicode.Nl, unicode.Other_Alphabetic, unicode.Join_Control)
}

func endsWithWord(s string) bool {
	r, size := utf8.DecodeLastRuneInString(s)
	return size > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, size := utf8.DecodeRuneInString(s)
	return size > 0 && isWordRune(r)
}

// trimRightSpaceIndex returns where the trailing white space of s begins.
func trimRightSpaceIndex(s string) int {
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-size]
	}
	return len(s)
}

func trimLeftSpace(s string) string {
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[size:]
	}
	return s
}
