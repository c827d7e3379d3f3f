package constraint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

// A Matcher is what the engine's requests take.
var _ engine.Constraint = (*constraint.Matcher)(nil)

// requireTestdata skips a test whose fetched data is missing, or fails it when CI requires the data.
func requireTestdata(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := fmt.Sprintf("%s is missing: run .ci/setup.d/25-constraint-testdata.sh", path)
	if os.Getenv("GOLLM_REQUIRE_TESTDATA") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// goldenBytes is the vocabulary of the golden checkpoints (512 ids, no real tokenizer): ids 3-258
// are the bytes 0-255; 0-2 (pad, BOS, EOS) and the rest are special.
type goldenBytes struct{}

func (goldenBytes) TokenBytes(id int32) ([]byte, bool) {
	if id < 3 || id > 258 {
		return nil, false
	}
	return []byte{byte(id - 3)}, true
}

func (goldenBytes) Decode(ids []int32, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		if bs, ok := (goldenBytes{}).TokenBytes(id); ok {
			b = append(b, bs...)
		} else if !skipSpecial {
			b = fmt.Appendf(b, "<%d>", id)
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (goldenBytes) Encode(text string) []int32 {
	ids := []int32{1}
	for i := range len(text) {
		ids = append(ids, int32(text[i])+3)
	}
	return ids
}

// sampleModel is a model with its tokenizer, for constrained sampling.
type sampleModel struct {
	name   string
	model  *model.Model
	tok    engine.Tokenizer
	src    constraint.TokenSource
	prompt []int32
}

func loadSampleModel(t *testing.T, name, dir string, real bool) sampleModel {
	t.Helper()
	f, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, model.Options{NumBlocks: 1024, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	sm := sampleModel{name: name, model: m}
	if real {
		tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		sm.tok, sm.src, sm.prompt = tok, tok, tok.Encode("// JSON:\n", true)
	} else {
		sm.tok, sm.src, sm.prompt = goldenBytes{}, goldenBytes{}, goldenBytes{}.Encode("JSON: ")
	}
	return sm
}

// sampleSchemas are nested schemas whose strings and arrays are bounded, so that a weak model's
// output must end within max_tokens (≥ 90% of them).
var sampleSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":120},
	  "tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":3},
	  "address":{"type":"object","properties":{"city":{"type":"string","maxLength":6},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},
	    "required":["city"],"additionalProperties":false}},
	  "required":["name","age","address"],"additionalProperties":false}`,
	`{"type":"array","items":{"anyOf":[{"type":"boolean"},{"type":"null"},{"enum":["x","y",3]},
	  {"type":"object","properties":{"v":{"type":"number","exclusiveMinimum":-1,"maximum":1}},"required":["v"],"additionalProperties":false}]},
	  "minItems":1,"maxItems":4}`,
	`{"$defs":{"node":{"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":99},
	  "kind":{"enum":["leaf","branch"]},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":1}},
	  "required":["id","kind"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
	`{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"day":{"type":"string","format":"date"},
	  "id":{"type":"string","format":"uuid"},"mail":{"type":"string","format":"email","maxLength":12},
	  "pair":{"type":"array","prefixItems":[{"type":"string","maxLength":3},{"type":"integer","exclusiveMaximum":10,"minimum":-10}],"items":false,"minItems":2},
	  "mode":{"const":"fast"},"extra":{"type":["string","null"],"maxLength":4}},
	  "required":["when","day","id","pair","mode"],"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{"type":"integer","multipleOf":3,"minimum":-30,"maximum":30},"b":{"type":"number","multipleOf":0.5,"exclusiveMaximum":10,"minimum":0},
	  "c":{"type":["boolean","string"],"format":"ipv4"},"d":{"type":"string","format":"duration","maxLength":12}},
	  "additionalProperties":false,"minProperties":1,"maxProperties":2}`,
	`{"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":9}},"required":["id"],
	  "patternProperties":{"^x_":{"type":"string","maxLength":3}},"propertyNames":{"maxLength":4},
	  "additionalProperties":{"type":"boolean"},"maxProperties":3}`,
}

var sampleRegexes = []string{`[a-z]{1,6}(-[0-9]{2})?`, `(yes|no|maybe)!?`, `\d{3}-[A-F]{2}\.(x|yz)`}

type sampleCase struct {
	Kind    string          `json:"kind"`
	Schema  json.RawMessage `json:"schema,omitempty"`
	Regex   string          `json:"regex,omitempty"`
	Outputs []string        `json:"outputs"`
}

// TestSamplesValidate generates constrained outputs at temperature 1 with random-weight golden
// models (a byte vocabulary) and the built-in model (its real byte-level BPE tokenizer), and has
// ajv (JSON Schema) and JavaScript's RegExp judge every output that stopped (EOS or the constraint
// done); at least 90% must stop within max_tokens.
func TestSamplesValidate(t *testing.T) {
	script := "testdata/validate.mjs"
	requireTestdata(t, "testdata/npm/node_modules/ajv/package.json")
	requireTestdata(t, "testdata/npm/node_modules/ajv-formats/package.json")
	defDir, err := defaultmodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	models := []sampleModel{
		loadSampleModel(t, "golden llama3", "../../model/testdata/golden/llama3_f32_untied_v4", false),
		loadSampleModel(t, "golden gqa4", "../../model/testdata/golden/gqa4_f16_tied_v5", false),
		loadSampleModel(t, "default", defDir, true),
	}
	// Under the race detector (ten times slower) a few samples of one model check the paths; the
	// plain run judges the full set.
	perSpec, minChecked := 24, 200
	if constraint.RaceEnabled || testing.Short() {
		models, perSpec, minChecked = models[:1], 2, 10
	}
	var cases []sampleCase
	for _, sm := range models {
		e, err := engine.New(sm.model, sm.tok, engine.Config{MaxNumSeqs: 64, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		vocab, err := constraint.NewVocabulary(sm.src, sm.model.Config().VocabSize)
		if err != nil {
			t.Fatal(err)
		}
		var specs []constraint.Spec
		for _, s := range sampleSchemas {
			specs = append(specs, constraint.Spec{Kind: constraint.JSONSchema, Text: s})
		}
		for _, r := range sampleRegexes {
			specs = append(specs, constraint.Spec{Kind: constraint.Regex, Text: r})
		}
		for si, spec := range specs {
			g, err := constraint.Compile(spec, vocab, constraint.Options{})
			if err != nil {
				t.Fatalf("%s: compile %s: %v", sm.name, spec.Text, err)
			}
			texts, stopped := generate(t, e, g, sm.prompt, perSpec, uint64(si))
			if stopped < (perSpec*9+9)/10 {
				t.Errorf("%s: %s: %d of %d outputs stopped within max_tokens", sm.name, spec.Text, stopped, perSpec)
			}
			c := sampleCase{Kind: string(spec.Kind), Outputs: texts}
			if spec.Kind == constraint.Regex {
				c.Regex = spec.Text
			} else {
				c.Schema = json.RawMessage(spec.Text)
			}
			cases = append(cases, c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
		cancel()
	}
	checked := 0
	for _, c := range cases {
		checked += len(c.Outputs)
	}
	path := filepath.Join(t.TempDir(), "samples.json")
	data, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", script, path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	var res struct {
		Checked int
		Invalid []struct {
			Case   int
			Output string
			Error  string
		}
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if res.Checked != checked || checked < minChecked {
		t.Errorf("validator checked %d outputs, want %d (at least %d)", res.Checked, checked, minChecked)
	}
	for _, inv := range res.Invalid {
		c := cases[inv.Case]
		t.Errorf("invalid output %q for %s%s: %s", inv.Output, c.Schema, c.Regex, inv.Error)
	}
	t.Logf("%d outputs that stopped, all judged valid by ajv and RegExp: %d invalid", checked, len(res.Invalid))
}

// generate draws n constrained outputs at temperature 1 and returns the texts of those that stopped
// (EOS, or the constraint done) and how many did.
func generate(t *testing.T, e *engine.Engine, g *constraint.Grammar, prompt []int32, n int, seed uint64) ([]string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	texts := make([]string, n)
	reasons := make([]engine.FinishReason, n)
	var wg sync.WaitGroup
	for i := range n {
		s := seed*1000 + uint64(i)
		st, err := e.Add(ctx, engine.Request{PromptIDs: prompt, MaxTokens: 400, Constraint: g.NewMatcher(),
			Sampling: engine.SamplingParams{Temperature: 1, Seed: &s}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			var sb strings.Builder
			for {
				o, err := st.Recv(ctx)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
				sb.WriteString(o.Text)
				if o.Finished() {
					reasons[i] = o.FinishReason
					if o.Err != nil {
						t.Errorf("request failed: %v", o.Err)
					}
				}
			}
			texts[i] = sb.String()
		})
	}
	wg.Wait()
	stopped := []string{}
	for i, r := range reasons {
		if i == 0 && r != engine.FinishStop {
			t.Logf("did not stop (%s): %q", r, texts[i])
		}
		if r == engine.FinishStop {
			stopped = append(stopped, texts[i])
		}
	}
	return stopped, len(stopped)
}
