package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gollm/gollm/weights"
)

// Tokenizer encodes text to token ids and decodes ids to text, following a HuggingFace
// tokenizer.json. It is immutable after Load or Parse and safe for concurrent use.
type Tokenizer struct {
	model *bpeModel

	idToToken []string // id → token string; "" where no token has that id
	hasID     []bool   // whether idToToken[id] is defined
	special   []bool   // id → added token marked special

	addedIDs  map[string]int32 // added token content → id
	rawAdded  *addedMatcher    // added tokens matched in the raw input
	normAdded *addedMatcher    // added tokens matched after normalization
	// specialAdded finds the special tokens' text anywhere (SpecialSpans).
	specialAdded *addedMatcher
	normalizer   normalizer
	pre          preTokenizer
	rawBytes     bool // the model reads raw bytes: the final ByteLevel mapping is skipped
	post         postProcessor
	decoder      decoder

	byteFallbackDecode bool // the decoder has ByteFallback (see StreamDecoder)
}

// Load reads a tokenizer.json file (a regular file: anything else is refused at once, see
// weights.ReadFile).
func Load(path string) (*Tokenizer, error) {
	data, err := weights.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// Parse reads the contents of a tokenizer.json. Errors wrap ErrMalformed or ErrUnsupported.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if f.Model.Type != "BPE" && !(f.Model.Type == "" && len(f.Model.Merges) > 0) {
		return nil, fmt.Errorf("%w: model type %q (only BPE)", ErrUnsupported, f.Model.Type)
	}
	if f.Model.Dropout != nil && *f.Model.Dropout != 0 {
		return nil, fmt.Errorf("%w: BPE dropout %g", ErrUnsupported, *f.Model.Dropout)
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	vocab := f.Model.Vocab
	if vocab == nil {
		vocab = map[string]int32{}
	}
	model, err := newBPEModel(vocab, merges, str(f.Model.UnkToken), str(f.Model.ContinuingSubwordPrefix),
		str(f.Model.EndOfWordSuffix), f.Model.FuseUnk, f.Model.ByteFallback, f.Model.IgnoreMerges)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{model: model, addedIDs: map[string]int32{}}

	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("%w: vocab: token %q has negative id %d", ErrMalformed, tok, id)
		}
		maxID = max(maxID, id)
	}
	var rawTokens, normTokens []addedToken
	for i, a := range f.AddedTokens {
		if a.ID == nil || *a.ID < 0 {
			return nil, fmt.Errorf("%w: added_tokens[%d] %q: missing or negative id", ErrMalformed, i, a.Content)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("%w: added_tokens[%d]: empty content", ErrMalformed, i)
		}
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		tok := addedToken{id: *a.ID, content: a.Content, singleWord: a.SingleWord, lstrip: a.Lstrip,
			rstrip: a.Rstrip, normalized: normalized, special: a.Special}
		if normalized {
			normTokens = append(normTokens, tok)
		} else {
			rawTokens = append(rawTokens, tok)
		}
		maxID = max(maxID, *a.ID)
	}
	// The id tables below are dense (maxID+1 entries), so an id far past the tokens the file lists
	// would make a few bytes of JSON allocate gigabytes: real vocabularies number their tokens densely.
	if listed := len(vocab) + len(f.AddedTokens); int64(maxID) >= math.MaxInt32 || int(maxID) >= 64<<20 ||
		int(maxID) >= 4*listed+4096 {
		return nil, fmt.Errorf("%w: token id %d is too large for the %d tokens listed", ErrMalformed, maxID, listed)
	}
	n := int(maxID) + 1
	t.idToToken = make([]string, n)
	t.hasID = make([]bool, n)
	t.special = make([]bool, n)
	for tok, id := range vocab {
		t.idToToken[id] = tok
		t.hasID[id] = true
	}
	for _, list := range [][]addedToken{rawTokens, normTokens} {
		for _, a := range list {
			t.idToToken[a.id] = a.content
			t.hasID[a.id] = true
			t.special[a.id] = t.special[a.id] || a.special
			t.addedIDs[a.content] = a.id
		}
	}
	t.rawAdded = newAddedMatcher(rawTokens)
	t.normAdded = newAddedMatcher(normTokens)
	var special []addedToken
	for _, a := range slices.Concat(rawTokens, normTokens) {
		if a.special {
			special = append(special, a)
		}
	}
	t.specialAdded = newAddedMatcher(special)

	if t.normalizer, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.post, err = buildPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if t.decoder, err = buildDecoder(f.Decoder); err != nil {
		return nil, err
	}
	t.byteFallbackDecode = hasByteFallback(t.decoder)
	t.useRawBytes()
	return t, nil
}

// useRawBytes lets the model read raw bytes when the last pre-tokenizer is ByteLevel.
func (t *Tokenizer) useRawBytes() {
	last := t.pre
	if seq, ok := last.(sequencePreTokenizer); ok && len(seq) > 0 {
		last = seq[len(seq)-1]
	}
	if bl, ok := last.(*byteLevelPreTokenizer); ok {
		bl.mapBytes = false
		t.rawBytes = true
		t.model.enableRawByteLevel()
	}
}

// Encode returns the token ids of text. Added and special tokens written in the text are always
// recognised; addSpecial adds what the post-processor adds (BOS for Llama 2 and Mistral), like
// HuggingFace's add_special_tokens=True. Invalid UTF-8 in text is replaced by U+FFFD first.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	return t.encode(text, addSpecial, nil)
}

// EncodePlain is Encode, except that special tokens (added tokens marked special) whose text lies
// in, or overlaps, one of the byte ranges plain ([start, end) of text) are not recognised there: that
// text is encoded as ordinary text, as HuggingFace's split_special_tokens=True encodes all of a text.
// A server uses it for text from a client (chat message contents) inside text of its own (the chat
// template's), so that a client cannot write control tokens. Added tokens not marked special are still
// recognised, as HuggingFace does; special tokens matched after normalization are not recognised
// anywhere in a piece of text between added tokens that overlaps a plain range. Ranges out of order,
// overlapping or out of bounds are put in order and clipped. Plain ranges are byte offsets of text as
// given: invalid UTF-8 makes EncodePlain treat the whole text as plain.
func (t *Tokenizer) EncodePlain(text string, addSpecial bool, plain [][2]int) []int32 {
	if !utf8.ValidString(text) {
		plain = [][2]int{{0, len(text)}}
	}
	return t.encode(text, addSpecial, normalizeSpans(plain, len(text)))
}

// SpecialSpans returns the byte ranges [start, end) of text where Encode would find the text of a
// special token (leftmost-longest, without the lstrip, rstrip and single_word rules), in order: what
// EncodePlain would encode as plain text if given them.
func (t *Tokenizer) SpecialSpans(text string) [][2]int {
	var out [][2]int
	if t.specialAdded.empty() {
		return nil
	}
	for i := 0; i < len(text); {
		if !t.specialAdded.firstBytes[text[i]] {
			i++
			continue
		}
		if tok, end := t.specialAdded.longestAt(text, i, nil); tok >= 0 {
			out = append(out, [2]int{i, end})
			i = end
			continue
		}
		i++
	}
	return out
}

// normalizeSpans sorts spans, clips them to [0, n), merges overlaps and drops empty ones.
func normalizeSpans(spans [][2]int, n int) [][2]int {
	out := make([][2]int, 0, len(spans))
	for _, s := range spans {
		a, b := max(s[0], 0), min(s[1], n)
		if a < b {
			out = append(out, [2]int{a, b})
		}
	}
	slices.SortFunc(out, func(x, y [2]int) int { return x[0] - y[0] })
	merged := out[:0]
	for _, s := range out {
		if k := len(merged) - 1; k >= 0 && s[0] <= merged[k][1] {
			merged[k][1] = max(merged[k][1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// overlapsSpan reports whether [start, end) overlaps one of spans (sorted, disjoint).
func overlapsSpan(spans [][2]int, start, end int) bool {
	i, _ := slices.BinarySearchFunc(spans, start, func(s [2]int, x int) int {
		if s[1] <= x {
			return -1
		}
		return 1
	})
	return i < len(spans) && spans[i][0] < end
}

// encode is Encode with the special tokens inside plain (sorted, disjoint; nil: none) not recognised.
func (t *Tokenizer) encode(text string, addSpecial bool, plain [][2]int) []int32 {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	var skipRaw func(tok int32, start, end int) bool
	if len(plain) > 0 {
		skipRaw = func(tok int32, start, end int) bool {
			return t.rawAdded.tokens[tok].special && overlapsSpan(plain, start, end)
		}
	}
	ids := make([]int32, 0, len(text)/4+4)
	emitWord := func(p piece) {
		if t.rawBytes {
			ids = t.model.tokenizeRawBytes(p.text, ids)
		} else {
			ids = t.model.tokenizeWord(p.text, ids)
		}
	}
	encodeNormalized := func(p piece) {
		if t.pre == nil {
			if p.text != "" {
				emitWord(p)
			}
			return
		}
		if p.text != "" {
			t.pre.preTokenize(p, emitWord)
		}
	}
	t.rawAdded.splitSkipping(text, skipRaw, func(start, end int, id int32) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		seg := text[start:end]
		if t.normalizer != nil {
			seg = t.normalizer.normalize(seg)
		}
		if t.normAdded.empty() {
			encodeNormalized(piece{text: seg, atStart: start == 0})
			return
		}
		var skipNorm func(tok int32, s, e int) bool
		if overlapsSpan(plain, start, end) { // offsets of the normalized text are not the input's
			skipNorm = func(tok int32, _, _ int) bool { return t.normAdded.tokens[tok].special }
		}
		t.normAdded.splitSkipping(seg, skipNorm, func(s, e int, id int32) {
			if id >= 0 {
				ids = append(ids, id)
				return
			}
			encodeNormalized(piece{text: seg[s:e], atStart: start == 0 && s == 0})
		})
	})
	if addSpecial && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids
}

// Decode returns the text of ids, as HuggingFace's decode: ids without a token are ignored, special
// tokens are dropped when skipSpecial is set, and the decoder turns the rest into text. The result
// is valid UTF-8.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.idToToken) || !t.hasID[id] {
			continue
		}
		if skipSpecial && t.special[id] {
			continue
		}
		tokens = append(tokens, t.idToToken[id])
	}
	if t.decoder == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.decoder.decodeChain(tokens), "")
}

// VocabSize returns one more than the largest token id, added tokens included: the number of rows
// a model's embedding needs. For the usual contiguous vocabularies it is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// TokenID returns the id of a token string (an added token, or a token of the model's vocabulary
// written as in tokenizer.json, e.g. "Ġthe" or "▁the").
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if id, ok := t.addedIDs[token]; ok {
		return id, true
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// Token returns the token string of an id, as written in tokenizer.json.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.idToToken) || !t.hasID[id] {
		return "", false
	}
	return t.idToToken[id], true
}

// IsSpecial reports whether id is an added token marked special (such as BOS, EOS or a chat
// marker); Decode drops these when asked to skip special tokens.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}
