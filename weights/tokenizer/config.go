package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ErrUnsupported is returned by Load and Parse for a tokenizer.json that uses a component or option
// this package does not implement (a WordPiece model, a BertNormalizer, BPE dropout, ...).
var ErrUnsupported = errors.New("unsupported tokenizer feature")

// ErrMalformed is returned by Load and Parse for a tokenizer.json that is not valid: bad JSON, a
// merge naming a token missing from the vocabulary, an unknown token that does not exist, ...
var ErrMalformed = errors.New("malformed tokenizer.json")

// fileJSON is the part of tokenizer.json we read.
type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         *int32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// component is the common head of every normalizer, pre-tokenizer, decoder and post-processor.
type component struct {
	Type string `json:"type"`
}

// patternJSON is {"String": "..."} or {"Regex": "..."}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func decodeStrict(raw json.RawMessage, v any, what string) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, what, err)
	}
	return nil
}

func (p patternJSON) build(what string) (pattern, error) {
	switch {
	case p.String != nil:
		return literalPattern(*p.String), nil
	case p.Regex != nil:
		if fast, ok := lookupFastPattern(*p.Regex); ok {
			return fast, nil
		}
		re, err := compileRegexPattern(*p.Regex)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: regex %q: %v", ErrUnsupported, what, *p.Regex, err)
		}
		return re, nil
	}
	return nil, fmt.Errorf("%w: %s: pattern needs String or Regex", ErrMalformed, what)
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	// Older files write merges as "a b" strings, newer ones as ["a", "b"] pairs; all items of a
	// file use one form, so decode the whole list in that form.
	first := bytes.TrimLeft(bytes.TrimPrefix(bytes.TrimSpace(raw), []byte("[")), " \t\r\n")
	if len(first) > 0 && first[0] == '"' {
		var items []string
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("%w: model.merges: %v", ErrMalformed, err)
		}
		merges := make([][2]string, len(items))
		for i, s := range items {
			left, right, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(right, " ") {
				return nil, fmt.Errorf("%w: model.merges[%d]: %q is not two tokens separated by a space", ErrMalformed, i, s)
			}
			merges[i] = [2]string{left, right}
		}
		return merges, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("%w: model.merges: want [\"a b\", ...] or [[\"a\", \"b\"], ...]: %v", ErrMalformed, err)
	}
	merges := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("%w: model.merges[%d]: a pair has %d tokens", ErrMalformed, i, len(p))
		}
		merges[i] = [2]string{p[0], p[1]}
	}
	return merges, nil
}

func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head component
	if err := decodeStrict(raw, &head, "normalizer"); err != nil {
		return nil, err
	}
	switch head.Type {
	case "NFC":
		return unicodeNormalizer{norm.NFC}, nil
	case "NFD":
		return unicodeNormalizer{norm.NFD}, nil
	case "NFKC":
		return unicodeNormalizer{norm.NFKC}, nil
	case "NFKD":
		return unicodeNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		var v struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := decodeStrict(raw, &v, "Strip normalizer"); err != nil {
			return nil, err
		}
		return stripNormalizer{left: v.Left, right: v.Right}, nil
	case "Prepend":
		var v struct {
			Prepend string `json:"prepend"`
		}
		if err := decodeStrict(raw, &v, "Prepend normalizer"); err != nil {
			return nil, err
		}
		return prependNormalizer{prefix: v.Prepend}, nil
	case "Replace":
		var v struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := decodeStrict(raw, &v, "Replace normalizer"); err != nil {
			return nil, err
		}
		p, err := v.Pattern.build("Replace normalizer")
		if err != nil {
			return nil, err
		}
		return replaceNormalizer{pattern: p, content: v.Content}, nil
	case "Sequence":
		var v struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := decodeStrict(raw, &v, "Sequence normalizer"); err != nil {
			return nil, err
		}
		var seq sequenceNormalizer
		for _, sub := range v.Normalizers {
			n, err := buildNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%w: normalizer type %q", ErrUnsupported, head.Type)
}

func parseBehavior(s string) (splitBehavior, error) {
	switch strings.ToLower(strings.ReplaceAll(s, "_", "")) {
	case "removed":
		return splitRemoved, nil
	case "isolated":
		return splitIsolated, nil
	case "mergedwithprevious":
		return splitMergedWithPrevious, nil
	case "mergedwithnext":
		return splitMergedWithNext, nil
	case "contiguous":
		return splitContiguous, nil
	}
	return 0, fmt.Errorf("%w: split behavior %q", ErrMalformed, s)
}

// metaspaceJSON holds the options shared by the Metaspace pre-tokenizer and decoder.
type metaspaceJSON struct {
	Replacement    string  `json:"replacement"`
	PrependScheme  *string `json:"prepend_scheme"`
	AddPrefixSpace *bool   `json:"add_prefix_space"`
	Split          *bool   `json:"split"`
}

func (v metaspaceJSON) parse() (rune, prependScheme, bool, error) {
	r, size := utf8.DecodeRuneInString(v.Replacement)
	if size == 0 || size != len(v.Replacement) {
		return 0, 0, false, fmt.Errorf("%w: Metaspace replacement %q is not one character", ErrMalformed, v.Replacement)
	}
	scheme := prependAlways
	if v.PrependScheme != nil {
		switch *v.PrependScheme {
		case "always":
		case "first":
			scheme = prependFirst
		case "never":
			scheme = prependNever
		default:
			return 0, 0, false, fmt.Errorf("%w: Metaspace prepend_scheme %q", ErrMalformed, *v.PrependScheme)
		}
	} else if v.AddPrefixSpace != nil && !*v.AddPrefixSpace {
		scheme = prependNever
	}
	split := v.Split == nil || *v.Split
	return r, scheme, split, nil
}

func buildPreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head component
	if err := decodeStrict(raw, &head, "pre_tokenizer"); err != nil {
		return nil, err
	}
	switch head.Type {
	case "ByteLevel":
		v := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{UseRegex: true}
		if err := decodeStrict(raw, &v, "ByteLevel pre_tokenizer"); err != nil {
			return nil, err
		}
		return &byteLevelPreTokenizer{addPrefixSpace: v.AddPrefixSpace, useRegex: v.UseRegex, mapBytes: true}, nil
	case "Split":
		var v struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := decodeStrict(raw, &v, "Split pre_tokenizer"); err != nil {
			return nil, err
		}
		p, err := v.Pattern.build("Split pre_tokenizer")
		if err != nil {
			return nil, err
		}
		if v.Invert {
			p = invertedPattern{p}
		}
		b, err := parseBehavior(v.Behavior)
		if err != nil {
			return nil, err
		}
		return splitPreTokenizer{pattern: p, behavior: b}, nil
	case "Digits":
		var v struct {
			Individual bool `json:"individual_digits"`
		}
		if err := decodeStrict(raw, &v, "Digits pre_tokenizer"); err != nil {
			return nil, err
		}
		return digitsPreTokenizer{individual: v.Individual}, nil
	case "Metaspace":
		var v metaspaceJSON
		if err := decodeStrict(raw, &v, "Metaspace pre_tokenizer"); err != nil {
			return nil, err
		}
		r, scheme, split, err := v.parse()
		if err != nil {
			return nil, err
		}
		return metaspacePreTokenizer{replacement: r, scheme: scheme, split: split}, nil
	case "Sequence":
		var v struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := decodeStrict(raw, &v, "Sequence pre_tokenizer"); err != nil {
			return nil, err
		}
		var seq sequencePreTokenizer
		for _, sub := range v.PreTokenizers {
			p, err := buildPreTokenizer(sub)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		if len(seq) == 1 {
			return seq[0], nil
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%w: pre_tokenizer type %q", ErrUnsupported, head.Type)
}

func buildDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head component
	if err := decodeStrict(raw, &head, "decoder"); err != nil {
		return nil, err
	}
	switch head.Type {
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Replace":
		var v struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := decodeStrict(raw, &v, "Replace decoder"); err != nil {
			return nil, err
		}
		p, err := v.Pattern.build("Replace decoder")
		if err != nil {
			return nil, err
		}
		return replaceDecoder{pattern: p, content: v.Content}, nil
	case "Strip":
		var v struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := decodeStrict(raw, &v, "Strip decoder"); err != nil {
			return nil, err
		}
		r, size := utf8.DecodeRuneInString(v.Content)
		if size == 0 || size != len(v.Content) || v.Start < 0 || v.Stop < 0 {
			return nil, fmt.Errorf("%w: Strip decoder: content %q start %d stop %d", ErrMalformed, v.Content, v.Start, v.Stop)
		}
		return stripDecoder{content: r, start: v.Start, stop: v.Stop}, nil
	case "Metaspace":
		var v metaspaceJSON
		if err := decodeStrict(raw, &v, "Metaspace decoder"); err != nil {
			return nil, err
		}
		r, scheme, _, err := v.parse()
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{replacement: r, scheme: scheme}, nil
	case "Sequence":
		var v struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := decodeStrict(raw, &v, "Sequence decoder"); err != nil {
			return nil, err
		}
		var seq sequenceDecoder
		for _, sub := range v.Decoders {
			d, err := buildDecoder(sub)
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%w: decoder type %q", ErrUnsupported, head.Type)
}

// buildPostProcessor reads the post-processor; only what it does to a single sequence matters.
func buildPostProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head component
	if err := decodeStrict(raw, &head, "post_processor"); err != nil {
		return nil, err
	}
	switch head.Type {
	case "ByteLevel":
		return nil, nil // offsets only
	case "TemplateProcessing":
		var v struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := decodeStrict(raw, &v, "TemplateProcessing"); err != nil {
			return nil, err
		}
		var p templateProcessor
		seen := false
		for i, item := range v.Single {
			switch {
			case item.Sequence != nil:
				if seen || item.Sequence.ID != "A" {
					return nil, fmt.Errorf("%w: TemplateProcessing single[%d]: sequence %q", ErrUnsupported, i, item.Sequence.ID)
				}
				seen = true
			case item.SpecialToken != nil:
				st, ok := v.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%w: TemplateProcessing: special token %q missing from special_tokens", ErrMalformed, item.SpecialToken.ID)
				}
				if seen {
					p.after = append(p.after, st.IDs...)
				} else {
					p.before = append(p.before, st.IDs...)
				}
			default:
				return nil, fmt.Errorf("%w: TemplateProcessing single[%d]: neither SpecialToken nor Sequence", ErrMalformed, i)
			}
		}
		if !seen {
			return nil, fmt.Errorf("%w: TemplateProcessing single has no $A", ErrMalformed)
		}
		return p, nil
	case "RobertaProcessing", "BertProcessing":
		var v struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := decodeStrict(raw, &v, head.Type); err != nil {
			return nil, err
		}
		var cls, sep int32
		if err := decodeStrict(v.Cls[1], &cls, head.Type+" cls"); err != nil {
			return nil, err
		}
		if err := decodeStrict(v.Sep[1], &sep, head.Type+" sep"); err != nil {
			return nil, err
		}
		return templateProcessor{before: []int32{cls}, after: []int32{sep}}, nil
	case "Sequence":
		var v struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := decodeStrict(raw, &v, "Sequence post_processor"); err != nil {
			return nil, err
		}
		var seq sequenceProcessor
		for _, sub := range v.Processors {
			p, err := buildPostProcessor(sub)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%w: post_processor type %q", ErrUnsupported, head.Type)
}
