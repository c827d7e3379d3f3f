package tokenizer

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder turns token strings back into text: HuggingFace's Decoder::decode_chain, which maps a list
// of token strings to a list of strings; the text is their concatenation.
type decoder interface {
	decodeChain(tokens []string) []string
}

// byteLevelDecoder maps each token's runes back to bytes (a token with a rune outside the alphabet
// is taken as its UTF-8 bytes) and decodes them all as UTF-8, lossily.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	buf := make([]byte, 0, 8*len(tokens))
	for _, tok := range tokens {
		var ok bool
		if buf, ok = appendByteLevelBytes(buf, tok); !ok {
			buf = append(buf, tok...)
		}
	}
	return []string{string(appendLossyUTF8(make([]byte, 0, len(buf)), buf))}
}

// replaceDecoder replaces a pattern in every token.
type replaceDecoder struct {
	pattern pattern
	content string
}

func (d replaceDecoder) decodeChain(tokens []string) []string {
	for i, tok := range tokens {
		tokens[i] = replaceAll(tok, d.pattern, d.content)
	}
	return tokens
}

// byteFallbackDecoder turns runs of <0xNN> tokens into the text their bytes spell, or one U+FFFD
// per byte when the run is not valid UTF-8.
type byteFallbackDecoder struct{}

func byteFallbackValue(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(tok[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

func isByteFallbackToken(tok string) bool {
	_, ok := byteFallbackValue(tok)
	return ok
}

// hasByteFallback reports whether a decoder chain contains ByteFallback.
func hasByteFallback(d decoder) bool {
	switch d := d.(type) {
	case byteFallbackDecoder:
		return true
	case sequenceDecoder:
		for _, sub := range d {
			if hasByteFallback(sub) {
				return true
			}
		}
	}
	return false
}

func (byteFallbackDecoder) decodeChain(tokens []string) []string {
	out := tokens[:0:0]
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if s := string(pending); utf8.ValidString(s) {
			out = append(out, s)
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, tok := range tokens {
		if b, ok := byteFallbackValue(tok); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, tok)
	}
	flush()
	return out
}

// fuseDecoder joins all tokens into one.
type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDecoder removes up to start leading and stop trailing occurrences of content from each token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string) []string {
	for i, tok := range tokens {
		runes := []rune(tok)
		lo := 0
		for lo < d.start && lo < len(runes) && runes[lo] == d.content {
			lo++
		}
		hi := len(runes)
		for k := 0; k < d.stop && hi > lo && runes[hi-1] == d.content; k++ {
			hi--
		}
		tokens[i] = string(runes[lo:hi])
	}
	return tokens
}

// metaspaceDecoder turns the replacement rune back into spaces; in the first token it is dropped
// altogether unless the prepend scheme is "never".
type metaspaceDecoder struct {
	replacement rune
	scheme      prependScheme
}

func (d metaspaceDecoder) decodeChain(tokens []string) []string {
	for i, tok := range tokens {
		drop := i == 0 && d.scheme != prependNever
		tokens[i] = strings.Map(func(r rune) rune {
			if r != d.replacement {
				return r
			}
			if drop {
				return -1
			}
			return ' '
		}, tok)
	}
	return tokens
}

// sequenceDecoder chains decoders.
type sequenceDecoder []decoder

func (seq sequenceDecoder) decodeChain(tokens []string) []string {
	for _, d := range seq {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}

// TokenBytes returns the bytes token id adds to decoded text when it follows other tokens: the
// decoder chain applied to the token alone, without the effects that only the start of a text has
// (a Metaspace decoder dropping its first space, a Strip after Fuse), and without the UTF-8 repair
// Decode does, so that a token holding part of a character (a ByteLevel piece, a <0xNN> byte
// fallback token) gives exactly its bytes. It reports false for special tokens and ids without a
// token. Constrained decoding walks these bytes (package engine/constraint).
func (t *Tokenizer) TokenBytes(id int32) ([]byte, bool) {
	tok, ok := t.Token(id)
	if !ok || t.IsSpecial(id) {
		return nil, false
	}
	if t.decoder == nil {
		return []byte(tok), true
	}
	s, _ := decodeTokenBytes(t.decoder, tok)
	return []byte(s), true
}

// decodeTokenBytes applies d to one token in the middle of a text and returns its bytes, and
// whether the chain ended at a Fuse (after which decoders act on the whole text, not on tokens).
func decodeTokenBytes(d decoder, tok string) (string, bool) {
	switch d := d.(type) {
	case byteLevelDecoder:
		if b, ok := appendByteLevelBytes(nil, tok); ok {
			return string(b), false
		}
		return tok, false
	case byteFallbackDecoder:
		if b, ok := byteFallbackValue(tok); ok {
			return string([]byte{b}), false
		}
		return tok, false
	case fuseDecoder:
		return tok, true
	case metaspaceDecoder:
		return strings.ReplaceAll(tok, string(d.replacement), " "), false
	case sequenceDecoder:
		for _, sub := range d {
			var fused bool
			if tok, fused = decodeTokenBytes(sub, tok); fused {
				return tok, true
			}
		}
		return tok, false
	default: // Replace, Strip: per-token string edits
		return d.decodeChain([]string{tok})[0], false
	}
}
