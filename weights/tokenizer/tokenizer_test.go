package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestAppendLossyUTF8(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"ascii", []byte("abc"), "abc"},
		{"valid multibyte", []byte("é你😀"), "é你😀"},
		// The example of Unicode's "U+FFFD substitution of maximal subparts" (Table 3-8).
		{"unicode table 3-8", []byte{0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64}, "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
		{"truncated 3-byte at end", []byte{'x', 0xE4, 0xBD}, "x\uFFFD"},
		{"truncated 4-byte at end", []byte{0xF0, 0x9F, 0x98}, "\uFFFD"},
		{"surrogate", []byte{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"},
		{"overlong", []byte{0xC0, 0xAF}, "\uFFFD\uFFFD"},
		{"E0 bad second", []byte{0xE0, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD"},
		{"above U+10FFFF", []byte{0xF4, 0x90, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"lone continuation", []byte{0x80}, "\uFFFD"},
		{"FF", []byte{0xFF, 'a'}, "\uFFFDa"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendLossyUTF8(nil, tc.in)); got != tc.want {
				t.Errorf("appendLossyUTF8(% x) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteToRune[b]
		if seen[r] {
			t.Fatalf("rune %U used twice", r)
		}
		seen[r] = true
		if runeToByte[r] != int16(b) {
			t.Fatalf("runeToByte[%U] = %d, want %d", r, runeToByte[r], b)
		}
	}
	if byteToRune[' '] != 'Ġ' || byteToRune['\n'] != 'Ċ' || byteToRune['A'] != 'A' {
		t.Errorf("space→%q newline→%q A→%q, want Ġ Ċ A", byteToRune[' '], byteToRune['\n'], byteToRune['A'])
	}
	s := "héllo 😀\n\t\x00"
	if got, ok := byteLevelDecodeStrict(byteLevelEncode(s)); !ok || got != s {
		t.Errorf("round trip of %q gave %q, %v", s, got, ok)
	}
}

func TestParseErrors(t *testing.T) {
	valid := string(tinyByteLevelJSON(t, false))
	tests := []struct {
		name    string
		json    string
		wantErr error
	}{
		{"not json", "{", ErrMalformed},
		{"wordpiece", `{"model": {"type": "WordPiece", "vocab": {}}}`, ErrUnsupported},
		{"dropout", `{"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}}`, ErrUnsupported},
		{"merge with unknown token", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}`, ErrMalformed},
		{"merged token missing", `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}}`, ErrMalformed},
		{"merge not a pair", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}`, ErrMalformed},
		{"unk missing", `{"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0}, "merges": []}}`, ErrMalformed},
		{"negative id", `{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}`, ErrMalformed},
		{"huge id", `{"model": {"type": "BPE", "vocab": {"a": 2000000000}, "merges": []}}`, ErrMalformed},
		{"sparse id", `{"model": {"type": "BPE", "vocab": {"a": 67108862}, "merges": []}}`, ErrMalformed},
		{"sparse added id", `{"added_tokens": [{"id": 9999999, "content": "x"}], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`, ErrMalformed},
		{"added token without id", `{"added_tokens": [{"content": "x"}], "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrMalformed},
		{"unknown normalizer", `{"normalizer": {"type": "BertNormalizer"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported},
		{"unknown pre-tokenizer", `{"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported},
		{"bad behavior", `{"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrMalformed},
		{"bad regex", `{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported},
		{"pattern without kind", `{"normalizer": {"type": "Replace", "pattern": {}, "content": ""}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrMalformed},
		{"unknown decoder", `{"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported},
		{"metaspace scheme", `{"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrMalformed},
		{"template missing token", `{"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {}}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrMalformed},
		{"valid", valid, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.json))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Parse error %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load("testdata/does-not-exist.json"); err == nil || !strings.Contains(err.Error(), "does-not-exist") {
		t.Fatalf("Load of a missing file: error %v", err)
	}
}

// Merges written as "a b" strings and as ["a", "b"] pairs must give the same tokenizer.
func TestMergeForms(t *testing.T) {
	fromStrings, err := Parse(tinyByteLevelJSON(t, false))
	if err != nil {
		t.Fatal(err)
	}
	fromPairs, err := Parse(tinyByteLevelJSON(t, true))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"the then and thin", "  \n\n 123 café", "héllo<|eot|>world"} {
		a, b := fromStrings.Encode(s, false), fromPairs.Encode(s, false)
		if !slices.Equal(a, b) {
			t.Errorf("%q: string merges %v, pair merges %v", s, a, b)
		}
	}
}

func TestTinyTokenizer(t *testing.T) {
	tok := tinyByteLevel(t)
	the, _ := tok.TokenID("Ġthe")
	eot, _ := tok.TokenID("<|eot|>")
	tests := []struct {
		text string
		want []int32
	}{
		{"", nil},
		{" the", []int32{the}},
		{"<|eot|>", []int32{eot}},
		{"a<|eot|> the", []int32{'a', eot, the}},
	}
	for _, tc := range tests {
		if got := tok.Encode(tc.text, true); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if !tok.IsSpecial(eot) || tok.IsSpecial(the) || tok.IsSpecial(-1) || tok.IsSpecial(1<<30) {
		t.Error("IsSpecial is wrong")
	}
	if got := tok.Decode([]int32{'a', eot, the, -5, 1 << 30}, true); got != "a the" {
		t.Errorf("Decode skipping specials and unknown ids = %q, want %q", got, "a the")
	}
	if s, ok := tok.Token(the); !ok || s != "Ġthe" {
		t.Errorf("Token(%d) = %q, %v", the, s, ok)
	}
	if _, ok := tok.Token(-1); ok {
		t.Error("Token(-1) exists")
	}
	if tok.VocabSize() != int(eot)+1 {
		t.Errorf("VocabSize = %d, want %d", tok.VocabSize(), eot+1)
	}
	// Invalid UTF-8 input is replaced, never passed to the model as raw bytes.
	if got := tok.Decode(tok.Encode("a\xffb", false), false); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 round trip = %q", got)
	}
}

func TestRealTokenizerAPI(t *testing.T) {
	tests := []struct {
		name      string
		vocabSize int
		bos       string
		bosID     int32
		word      string
		wordID    int32
	}{
		{"llama3", 128256, "<|begin_of_text|>", 128000, "Hello", 9906},
		{"qwen3", 151669, "<|im_start|>", 151644, "Hello", 9707},
		{"mistral", 32000, "<s>", 1, "▁Hello", 22557},
		{"llama2", 32000, "<s>", 1, "▁Hello", 15043},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := loadTestTokenizer(t, tc.name)
			if got := tok.VocabSize(); got != tc.vocabSize {
				t.Errorf("VocabSize = %d, want %d", got, tc.vocabSize)
			}
			if id, ok := tok.TokenID(tc.bos); !ok || id != tc.bosID || !tok.IsSpecial(id) {
				t.Errorf("TokenID(%q) = %d, %v (special %v), want %d special", tc.bos, id, ok, tok.IsSpecial(id), tc.bosID)
			}
			if id, ok := tok.TokenID(tc.word); !ok || id != tc.wordID || tok.IsSpecial(id) {
				t.Errorf("TokenID(%q) = %d, %v, want %d not special", tc.word, id, ok, tc.wordID)
			}
			if s, ok := tok.Token(tc.wordID); !ok || s != tc.word {
				t.Errorf("Token(%d) = %q, %v, want %q", tc.wordID, s, ok, tc.word)
			}
		})
	}
}

// Encode is safe for concurrent use (run with -race), and the word cache does not change results.
func TestConcurrentEncode(t *testing.T) {
	tok := tinyByteLevel(t)
	texts := []string{"the cat and the hat", "  123 café\n\nthe end", "then there", "<|eot|> in on"}
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, false)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := (g + i) % len(texts)
				if got := tok.Encode(texts[k], false); !slices.Equal(got, want[k]) {
					t.Errorf("concurrent Encode(%q) = %v, want %v", texts[k], got, want[k])
					return
				}
			}
		}()
	}
	wg.Wait()
}

// The word cache is bounded: once full it starts over, and results stay the same.
func TestWordCacheBounded(t *testing.T) {
	c := newWordCache(4)
	for i := range 10 {
		c.put(strings.Repeat("x", i+1), []int32{int32(i)})
		if len(c.words) > 4 {
			t.Fatalf("cache holds %d words, capacity 4", len(c.words))
		}
	}
	if ids, ok := c.get("xxxxxxxxxx"); !ok || !slices.Equal(ids, []int32{9}) {
		t.Errorf("last word: %v, %v", ids, ok)
	}
	var nilCache *wordCache
	nilCache.put("a", nil)
	if _, ok := nilCache.get("a"); ok {
		t.Error("nil cache returned a hit")
	}
}

func TestDecodeValidUTF8(t *testing.T) {
	tok := tinyByteLevel(t)
	// Single bytes of a multi-byte character decode to U+FFFD, never to invalid UTF-8.
	for _, ids := range [][]int32{{0xE4}, {0xE4, 0xBD}, {0xE4, 0xBD, 0xA0}, {0xBD, 'a'}, {0xFF}} {
		got := tok.Decode(ids, false)
		if !utf8.ValidString(got) {
			t.Errorf("Decode(%v) = %q is not valid UTF-8", ids, got)
		}
		if want := string(appendLossyUTF8(nil, toBytes(ids))); got != want {
			t.Errorf("Decode(%v) = %q, want %q", ids, got, want)
		}
	}
}

func toBytes(ids []int32) []byte {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return b
}
