package constraint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// suiteDir holds the JSON-Schema-Test-Suite's draft 4 cases (npm json-schema-test-suite, installed
// by .ci/setup.d/25-constraint-testdata.sh): the newest draft published on npm. Its keywords mean
// the same in draft 2020-12, which this package follows, but for those noted in suiteSkip.
const suiteDir = "testdata/npm/node_modules/json-schema-test-suite/tests/draft4"

// suiteFiles are the suite's files run: every required one, and the optional ones about what
// this package implements (format; bignum: numbers of any length).
var suiteFiles = []string{"optional/format.json", "optional/bignum.json"}

// suiteSkip lists the suite files not run and why.
var suiteSkip = map[string]string{
	// Draft 4 alone calls 1.0 not an integer; drafts 6 to 2020-12 (and ajv) call it one.
	"optional/zeroTerminatedFloats.json": "draft 4 only: 1.0 is not an integer",
}

// TestJSONSchemaTestSuite: for every case of the suite whose schema compiles, the compiled grammar
// accepts each instance the suite calls valid (in one of its serializations: keys in some order,
// numbers canonical) and rejects each invalid one in every serialization tried. Cases whose schema
// is refused are counted by keyword file; a refusal must name what it refuses (ErrUnsupported).
func TestJSONSchemaTestSuite(t *testing.T) {
	requireSuite(t)
	entries, err := filepath.Glob(filepath.Join(suiteDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, filepath.Base(e))
	}
	files = append(files, suiteFiles...)
	v := testVocab(t)
	var report []string
	totalPass, totalRefused := 0, 0
	for _, file := range files {
		if suiteSkip[file] != "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(suiteDir, file))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := decodeOrdered(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		groups, _ := doc.([]any)
		pass, refused, instances := 0, 0, 0
		reasons := map[string]bool{}
		for _, gv := range groups {
			group := gv.(*jsonObject)
			desc, _ := group.vals["description"].(string)
			schemaText, err := canonicalJSON(group.vals["schema"])
			if err != nil {
				t.Fatal(err)
			}
			g, err := compileLazy(Spec{Kind: JSONSchema, Text: schemaText}, v, Options{})
			tests, _ := group.vals["tests"].([]any)
			if err != nil {
				if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrEmpty) {
					t.Errorf("%s: %q: refused without naming an unsupported feature: %v", file, desc, err)
				}
				refused += len(tests)
				reasons[refusal(err)] = true
				continue
			}
			for _, tv := range tests {
				tc := tv.(*jsonObject)
				tdesc, _ := tc.vals["description"].(string)
				valid, _ := tc.vals["valid"].(bool)
				texts := serializations(tc.vals["data"])
				instances++
				accepted := ""
				for _, text := range texts {
					if g.match([]byte(text)) {
						accepted = text
						break
					}
				}
				switch {
				case valid && accepted == "":
					t.Errorf("%s: %q: %q: valid instance rejected in all %d serializations (e.g. %s)", file, desc, tdesc, len(texts), texts[0])
				case !valid && accepted != "":
					t.Errorf("%s: %q: %q: invalid instance accepted as %s", file, desc, tdesc, accepted)
				default:
					pass++
				}
			}
		}
		totalPass += pass
		totalRefused += refused
		var rs []string
		for r := range reasons {
			rs = append(rs, r)
		}
		sort.Strings(rs)
		report = append(report, strings.TrimSuffix(file, ".json")+": "+itoa(pass)+"/"+itoa(instances)+" pass, "+itoa(refused)+" refused "+strings.Join(rs, "; "))
	}
	for _, line := range report {
		t.Log(line)
	}
	t.Logf("total: %d instances pass exactly, %d in refused schemas", totalPass, totalRefused)
	if totalPass < 150 {
		t.Errorf("only %d instances checked", totalPass)
	}
}

func requireSuite(t *testing.T) {
	t.Helper()
	needTestdata(t, suiteDir, ".ci/setup.d/25-constraint-testdata.sh")
}

func itoa(n int) string { return strconv.Itoa(n) }

// refusal shortens a compile error to what it refuses.
func refusal(err error) string {
	s := err.Error()
	if i := strings.Index(s, "unsupported: "); i >= 0 {
		s = s[i+len("unsupported: "):]
	}
	if i := strings.Index(s, " (at"); i >= 0 {
		s = s[:i]
	}
	return s
}

// maxSerializations caps the serializations tried per instance.
const maxSerializations = 256

// serializations returns ways to write v as JSON: compact and spaced, with each object's keys in
// every order (up to a cap), numbers written canonically (no exponent; 1.0 as 1).
func serializations(v any) []string {
	var out []string
	for _, spaced := range []bool{false, true} {
		out = append(out, variants(v, spaced)...)
	}
	return out
}

func variants(v any, spaced bool) []string {
	sepComma, sepColon := ",", ":"
	if spaced {
		sepComma, sepColon = ", ", ": "
	}
	switch t := v.(type) {
	case []any:
		acc := []string{"["}
		for i, x := range t {
			sub := variants(x, spaced)
			var next []string
			for _, a := range acc {
				for _, s := range sub {
					if len(next) >= maxSerializations {
						break
					}
					if i > 0 {
						next = append(next, a+sepComma+s)
					} else {
						next = append(next, a+s)
					}
				}
			}
			acc = next
		}
		for i := range acc {
			acc[i] += "]"
		}
		return acc
	case *jsonObject:
		var out []string
		permute(slices.Clone(t.keys), func(keys []string) bool {
			acc := []string{"{"}
			for i, k := range keys {
				key, _ := canonicalJSON(k)
				sub := variants(t.vals[k], spaced)
				var next []string
				for _, a := range acc {
					for _, s := range sub {
						if len(next) >= maxSerializations {
							break
						}
						if i > 0 {
							a2 := a + sepComma
							next = append(next, a2+key+sepColon+s)
						} else {
							next = append(next, a+key+sepColon+s)
						}
					}
				}
				acc = next
			}
			for _, a := range acc {
				out = append(out, a+"}")
			}
			return len(out) < maxSerializations
		})
		return out
	}
	s, err := canonicalJSON(v)
	if err != nil {
		return nil
	}
	return []string{s}
}

// permute calls f with each order of keys (Heap's algorithm) until f returns false.
func permute(keys []string, f func([]string) bool) {
	var gen func(k int) bool
	gen = func(k int) bool {
		if k <= 1 {
			return f(keys)
		}
		for i := 0; i < k; i++ {
			if !gen(k - 1) {
				return false
			}
			if k%2 == 0 {
				keys[i], keys[k-1] = keys[k-1], keys[i]
			} else {
				keys[0], keys[k-1] = keys[k-1], keys[0]
			}
		}
		return true
	}
	gen(len(keys))
}
