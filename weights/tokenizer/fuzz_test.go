package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzParse feeds arbitrary tokenizer.json contents to Parse: it must return an error or a working
// tokenizer, never panic, and a tokenizer it returns must encode and decode without panicking.
func FuzzParse(f *testing.F) {
	f.Add(string(tinyByteLevelJSON(f, false)))
	f.Add(string(tinyByteLevelJSON(f, true)))
	seeds := []string{
		`{}`, `null`, `[]`, `{"model": null}`,
		`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`,
		`{"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true, "vocab": {"<unk>": 0, "<0x61>": 1, "b": 2}, "merges": []},
		  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
		  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 1}]}}`,
		`{"added_tokens": [{"id": 3, "content": "<s>", "special": true, "lstrip": true, "rstrip": true, "single_word": true, "normalized": false}],
		  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}, {"type": "Digits", "individual_digits": true},
		    {"type": "Split", "pattern": {"Regex": "\\s+|x(?=y)"}, "behavior": "MergedWithNext", "invert": true}]},
		  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"ids": [3]}}},
		  "model": {"type": "BPE", "vocab": {"a": 0, "▁": 1, "▁a": 2}, "merges": [["▁", "a"]]}}`,
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		tok, err := Parse([]byte(data))
		if err != nil {
			return
		}
		for _, text := range []string{"", "a ab  <s>x y 12 ▁", "\xff\n\t 😀"} {
			ids := tok.Encode(text, true)
			out := tok.Decode(ids, false)
			if !utf8.ValidString(out) {
				t.Fatalf("Decode gave invalid UTF-8 %q", out)
			}
			d := tok.NewStreamDecoder(true)
			for _, id := range ids {
				d.Next(id)
			}
			d.Flush()
		}
	})
}

// FuzzRoundTrip checks decode(encode(s)) == s on valid UTF-8 for byte-level tokenizers: the tiny
// one always, and Llama 3 and Qwen 3 (whose NFC normalizer makes it NFC(s)) when the npm test
// data is installed.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "  \n\n\t x", "<|eot|>a", "<|begin_of_text|>hi<|im_end|>", "你好 😀 👨‍👩‍👧", "e\u0301", "x\u00a0\u3000y", "'s'S'll 123456"} {
		f.Add(s)
	}
	type subject struct {
		tok *Tokenizer
		nfc bool
	}
	subjects := []subject{{tok: tinyByteLevel(f)}}
	for _, name := range []string{"llama3", "qwen3"} {
		if fileExists(tokenizerFiles[name]) {
			subjects = append(subjects, subject{tok: loadTestTokenizer(f, name), nfc: name == "qwen3"})
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, sub := range subjects {
			want := s
			if sub.nfc {
				want = norm.NFC.String(s)
			}
			ids := sub.tok.Encode(s, false)
			if got := sub.tok.Decode(ids, false); got != want {
				t.Fatalf("decode(encode(%q)) = %q, ids %v", s, got, ids)
			}
			var sb strings.Builder
			d := sub.tok.NewStreamDecoder(false)
			for _, id := range ids {
				sb.WriteString(d.Next(id))
			}
			sb.WriteString(d.Flush())
			if sb.String() != want {
				t.Fatalf("streamed %q, want %q", sb.String(), want)
			}
		}
	})
}
