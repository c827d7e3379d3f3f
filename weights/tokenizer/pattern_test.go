package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

type testSpan struct {
	Start, End int
	Match      bool
}

func spansOf(p pattern, s string) []testSpan {
	var out []testSpan
	p.findMatches(s, func(start, end int, isMatch bool) { out = append(out, testSpan{start, end, isMatch}) })
	return out
}

var fastPatterns = []struct {
	name string
	expr string
}{
	{"gpt2", gpt2Pattern},
	{"llama3", llama3Pattern},
	{"qwen2", qwen2Pattern},
}

// checkFastPattern compares the hand-written matcher with regexp2 running the same pattern text.
func checkFastPattern(t *testing.T, s string) {
	t.Helper()
	for _, fp := range fastPatterns {
		fast, ok := lookupFastPattern(fp.expr)
		if !ok {
			t.Fatalf("%s pattern not recognised", fp.name)
		}
		re, err := compileRegexPattern(fp.expr)
		if err != nil {
			t.Fatal(err)
		}
		got, want := spansOf(fast, s), spansOf(re, s)
		if !slices.Equal(got, want) {
			t.Fatalf("%s pattern on %q:\n  fast    %s\n  regexp2 %s", fp.name, s, showSpans(s, got), showSpans(s, want))
		}
	}
}

func showSpans(s string, spans []testSpan) string {
	parts := make([]string, len(spans))
	for i, sp := range spans {
		mark := ""
		if !sp.Match {
			mark = "!"
		}
		parts[i] = fmt.Sprintf("%s%q", mark, s[sp.Start:sp.End])
	}
	return strings.Join(parts, " ")
}

// TestFastPatternMatchesRegexp2 runs the differential check on the golden strings and on random
// strings drawn from the characters the patterns treat specially.
func TestFastPatternMatchesRegexp2(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "golden", "strings.json"))
	if err != nil {
		t.Fatal(err)
	}
	var strs []string
	if err := json.Unmarshal(data, &strs); err != nil {
		t.Fatal(err)
	}
	for _, s := range strs {
		checkFastPattern(t, s)
	}
	alphabet := []rune("aZé你'sStTrRevVmMlLdD 0123٣½\t\n\r\u00a0\u3000.,!-_😀\u0301")
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		n := r.IntN(16)
		var sb strings.Builder
		for range n {
			sb.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		checkFastPattern(t, sb.String())
	}
}

func FuzzFastPattern(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "I'm 'S 'll", "  \n\n\t x", "123456 1.5", "你好 ٣", "a\r\n\r\nb   ", "'", " '", "?!\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		checkFastPattern(t, s)
	})
}

// TestRegexPatternOffsets checks the rune→byte offset conversion of the regexp2 path on
// multi-byte text, against the literal substrings.
func TestRegexPatternOffsets(t *testing.T) {
	re, err := compileRegexPattern(`\p{L}+`)
	if err != nil {
		t.Fatal(err)
	}
	s := "😀 héllo, 你好! wörld"
	var words []string
	for _, sp := range spansOf(re, s) {
		if sp.Match {
			words = append(words, s[sp.Start:sp.End])
		}
	}
	if want := []string{"héllo", "你好", "wörld"}; !slices.Equal(words, want) {
		t.Errorf("matches %q, want %q", words, want)
	}
}

// BenchmarkSplit compares the fast matcher and regexp2 on the same pattern and text, and shows the
// regexp2 path is linear: the MB/s stays flat as the text grows.
func BenchmarkSplit(b *testing.B) {
	para := "The quick brown fox, 12345 times! Привет мир. 你好世界。 func main() {\n\tfmt.Println(\"hi\")\n}\n  \n😀👍🏽 don't\r\n"
	re, err := compileRegexPattern(llama3Pattern)
	if err != nil {
		b.Fatal(err)
	}
	fast, _ := lookupFastPattern(llama3Pattern)
	for _, size := range []int{16 << 10, 256 << 10} {
		text := strings.Repeat(para, size/len(para))
		for _, p := range []struct {
			name string
			pat  pattern
		}{{"fast", fast}, {"regexp2", re}} {
			b.Run(fmt.Sprintf("%s/%dKB", p.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					p.pat.findMatches(text, func(int, int, bool) {})
				}
			})
		}
	}
}
