package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// StreamDecoder turns generated ids, given one at a time, into text deltas. Every delta is valid
// UTF-8: text that may still change (an incomplete UTF-8 sequence, shown by Decode as a trailing
// U+FFFD) is held back until a later id completes it or Flush is called. After Flush, the
// concatenated deltas equal Decode(all ids, skipSpecial).
//
// It decodes a short window of recent ids at each step, so a step costs the same at any length.
// A StreamDecoder belongs to one sequence and is not safe for concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	window      []int32 // the ids since the window start
	emitted     string  // the part of Decode(window) already returned
}

// streamWindow is how many ids the window grows to before it is moved forward.
const streamWindow = 16

// NewStreamDecoder returns a streaming detokenizer for one sequence.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Next adds one id and returns the text it completes, possibly empty.
func (d *StreamDecoder) Next(id int32) string {
	d.window = append(d.window, id)
	// ByteFallback decodes a run of <0xNN> tokens as a whole, and one invalid byte turns the
	// whole run into U+FFFDs, so a run still open at the end is held back entirely.
	stable := d.t.OpenByteRun(d.window, d.skipSpecial)
	text := d.t.Decode(d.window[:stable], d.skipSpecial)
	if !strings.HasPrefix(text, d.emitted) {
		// The decoders we implement never rewrite text they have already produced, given the
		// context the window keeps; should one do so, hold everything back until Flush.
		return ""
	}
	safe := len(text) - trailingReplacementLen(text)
	if safe <= len(d.emitted) {
		return ""
	}
	delta := text[len(d.emitted):safe]
	d.emitted = text[:safe]
	if stable == len(d.window) && safe == len(text) && len(d.window) > 2*streamWindow {
		d.slide(text)
	}
	return delta
}

// OpenByteRun returns where the run of byte tokens (<0xNN>) that ends ids begins, or len(ids) when
// ids do not end in one or the decoder has no ByteFallback. Ids that Decode drops do not end a run.
// ByteFallback decodes a run as a whole, one U+FFFD per byte when the run is not valid UTF-8, so
// ids that follow may still turn the text of the run that ends ids into U+FFFDs, its complete
// characters included: until a token that is no byte token ends it, the run's text is not final.
func (t *Tokenizer) OpenByteRun(ids []int32, skipSpecial bool) int {
	start := len(ids)
	if !t.byteFallbackDecode {
		return start
	}
	for i := len(ids) - 1; i >= 0; i-- {
		tok, ok := t.Token(ids[i])
		switch {
		case !ok || skipSpecial && t.IsSpecial(ids[i]):
			continue // dropped by Decode
		case isByteFallbackToken(tok):
			start = i
			continue
		}
		break
	}
	return start
}

// Flush returns the text still held back and resets the decoder for a new sequence.
func (d *StreamDecoder) Flush() string {
	text := d.t.Decode(d.window, d.skipSpecial)
	var delta string
	if strings.HasPrefix(text, d.emitted) {
		delta = text[len(d.emitted):]
	}
	d.window, d.emitted = d.window[:0], ""
	return delta
}

// slide moves the window start forward to a recent id c, keeping it as context: decoders treat the
// first token specially (Strip, Metaspace) and byte runs span tokens (ByteLevel, ByteFallback), so
// c is accepted only when decoding from c reproduces exactly the text that follows c in the full
// window: then those effects stay confined to c's own text, which is already emitted.
func (d *StreamDecoder) slide(text string) {
	n := len(d.window)
	for c := n - 2; c >= n-streamWindow/2 && c > 0; c-- {
		upTo := d.t.Decode(d.window[:c+1], d.skipSpecial)
		if !strings.HasPrefix(text, upTo) {
			continue
		}
		first := d.t.Decode(d.window[c:c+1], d.skipSpecial)
		if first == "" {
			continue
		}
		from := d.t.Decode(d.window[c:], d.skipSpecial)
		if !strings.HasPrefix(from, first) || from[len(first):] != text[len(upTo):] || trailingReplacementLen(from) > 0 {
			continue
		}
		d.window = append(d.window[:0], d.window[c:]...)
		d.emitted = from
		return
	}
}

// trailingReplacementLen returns the byte length of the U+FFFD runes ending s.
func trailingReplacementLen(s string) int {
	n := 0
	for len(s) > n {
		r, size := utf8.DecodeLastRuneInString(s[:len(s)-n])
		if r != utf8.RuneError {
			break
		}
		n += size
	}
	return n
}
