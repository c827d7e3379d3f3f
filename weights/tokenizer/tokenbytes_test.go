package tokenizer

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTokenBytes checks each real tokenizer's token bytes against Decode: a token that is valid
// UTF-8 on its own decodes after a plain token to that token's text plus its bytes, and the bytes of
// an encoded text's tokens, split characters included, spell the text (up to the leading space a
// SentencePiece decoder drops at the start).
func TestTokenBytes(t *testing.T) {
	texts := []string{"Hello, world", "naïve café — 東京 🙂🙃 Ünïcödé", "{\"a\": [1, 2.5e-3, null]}\n\ttabs"}
	for _, name := range tokenizerNames {
		t.Run(name, func(t *testing.T) {
			tok := loadTestTokenizer(t, name)
			anchor := tok.Encode("a", false)
			prefix := tok.Decode(anchor, false)
			checked := 0
			for id := range int32(tok.VocabSize()) {
				b, ok := tok.TokenBytes(id)
				if _, has := tok.Token(id); !has || tok.IsSpecial(id) {
					if ok {
						t.Fatalf("id %d: special or missing token has bytes %q", id, b)
					}
					continue
				}
				if !ok {
					t.Fatalf("id %d: no bytes", id)
				}
				if !utf8.Valid(b) {
					continue
				}
				got := tok.Decode(append(append([]int32{}, anchor...), id), false)
				if got != prefix+string(b) {
					t.Fatalf("id %d: Decode after %q = %q, want %q", id, prefix, got, prefix+string(b))
				}
				checked++
			}
			if checked < tok.VocabSize()/2 {
				t.Errorf("only %d of %d tokens checked", checked, tok.VocabSize())
			}
			for _, text := range texts {
				ids := tok.Encode(text, false)
				var all []byte
				for _, id := range ids {
					b, _ := tok.TokenBytes(id)
					all = append(all, b...)
				}
				if want := tok.Decode(ids, false); string(all) != want && string(bytes.TrimPrefix(all, []byte(" "))) != want {
					t.Errorf("%q: token bytes spell %q, Decode %q", text, all, want)
				}
				if !strings.Contains(string(all), strings.TrimSpace(text)) {
					t.Errorf("%q: token bytes %q", text, all)
				}
			}
		})
	}
}
