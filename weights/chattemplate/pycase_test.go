package chattemplate

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// pyCasingPath is written by testdata/pycasing.py: Python's case mappings of each code point, and the
// cased and case-ignorable characters.
const pyCasingPath = "testdata/pycasing.txt"

// newInGo are the characters whose case properties Go's Unicode (unicode.Version, 15.0) has and the
// Unicode 14.0 of the Python that wrote the table (3.11) does not: characters new in Unicode 15.0,
// which are cased or case-ignorable (their mappings are the identity in both), and four older
// modifier letters that Unicode 15.0 made Other_Lowercase, so cased. Python 3.12 (Unicode 15.0)
// agrees with Go on them.
var newInGo = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x0ece, Hi: 0x0ece, Stride: 1}, // Lao Yamakkan
		{Lo: 0x10fc, Hi: 0x10fc, Stride: 1}, // Other_Lowercase since 15.0
		{Lo: 0xa7f2, Hi: 0xa7f4, Stride: 1}, // Other_Lowercase since 15.0
		{Lo: 0xab69, Hi: 0xab69, Stride: 1}, // Other_Lowercase since 15.0
	},
	R32: []unicode.Range32{
		{Lo: 0x10efd, Hi: 0x10eff, Stride: 1}, // Arabic small low word marks
		{Lo: 0x11241, Hi: 0x11241, Stride: 1}, // Khojki vowel sign vocalic R
		{Lo: 0x11f00, Hi: 0x11f01, Stride: 1}, // Kawi signs
		{Lo: 0x11f36, Hi: 0x11f3a, Stride: 1}, // Kawi vowel signs
		{Lo: 0x11f40, Hi: 0x11f40, Stride: 1},
		{Lo: 0x11f42, Hi: 0x11f42, Stride: 1},
		{Lo: 0x13439, Hi: 0x13440, Stride: 1}, // Egyptian hieroglyph format controls
		{Lo: 0x13447, Hi: 0x13455, Stride: 1},
		{Lo: 0x1df25, Hi: 0x1df2a, Stride: 1}, // Latin small letters with retroflex hook
		{Lo: 0x1e030, Hi: 0x1e06d, Stride: 1}, // Cyrillic modifier letters
		{Lo: 0x1e08f, Hi: 0x1e08f, Stride: 1}, // combining Cyrillic letter Byelorussian-Ukrainian I
		{Lo: 0x1e4eb, Hi: 0x1e4ef, Stride: 1}, // Nag Mundari signs
	},
}

// TestPythonCasing: str.upper, lower, title, casefold and swapcase of every single code point, and
// the cased and case-ignorable properties the final-sigma rule reads, as Python has them.
func TestPythonCasing(t *testing.T) {
	f, err := os.Open(pyCasingPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	maps := map[rune][]string{}
	props := map[string]map[rune]bool{"cased": {}, "ignorable": {}}
	hexRune := func(s string) rune {
		n, err := strconv.ParseUint(s, 16, 32)
		if err != nil {
			t.Fatalf("%s: %v", pyCasingPath, err)
		}
		return rune(n)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0 || strings.HasPrefix(fields[0], "#"):
		case fields[0] == "mapping" && len(fields) == 7:
			r := hexRune(fields[1])
			var want []string
			for _, m := range fields[2:] {
				if m == "." {
					want = append(want, string(r))
					continue
				}
				var s []rune
				for _, h := range strings.Split(m, "+") {
					s = append(s, hexRune(h))
				}
				want = append(want, string(s))
			}
			maps[r] = want
		case props[fields[0]] != nil && len(fields) == 3:
			for r := hexRune(fields[1]); r <= hexRune(fields[2]); r++ {
				props[fields[0]][r] = true
			}
		default:
			t.Fatalf("%s: bad line %q", pyCasingPath, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(maps) < 2000 {
		t.Fatalf("%s: only %d mappings", pyCasingPath, len(maps))
	}
	names := []string{"upper", "lower", "title", "casefold", "swapcase"}
	funcs := []func(string) string{pyUpper, pyLower, pyTitle, pyCasefold, pySwapcase}
	bad := 0
	for r := rune(0); r <= unicode.MaxRune && bad < 20; r++ {
		if r >= 0xd800 && r <= 0xdfff || unicode.Is(newInGo, r) {
			continue
		}
		s := string(r)
		want := maps[r]
		for i, f := range funcs {
			w := s
			if want != nil {
				w = want[i]
			}
			if got := f(s); got != w {
				t.Errorf("%U %s: got %+q, want %+q", r, names[i], got, w)
				bad++
			}
		}
		if got, want := isCased(r), props["cased"][r]; got != want {
			t.Errorf("%U: cased %v, want %v", r, got, want)
			bad++
		}
		if got, want := isCaseIgnorable(r), props["ignorable"][r]; got != want {
			t.Errorf("%U: case-ignorable %v, want %v", r, got, want)
			bad++
		}
	}
}
