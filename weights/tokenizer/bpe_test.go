package tokenizer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nlpodyssey/gotokenizers/models/bpemodel"
)

// randomMerges builds a random vocabulary over a small alphabet and merges in rank order, where
// different pairs may produce the same token ("a"+"bc" and "ab"+"c"), as in real files.
func randomMerges(r *rand.Rand) (vocab map[string]int32, merges [][2]string) {
	vocab = map[string]int32{}
	tokens := []string{}
	for _, c := range "abcdef" {
		vocab[string(c)] = int32(len(vocab))
		tokens = append(tokens, string(c))
	}
	seen := map[[2]string]bool{}
	for len(merges) < 60 {
		pair := [2]string{tokens[r.IntN(len(tokens))], tokens[r.IntN(len(tokens))]}
		if seen[pair] || len(pair[0])+len(pair[1]) > 6 {
			continue
		}
		seen[pair] = true
		merged := pair[0] + pair[1]
		if _, ok := vocab[merged]; !ok {
			vocab[merged] = int32(len(vocab))
			tokens = append(tokens, merged)
		}
		merges = append(merges, pair)
	}
	return vocab, merges
}

// TestMergeMatchesGotokenizers checks our merge loop (both the short-word scan and the heap) against
// gotokenizers' Word.MergeAll, an independent port of HuggingFace's Word::merge_all.
func TestMergeMatchesGotokenizers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		vocab, merges := randomMerges(r)
		m, err := newBPEModel(vocab, merges, "", "", "", false, false, false)
		if err != nil {
			t.Fatal(err)
		}
		ref := bpemodel.NewMergeMap()
		for rank, p := range merges {
			ref.Set(int(vocab[p[0]]), int(vocab[p[1]]), bpemodel.MergeValue{Rank: rank, ID: int(vocab[p[0]+p[1]])})
		}
		for range 50 {
			n := 1 + r.IntN(3*shortWordSymbols)
			word := make([]byte, n)
			for i := range word {
				word[i] = "abcdef"[r.IntN(6)]
			}
			syms := m.initialSymbols(string(word), nil)
			got := m.mergeSymbols(slices.Clone(syms), nil)

			w := bpemodel.NewWord()
			for _, id := range syms {
				w.Add(int(id), 1)
			}
			w.MergeAll(ref, 0)
			want := make([]int32, 0, w.Len())
			for _, s := range *w {
				want = append(want, int32(s.ID))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("round %d, word %q: got %v, gotokenizers %v", round, word, got, want)
			}
			// The short scan and the heap must agree on every length.
			if heap := m.mergeHeap(slices.Clone(syms), nil); !slices.Equal(heap, want) {
				t.Fatalf("round %d, word %q: heap %v, want %v", round, word, heap, want)
			}
		}
	}
}

func TestInitialSymbols(t *testing.T) {
	vocab := map[string]int32{"<unk>": 0, "a": 1, "b": 2, "<0x63>": 3, "##b": 4, "a</w>": 5}
	tests := []struct {
		name                 string
		unk                  string
		prefix, suffix       string
		fuseUnk, byteFallbck bool
		word                 string
		want                 []int32
	}{
		{"plain", "<unk>", "", "", false, false, "ab", []int32{1, 2}},
		{"unknown not fused", "<unk>", "", "", false, false, "axyb", []int32{1, 0, 0, 2}},
		{"unknown fused", "<unk>", "", "", true, false, "axyb", []int32{1, 0, 2}},
		{"no unk token drops", "", "", "", false, false, "axb", []int32{1, 2}},
		{"byte fallback", "<unk>", "", "", true, true, "acb", []int32{1, 3, 2}},
		{"byte fallback incomplete", "<unk>", "", "", true, true, "adb", []int32{1, 0, 2}},
		{"prefix and suffix", "<unk>", "##", "</w>", false, false, "bba", []int32{2, 4, 0}},
		{"suffix on last", "<unk>", "", "</w>", false, false, "a", []int32{5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newBPEModel(vocab, nil, tc.unk, tc.prefix, tc.suffix, tc.fuseUnk, tc.byteFallbck, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.initialSymbols(tc.word, nil); !slices.Equal(got, tc.want) {
				t.Errorf("initialSymbols(%q) = %v, want %v", tc.word, got, tc.want)
			}
		})
	}
}

// BenchmarkMergeLongWord shows the merge loop stays n log n on a long word (HuggingFace's
// algorithm; gotokenizers' removal of merged symbols is quadratic here).
func BenchmarkMergeLongWord(b *testing.B) {
	tok := tinyByteLevel(b)
	for _, n := range []int{1 << 10, 1 << 14} {
		word := make([]byte, n)
		for i := range word {
			word[i] = ' '
		}
		b.Run(itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				tok.model.tokenizeRawBytes(string(word), nil)
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for ; n > 0; n /= 10 {
		i--
		buf[i] = byte('0' + n%10)
	}
	return string(buf[i:])
}
