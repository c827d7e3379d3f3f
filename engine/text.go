package engine

import (
	"strings"
	"unicode/utf8"
)

// Tokenizer is what the engine needs from a tokenizer: turning token ids back into text. The engine
// decodes generated tokens incrementally through it (see detokenizer); prompts arrive as ids, so it
// never encodes. *tokenizer.Tokenizer satisfies it.
type Tokenizer interface {
	// Decode returns the text of ids; skipSpecial leaves special tokens out.
	Decode(ids []int32, skipSpecial bool) string
}

// ByteRunTokenizer is a Tokenizer whose decoder decodes a run of byte tokens as a whole (HF's
// ByteFallback: one U+FFFD per byte of a run that is not valid UTF-8, its complete characters
// included), so that a later token can still change the text of the run that ends the ids. The
// detokenizer holds such a run back until a token that is no byte token ends it, so that the
// streamed text is the text of the whole output. *tokenizer.Tokenizer satisfies it.
type ByteRunTokenizer interface {
	Tokenizer
	// OpenByteRun returns where the run of byte tokens that ends ids begins, or len(ids) when none
	// does (or the decoder reads no runs). Ids that Decode drops do not end a run.
	OpenByteRun(ids []int32, skipSpecial bool) int
}

// promptContextTokens is how many prompt tokens seed the incremental detokenizer, so that the first
// generated token decodes with the spacing it has after the prompt (a SentencePiece "▁Paris" after
// "is" is " Paris", not "Paris"). vLLM uses the same number.
const promptContextTokens = 5

// maxPromptContextTokens bounds the search for a prompt context that does not begin inside a
// character (see promptContext); vLLM's FastIncrementalDetokenizer looks as far back.
const maxPromptContextTokens = 23

// maxHeldTokens bounds the tokens a detokenizer holds back: a run that completes no character (skipped
// special tokens, byte tokens that are not UTF-8) or an open run of byte tokens (see ByteRunTokenizer)
// is emitted as it decodes once it is this long, but for an incomplete character at its end (see
// split), so that each token decodes a window of bounded length; else every token of the run would
// decode the whole run again, quadratic in a prompt (prompt logprobs' texts) that a client controls.
// A UTF-8 character spans at most 4 byte tokens. The price, for byte runs this long only: the part of
// a run emitted while the run was still open keeps the text it had then, though the bytes after it may
// change how a ByteRunTokenizer decodes the whole run (all of it U+FFFDs once it is not valid UTF-8).
const maxHeldTokens = 8

// detokenizer turns generated tokens into text deltas the way vLLM does: it decodes a short window of
// ids twice, with and without the newest tokens, and emits the difference once it no longer ends
// in an incomplete character (U+FFFD) or an open run of byte tokens (ByteRunTokenizer). That keeps
// multi-byte characters split across byte tokens whole, makes the text streamed the text of the whole
// output, and lets decoders that look at neighbours (leading-space stripping) see context, at a cost
// independent of the output length.
type detokenizer struct {
	tok         Tokenizer
	runs        ByteRunTokenizer // tok, when it is one; else nil
	skipSpecial bool
	ids         []int32 // a few prompt tokens of context, then the output tokens
	prefix      int     // start of the window whose text was emitted up to read
	read        int     // ids before read have been emitted
}

func newDetokenizer(tok Tokenizer, prompt []int32, skipSpecial bool) *detokenizer {
	ctx := promptContext(tok, prompt, skipSpecial)
	ids := make([]int32, len(ctx), len(ctx)+16)
	copy(ids, ctx)
	runs, _ := tok.(ByteRunTokenizer)
	return &detokenizer{tok: tok, runs: runs, skipSpecial: skipSpecial, ids: ids, prefix: 0, read: len(ids)}
}

// promptContext returns the prompt tokens that seed a detokenizer: the shortest suffix of at least
// promptContextTokens tokens that decodes without U+FFFD, as vLLM's FastIncrementalDetokenizer finds
// "a safe place to start". A suffix that begins inside a character spelled by byte tokens would not
// only show that character as U+FFFD: a byte-fallback decoder (HF's ByteFallback) turns a whole run
// of byte tokens that is not valid UTF-8 into U+FFFDs, so the output's characters that continue the
// run would come out as U+FFFDs too. When no suffix up to maxPromptContextTokens is clean (the
// prompt itself holds U+FFFD), the context is the last promptContextTokens tokens, which bounds the
// cost of decoding the window.
func promptContext(tok Tokenizer, prompt []int32, skipSpecial bool) []int32 {
	n := min(len(prompt), promptContextTokens)
	for k := n; k <= min(len(prompt), maxPromptContextTokens); k++ {
		ctx := prompt[len(prompt)-k:]
		if !strings.ContainsRune(tok.Decode(ctx, skipSpecial), utf8.RuneError) {
			return ctx
		}
	}
	return prompt[len(prompt)-n:]
}

// next adds one token and returns the text it completes (possibly empty).
func (d *detokenizer) next(id int32) string {
	d.ids = append(d.ids, id)
	return d.emit(false)
}

// peek sets each alternative's Text to what its token would add after the tokens so far (next's text,
// without holding back an incomplete character), leaving the detokenizer as it is.
func (d *detokenizer) peek(alts []TokenLogprob) {
	if len(alts) == 0 {
		return
	}
	before := d.tok.Decode(d.ids[d.prefix:d.read], d.skipSpecial)
	window := d.ids[d.prefix:len(d.ids):len(d.ids)] // capped: append copies, d.ids stays as it is
	for i := range alts {
		after := d.tok.Decode(append(window, alts[i].ID), d.skipSpecial)
		alts[i].Text = after[commonPrefix(before, after):]
	}
}

// flush returns whatever text is still held back (an incomplete character or an open run of byte
// tokens at the end of the output), as the whole output decodes.
func (d *detokenizer) flush() string { return d.emit(true) }

func (d *detokenizer) emit(final bool) string {
	if d.read == len(d.ids) {
		return ""
	}
	full := len(d.ids)-d.read >= maxHeldTokens
	// Tokens from end on are held back whatever they decode to: an open run of byte tokens, whose
	// text a later byte token can still turn into U+FFFDs. At the end of the output, or once the
	// held tokens are too many, they go out as they decode.
	end := len(d.ids)
	if !final && !full && d.runs != nil {
		end = d.read + d.runs.OpenByteRun(d.ids[d.read:], d.skipSpecial)
		if end == d.read {
			return ""
		}
	}
	before := d.tok.Decode(d.ids[d.prefix:d.read], d.skipSpecial)
	after := d.tok.Decode(d.ids[d.prefix:end], d.skipSpecial)
	if !final && strings.HasSuffix(after, string(utf8.RuneError)) {
		if !full {
			return "" // a character still incomplete: wait for more tokens
		}
		if k := d.split(after); k < end {
			end, after = k, d.tok.Decode(d.ids[d.prefix:k], d.skipSpecial)
		}
	}
	if !final && !full && len(after) <= len(before) {
		return "" // nothing new yet
	}
	// after normally extends before; if the window's first character changed (a character of the
	// prompt completed by the output), emit from where they part.
	n := commonPrefix(before, after)
	d.prefix, d.read = d.read, end
	return after[n:]
}

// split returns where an emission forced by maxHeldTokens ends, given after, the text of the window
// up to its last token, which ends in U+FFFD: the last token k after read whose text up to it is final,
// so that an incomplete character at the end stays held rather than going out as U+FFFD and again as
// the character it becomes. The text up to k is final when after begins with it and it does not end in
// U+FFFD, or the token k extends it (bytes that continue an incomplete character leave its single
// U+FFFD as it is, or replace it). It returns len(d.ids) when no token qualifies.
func (d *detokenizer) split(after string) int {
	next := after // the text up to k+1
	for k := len(d.ids) - 1; k > d.read; k-- {
		text := d.tok.Decode(d.ids[d.prefix:k], d.skipSpecial)
		if strings.HasPrefix(after, text) && (!strings.HasSuffix(text, string(utf8.RuneError)) ||
			len(next) > len(text) && strings.HasPrefix(next, text)) {
			return k
		}
		next = text
	}
	return len(d.ids)
}

// commonPrefix returns the length of the longest common prefix of a and b, on a rune boundary.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	for n > 0 && n < len(b) && !utf8.RuneStart(b[n]) {
		n--
	}
	return n
}

// stopMatcher finds stop strings in a growing output text and says how much of the text is safe to
// stream: the end of the text is held back while it could be the start of a stop string.
type stopMatcher struct {
	stops  []string
	maxLen int
}

func newStopMatcher(stops []string) stopMatcher {
	m := stopMatcher{}
	for _, s := range stops {
		if s == "" {
			continue
		}
		m.stops = append(m.stops, s)
		m.maxLen = max(m.maxLen, len(s))
	}
	return m
}

// find returns the earliest position of a stop string in text that ends at or after from (the start
// of the newly added text), the stop string, and whether one was found. Among stops starting at the
// same position, the longest wins.
func (m *stopMatcher) find(text string, from int) (pos int, stop string, ok bool) {
	pos = -1
	for _, s := range m.stops {
		start := max(0, from-len(s)+1)
		i := strings.Index(text[start:], s)
		if i < 0 {
			continue
		}
		i += start
		if pos < 0 || i < pos || (i == pos && len(s) > len(stop)) {
			pos, stop = i, s
		}
	}
	return pos, stop, pos >= 0
}

// holdBack returns how many bytes at the end of text must not be streamed yet: the longest suffix of
// text that is a proper prefix of some stop string.
func (m *stopMatcher) holdBack(text string) int {
	hold := 0
	for _, s := range m.stops {
		for k := min(len(s)-1, len(text)); k > hold; k-- {
			if strings.HasSuffix(text, s[:k]) {
				hold = k
				break
			}
		}
	}
	return hold
}
