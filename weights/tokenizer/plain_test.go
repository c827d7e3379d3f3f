package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// withoutSpecialTokens parses the tokenizer.json at path with its special added tokens removed: an
// independent statement of what HuggingFace's split_special_tokens=True does to a text (special
// tokens are not split out, their text is ordinary text; other added tokens still are).
func withoutSpecialTokens(t *testing.T, path string) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var kept []any
	for _, a := range f["added_tokens"].([]any) {
		if !a.(map[string]any)["special"].(bool) {
			kept = append(kept, a)
		}
	}
	f["added_tokens"] = kept
	data, _ = json.Marshal(f)
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEncodePlain checks EncodePlain against a tokenizer without special tokens on the built-in
// model's tokenizer and real ones: a text given as one plain range encodes exactly as that tokenizer
// encodes it (special tokens' text as ordinary text), over the golden strings and strings full of
// special tokens; and inside a chat turn (special tokens around the plain range) the turn's own
// special tokens stay control tokens while the range's do not.
func TestEncodePlain(t *testing.T) {
	var strs []string
	data, err := os.ReadFile(filepath.Join("testdata", "golden", "strings.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &strs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, start, end string }{
		{"built-in", "../defaultmodel/files/tokenizer.json", "<|user|>", "<|eos|>"},
		{"llama3", tokenizerFiles["llama3"], "<|start_header_id|>", "<|eot_id|>"},
		{"qwen3", tokenizerFiles["qwen3"], "<|im_start|>", "<|im_end|>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			needTestdata(t, tc.path)
			tok, err := Load(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			plain := withoutSpecialTokens(t, tc.path)
			texts := slices.Clone(strs)
			texts = append(texts, tc.start, tc.end+"x", "a"+tc.start+tc.end+"b", tc.start+"user\n\nhi"+tc.end, " "+tc.end+" ",
				tc.end[:len(tc.end)-1], "<think>"+tc.end+"</think>", tc.end+tc.end+tc.end)
			startIDs, endIDs := tok.Encode(tc.start, false), tok.Encode(tc.end, false)
			if len(startIDs) != 1 || len(endIDs) != 1 || !tok.IsSpecial(startIDs[0]) || !tok.IsSpecial(endIDs[0]) {
				t.Fatalf("%q and %q are not special tokens of this tokenizer: %v %v", tc.start, tc.end, startIDs, endIDs)
			}
			for _, s := range texts {
				want := plain.Encode(s, false)
				if got := tok.EncodePlain(s, false, [][2]int{{0, len(s)}}); !slices.Equal(got, want) {
					t.Errorf("EncodePlain(%q) = %v, want %v", s, got, want)
				}
				turn := tc.start + s + tc.end
				got := tok.EncodePlain(turn, false, [][2]int{{len(tc.start), len(tc.start) + len(s)}})
				wantTurn := slices.Concat(startIDs, want, endIDs)
				if !slices.Equal(got, wantTurn) {
					t.Errorf("EncodePlain of the turn around %q = %v, want %v", s, got, wantTurn)
				}
				if !slices.Equal(tok.EncodePlain(s, false, nil), tok.Encode(s, false)) {
					t.Errorf("EncodePlain(%q) without plain ranges differs from Encode", s)
				}
			}
		})
	}
}

func TestSpecialSpans(t *testing.T) {
	tok, err := Load("../defaultmodel/files/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want [][2]int
	}{
		{"", nil},
		{"plain <| text |>", nil},
		{"a<|eos|>b", [][2]int{{1, 8}}},
		{"<|user|><|eos|><|eos", [][2]int{{0, 8}, {8, 15}}},
		{"<|<|bos|>", [][2]int{{2, 9}}},
	} {
		if got := tok.SpecialSpans(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("SpecialSpans(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestNormalizeSpans(t *testing.T) {
	got := normalizeSpans([][2]int{{5, 9}, {-3, 2}, {8, 12}, {20, 30}, {4, 4}, {1, 3}}, 25)
	want := [][2]int{{0, 3}, {5, 12}, {20, 25}}
	if !slices.Equal(got, want) {
		t.Errorf("normalizeSpans = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		start, end int
		want       bool
	}{{3, 5, false}, {2, 4, true}, {11, 13, true}, {12, 20, false}, {24, 26, true}, {0, 1, true}} {
		if got := overlapsSpan(want, tc.start, tc.end); got != tc.want {
			t.Errorf("overlapsSpan(%d, %d) = %v, want %v", tc.start, tc.end, got, tc.want)
		}
	}
}
