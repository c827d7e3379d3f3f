package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
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

	addedIDs   map[string]int32 // added token content → id
	rawAdded   *addedMatcher    // added tokens matched in the raw input
	normAdded  *addedMatcher    // added tokens matched after normalization
	normalizer normalizer
	pre        preTokenizer
	rawBytes   bool // the model reads raw bytes: the final ByteLevel mapping is skipped
	post       postProcessor
	decoder    decoder

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
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
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
	t.rawAdded.split(text, func(start, end int, id int32) {
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
		t.normAdded.split(seg, func(s, e int, id int32) {
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
