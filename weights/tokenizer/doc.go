// Package tokenizer loads a HuggingFace tokenizer.json and turns text into token ids and back,
// agreeing token for token with HuggingFace's own tokenizers library.
//
// It owns the whole text⇄ids path: added and special tokens, normalizers (NFC, NFD, NFKC, NFKD,
// Lowercase, Strip, Prepend, Replace, Sequence), pre-tokenizers (ByteLevel, Split, Digits, Metaspace,
// Sequence), the BPE model (byte fallback, unknown token, ignore_merges), post-processors
// (TemplateProcessing, ByteLevel, Sequence) and decoders (ByteLevel, Replace, ByteFallback, Fuse,
// Strip, Metaspace, Sequence), plus a streaming detokenizer for generated tokens. It must not read
// model weights, chat templates or tokenizer_config.json (package weights does that), and it never
// touches the network.
//
// Example:
//
//	tok, err := tokenizer.Load("/models/llama3/tokenizer.json")
//	if err != nil { ... }
//	ids := tok.Encode("Hello, world", true)       // with BOS where the post-processor adds one
//	text := tok.Decode(ids, true)                 // skip special tokens
//	sd := tok.NewStreamDecoder(true)
//	for _, id := range generated { fmt.Print(sd.Next(id)) }
//	fmt.Print(sd.Flush())
//
// # Relation to gotokenizers
//
// github.com/nlpodyssey/gotokenizers v0.2.0 was the intended BPE core. Its pieces were read and
// measured; none is used on the encode path, for these reasons (each is also noted where our
// replacement lives):
//   - bpemodel.Word.MergeAll removes merged symbols one by one with append (quadratic in the word
//     length) and boxes every heap entry in an interface; BPEModel has no byte fallback, no
//     ignore_merges, and its word cache is an unimplemented stub. bpe.go has our own merge loop,
//     the same algorithm as HuggingFace's Word::merge_all, and a bounded cache.
//   - bytelevelpretokenizer compiles its split regex with IgnoreCase (HuggingFace does not) and
//     prepends a space unless the text starts with any Unicode space (HuggingFace checks ' ' only).
//   - splitpattern converts rune offsets from the start of the string on every regexp2 match, which
//     is quadratic; pattern.go converts them incrementally.
//   - vocabulary.Vocabulary assigns ids by insertion order and keeps id→token in a map; we keep a
//     slice indexed by the ids written in the file.
//
// gotokenizers' merge loop is still used as an independent check: bpe_test.go compares our merges
// with bpemodel.Word.MergeAll on random words.
//
// # Speed
//
// Encoding is single-threaded per call and safe for concurrent use. The split patterns of the
// GPT-2, Llama 3 and Qwen 2/3 byte-level tokenizers (recognised by their exact text) run through a
// hand-written matcher that is checked against regexp2 by a differential fuzz test; any other
// pattern runs through regexp2. docs/bench/tokenizer-cpu.md has the measured throughput beside
// HuggingFace's.
package tokenizer
