package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamAll feeds ids one by one and checks every delta is valid UTF-8; it returns the deltas.
func streamAll(t *testing.T, tok *Tokenizer, ids []int32, skip bool) []string {
	t.Helper()
	d := tok.NewStreamDecoder(skip)
	var deltas []string
	for _, id := range ids {
		delta := d.Next(id)
		if !utf8.ValidString(delta) {
			t.Fatalf("delta %q after id %d is not valid UTF-8", delta, id)
		}
		deltas = append(deltas, delta)
	}
	rest := d.Flush()
	if !utf8.ValidString(rest) {
		t.Fatalf("flush %q is not valid UTF-8", rest)
	}
	return append(deltas, rest)
}

func checkStream(t *testing.T, tok *Tokenizer, ids []int32, what string) {
	t.Helper()
	for _, skip := range []bool{false, true} {
		got := strings.Join(streamAll(t, tok, ids, skip), "")
		if want := tok.Decode(ids, skip); got != want {
			t.Fatalf("%s (skip %v): streamed %q, Decode %q", what, skip, got, want)
		}
	}
}

// randomIDs draws ids that stress the stream decoder: byte-level pieces of multi-byte characters,
// <0xNN> byte tokens, special tokens, ids without a token and ordinary tokens.
func randomIDs(r *rand.Rand, tok *Tokenizer, n int) []int32 {
	var pool []int32
	for _, s := range []string{"é", "你好", "😀", "👨‍👩‍👧", "a b", " x"} {
		for _, id := range tok.Encode(s, false) {
			pool = append(pool, id)
		}
	}
	for b := range 256 {
		if id := tok.model.byteTokenIDs[b]; id >= 0 {
			pool = append(pool, id)
		}
	}
	for id := range int32(tok.VocabSize()) {
		if tok.IsSpecial(id) {
			pool = append(pool, id)
			if len(pool) > 400 {
				break
			}
		}
	}
	ids := make([]int32, n)
	for i := range ids {
		switch k := r.IntN(10); {
		case k < 5:
			ids[i] = pool[r.IntN(len(pool))]
		case k == 5:
			ids[i] = int32(tok.VocabSize()) + 7 // no such token
		default:
			ids[i] = int32(r.IntN(tok.VocabSize()))
		}
	}
	return ids
}

// TestStreamDecoder checks that streaming the ids of every golden string, and random id sequences
// long enough to slide the window, reproduces Decode exactly, for every tokenizer.
func TestStreamDecoder(t *testing.T) {
	names := append(append([]string{}, tokenizerNames...), variantNames...)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			tok := loadTestTokenizer(t, name)
			strs, cases := readGolden(t, name)
			for i, c := range cases {
				ids := c.IDs
				if c.IDsSpecial != nil {
					ids = *c.IDsSpecial
				}
				checkStream(t, tok, ids, "golden "+strings.TrimSpace(strs[i]))
			}
			// All golden strings as one long generation, to exercise the sliding window.
			var all []int32
			for _, c := range cases {
				all = append(all, c.IDs...)
			}
			checkStream(t, tok, all, "all golden ids")
			r := rand.New(rand.NewPCG(5, 6))
			for k := range 30 {
				checkStream(t, tok, randomIDs(r, tok, 20+r.IntN(200)), "random ids "+itoa(k))
			}
		})
	}
}

func TestStreamDecoderTiny(t *testing.T) {
	tok := tinyByteLevel(t)
	eot, _ := tok.TokenID("<|eot|>")
	// "你" is three byte tokens: nothing is emitted until the character is complete.
	d := tok.NewStreamDecoder(true)
	for i, b := range []int32{0xE4, 0xBD} {
		if got := d.Next(b); got != "" {
			t.Fatalf("delta %d = %q, want nothing while the character is incomplete", i, got)
		}
	}
	if got := d.Next(0xA0); got != "你" {
		t.Fatalf("delta = %q, want 你", got)
	}
	if got := d.Next(eot); got != "" {
		t.Fatalf("skipped special gave %q", got)
	}
	if got := d.Next('!'); got != "!" {
		t.Fatalf("delta = %q, want !", got)
	}
	// An incomplete character at the end comes out as U+FFFD on Flush, as Decode has it.
	d.Next(0xF0)
	if got := d.Flush(); got != "\uFFFD" {
		t.Fatalf("flush = %q, want U+FFFD", got)
	}
	// After Flush the decoder starts a new sequence.
	if got := d.Next('a'); got != "a" {
		t.Fatalf("after flush: %q", got)
	}
	// The window stays short on a long generation of ordinary text.
	d = tok.NewStreamDecoder(false)
	maxWindow := 0
	for _, id := range tok.Encode(strings.Repeat("the cat and the hat, 123 café 你好 😀\n", 100), false) {
		d.Next(id)
		maxWindow = max(maxWindow, len(d.window))
	}
	if maxWindow > 2*streamWindow+1 {
		t.Errorf("window grew to %d ids", maxWindow)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		checkStream(t, tok, randomIDs(r, tok, 1+r.IntN(120)), "random")
	}
}

// BenchmarkStreamDecoder measures the per-token cost of streaming a long generation; it stays
// flat as the sequence grows because only a window of ids is decoded.
func BenchmarkStreamDecoder(b *testing.B) {
	tok := tinyByteLevel(b)
	ids := tok.Encode(strings.Repeat("the cat and the hat, then 123 café 你好 😀\n", 200), false)
	b.ResetTimer()
	for b.Loop() {
		d := tok.NewStreamDecoder(false)
		for _, id := range ids {
			d.Next(id)
		}
		d.Flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/token")
}

// TestOpenByteRun: with ByteFallback, the run of <0xNN> tokens that ends the ids is open (ids that
// Decode drops inside it do not end it); a decoder without ByteFallback has no runs.
func TestOpenByteRun(t *testing.T) {
	llama := loadTestTokenizer(t, "llama2")
	x := llama.Encode("x", false)[0]
	f0, _ := llama.TokenID("<0xF0>")
	b9f, _ := llama.TokenID("<0x9F>")
	const bos = 1 // <s>, special
	tests := []struct {
		ids  []int32
		skip bool
		want int
	}{
		{[]int32{x, f0, b9f}, false, 1},
		{[]int32{f0, b9f}, false, 0},
		{[]int32{f0, x}, false, 2},
		{[]int32{x, f0, bos, b9f}, true, 1},
		{[]int32{x, f0, bos, b9f}, false, 3},
		{[]int32{x, f0, bos}, true, 1},
		{nil, false, 0},
	}
	for _, tc := range tests {
		if got := llama.OpenByteRun(tc.ids, tc.skip); got != tc.want {
			t.Errorf("llama2: OpenByteRun(%v, %v) = %d, want %d", tc.ids, tc.skip, got, tc.want)
		}
	}
	qwen := loadTestTokenizer(t, "qwen3")
	ids := qwen.Encode("x😀", false)
	if got := qwen.OpenByteRun(ids[:2], false); got != 2 {
		t.Errorf("qwen3 (byte-level, no ByteFallback): OpenByteRun = %d, want 2", got)
	}
}
