package constraint

import (
	"math/rand/v2"
	"testing"
)

// listSource is a vocabulary given as byte strings; ids whose entry is empty have no bytes.
type listSource []string

func (l listSource) TokenBytes(id int32) ([]byte, bool) {
	if int(id) >= len(l) || l[id] == "" {
		return nil, false
	}
	return []byte(l[id]), true
}

// testVocab is every byte, then multi-byte tokens that cross JSON's syntax (`",`, `"}`, `":`),
// split UTF-8 characters, and words; then one id with no bytes (a special token).
func testVocab(t testing.TB) *Vocabulary {
	t.Helper()
	var l listSource
	for b := range 256 {
		l = append(l, string([]byte{byte(b)}))
	}
	l = append(l, `",`, `"}`, `":`, `": "`, `", "`, `{"`, `"]`, `["`, `},`, `}}`, `]}`, `null`, `true`, `false`,
		`12`, `345`, `0.`, `.5`, `e+`, `-1`, `name`, `age`, ` "`, "\n  ", `\n`, `\"`, `\u00`, "é", "東京", "\xe6\x9d", "\xb1\xe4",
		"🙂", `abc`, `a"`, `"a`, "  ", `"name": "`, `-0`, `2024-`, `-01`, `T12:`, `:00Z`, `@`, `.com`, "")
	v, err := NewVocabulary(l, len(l)+3)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func compileT(t testing.TB, spec Spec, v *Vocabulary) *Grammar {
	t.Helper()
	g, err := Compile(spec, v, Options{})
	if err != nil {
		t.Fatalf("compile %s %q: %v", spec.Kind, spec.Text, err)
	}
	return g
}

// checkMatches fails t for each string of accept that g rejects and each of reject that it accepts.
func checkMatches(t testing.TB, g *Grammar, accept, reject []string) {
	t.Helper()
	for _, s := range accept {
		if !g.match([]byte(s)) {
			t.Errorf("rejects %q", s)
		}
	}
	for _, s := range reject {
		if g.match([]byte(s)) {
			t.Errorf("accepts %q", s)
		}
	}
}

// bruteMask is the mask by definition: the tokens Accept takes.
func bruteMask(m *Matcher) []uint64 {
	v := m.g.vocab
	dst := make([]uint64, v.MaskWords())
	for id := range int32(v.size) {
		if m.Accept(id) == nil {
			dst[id>>6] |= 1 << (id & 63)
			m.Rollback(1)
		}
	}
	return dst
}

// randomWalk draws tokens from the mask (and stops on completion with probability pStop), checking
// each mask against bruteMask; it returns the text.
func randomWalk(t *testing.T, g *Grammar, rng *rand.Rand, steps int, pStop float64) (string, bool) {
	t.Helper()
	m := g.NewMatcher()
	mask := make([]uint64, g.vocab.MaskWords())
	var out []byte
	for range steps {
		m.Mask(mask)
		want := bruteMask(m)
		for i := range mask {
			if mask[i] != want[i] {
				t.Fatalf("after %q: mask word %d = %064b, want %064b", out, i, mask[i], want[i])
			}
		}
		if m.Complete() && (rng.Float64() < pStop || maskCount(mask) == 0) {
			return string(out), true
		}
		n := maskCount(mask)
		if n == 0 {
			t.Fatalf("after %q: no token allowed and not complete", out)
		}
		k := rng.IntN(n)
		for id := range int32(g.vocab.size) {
			if mask[id>>6]&(1<<(id&63)) != 0 {
				if k == 0 {
					if err := m.Accept(id); err != nil {
						t.Fatalf("after %q: masked token %d refused: %v", out, id, err)
					}
					out = append(out, g.vocab.tokens[id]...)
					break
				}
				k--
			}
		}
	}
	return string(out), m.Complete()
}
