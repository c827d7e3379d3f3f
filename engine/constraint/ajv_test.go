package constraint

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// schemaCase is a schema with instances it must accept and reject.
type schemaCase struct {
	name   string
	schema string
	accept []string
	reject []string
}

// checkWithAjv has ajv (draft 2020-12, with ajv-formats; testdata/validate.mjs) judge every
// instance of the cases, and fails the test where ajv disagrees with a case's table: the tables
// are the reference's verdicts, not a guess. It skips the check when the npm test data is missing.
func checkWithAjv(t *testing.T, cases []schemaCase) {
	t.Helper()
	needTestdata(t, "testdata/npm/node_modules/ajv-formats/package.json", ".ci/setup.d/25-constraint-testdata.sh")
	type ajvCase struct {
		Kind    string          `json:"kind"`
		Schema  json.RawMessage `json:"schema"`
		Outputs []string        `json:"outputs"`
	}
	var in []ajvCase
	for _, c := range cases {
		in = append(in, ajvCase{Kind: "json_schema", Schema: json.RawMessage(c.schema), Outputs: append(append([]string{}, c.accept...), c.reject...)})
	}
	data, err := json.Marshal(map[string]any{"cases": in})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cases.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "testdata/validate.mjs", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node testdata/validate.mjs: %v\n%s", err, stderr.String())
	}
	var res struct {
		Invalid []struct {
			Case   int
			Output string
		}
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	invalid := make([]map[string]bool, len(cases))
	for i := range invalid {
		invalid[i] = map[string]bool{}
	}
	for _, inv := range res.Invalid {
		invalid[inv.Case][inv.Output] = true
	}
	for i, c := range cases {
		for _, s := range c.accept {
			if invalid[i][s] {
				t.Errorf("%s: ajv rejects %s, which the table accepts", c.name, s)
			}
		}
		for _, s := range c.reject {
			if !invalid[i][s] {
				t.Errorf("%s: ajv accepts %s, which the table rejects", c.name, s)
			}
		}
	}
}

// checkSchemaCases compiles each case and checks its table.
func checkSchemaCases(t *testing.T, cases []schemaCase) {
	t.Helper()
	v := testVocab(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := compileT(t, Spec{Kind: JSONSchema, Text: c.schema}, v)
			checkMatches(t, g, c.accept, c.reject)
		})
	}
}
