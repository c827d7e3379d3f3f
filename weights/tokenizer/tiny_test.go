package tokenizer

import (
	"encoding/json"
	"testing"
)

// tinyByteLevelJSON builds a small self-contained byte-level tokenizer.json (the 256 byte tokens,
// a few merges, an added token), so that tests and fuzzers run without the npm test data.
func tinyByteLevelJSON(t testing.TB, pairMerges bool) []byte {
	t.Helper()
	vocab := map[string]int32{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = int32(b)
	}
	mergeList := [][2]string{
		{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"e", "r"}, {"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"},
		{"o", "n"}, {"Ġa", "n"}, {"Ġan", "d"}, {"Ċ", "Ċ"}, {"1", "2"}, {"12", "3"}, {"Ã", "©"},
	}
	for _, m := range mergeList {
		merged := m[0] + m[1]
		if _, ok := vocab[merged]; !ok {
			vocab[merged] = int32(len(vocab))
		}
	}
	var merges any
	if pairMerges {
		merges = mergeList
	} else {
		var strs []string
		for _, m := range mergeList {
			strs = append(strs, m[0]+" "+m[1])
		}
		merges = strs
	}
	eot := int32(len(vocab))
	file := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": eot, "content": "<|eot|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		},
		"normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": llama3Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": true, "vocab": vocab, "merges": merges,
		},
	}
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func tinyByteLevel(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Parse(tinyByteLevelJSON(t, false))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
