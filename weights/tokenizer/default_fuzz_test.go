package tokenizer_test

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

// FuzzDefaultModelRoundTrip checks, on the tokenizer the server runs by default (the built-in
// model's byte-level BPE), that decode(encode(s)) == s for valid UTF-8, that streaming the ids
// through a StreamDecoder gives the same text, that every id is inside the vocabulary, and that
// encoding with special tokens only adds them (never changes the text's own ids). Invalid UTF-8
// must encode and decode without panicking.
func FuzzDefaultModelRoundTrip(f *testing.F) {
	for _, s := range []string{"", "func main() {\n\tfmt.Println(\"hi\")\n}\n", "  \t\n x", "<|eos|>a<|bos|>", "<|user|>\n",
		"你好 😀 👨‍👩‍👧", "e\u0301 \u00a0\u3000", "\x00\x7f", "'s'S'll 123456789", "\xff\xfe"} {
		f.Add(s)
	}
	dir, err := defaultmodel.Dir()
	if err != nil {
		f.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		f.Fatal(err)
	}
	vocab := tok.VocabSize()
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s, false)
		for _, id := range ids {
			if id < 0 || int(id) >= vocab {
				t.Fatalf("id %d outside the vocabulary of %d", id, vocab)
			}
		}
		got := tok.Decode(ids, false)
		if !utf8.ValidString(s) {
			if !utf8.ValidString(got) {
				t.Fatalf("decoding gave invalid UTF-8 %q", got)
			}
			return
		}
		if got != s {
			t.Fatalf("decode(encode(%q)) = %q, ids %v", s, got, ids)
		}
		var sb strings.Builder
		d := tok.NewStreamDecoder(false)
		for _, id := range ids {
			sb.WriteString(d.Next(id))
		}
		sb.WriteString(d.Flush())
		if sb.String() != s {
			t.Fatalf("streamed %q, want %q", sb.String(), s)
		}
		withSpecial := tok.Encode(s, true)
		if len(withSpecial) < len(ids) || !containsRun(withSpecial, ids) {
			t.Fatalf("special tokens changed the text's ids: %v vs %v", withSpecial, ids)
		}
	})
}

// containsRun reports whether sub appears in s as a contiguous run.
func containsRun(s, sub []int32) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		match := true
		for j := range sub {
			if s[i+j] != sub[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
