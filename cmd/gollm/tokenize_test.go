package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gollm/gollm/engine/llm"
)

// tinyTokenizerJSON is a hand-made tokenizer.json: no pre-tokenizer, a few merges, BOS "<s>"
// added by the post-processor, and a Fuse decoder.
const tinyTokenizerJSON = `{
  "added_tokens": [{"id": 9, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [9], "tokens": ["<s>"]}}},
  "decoder": {"type": "Fuse"},
  "model": {"type": "BPE", "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "he": 4, "ll": 5, "hell": 6, "hello": 7, " ": 8},
    "merges": ["h e", "l l", "he ll", "hell o"]}
}`

func TestTokenize(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tinyTokenizerJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "tokenizer.json")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"encode with model dir", []string{"--model", dir, "hello hello"}, 0, "7 8 7\n", ""},
		{"encode with file", []string{"--tokenizer", file, "hello"}, 0, "7\n", ""},
		{"add special", []string{"--tokenizer", file, "--add-special", "hello"}, 0, "9 7\n", ""},
		{"special token in text", []string{"--tokenizer", file, "<s>hello"}, 0, "9 7\n", ""},
		{"json", []string{"--tokenizer", file, "--json", "hello hell"}, 0, `{"ids":[7,8,6]}` + "\n", ""},
		{"json empty", []string{"--tokenizer", file, "--json", ""}, 0, `{"ids":[]}` + "\n", ""},
		{"decode", []string{"--tokenizer", file, "--decode", "9,7, 8,6"}, 0, "<s>hello hell\n", ""},
		{"decode skip special", []string{"--tokenizer", file, "--decode", "9,7", "--skip-special"}, 0, "hello\n", ""},
		{"decode json", []string{"--tokenizer", file, "--decode", "7,8,7", "--json"}, 0, `{"text":"hello hello"}` + "\n", ""},
		{"decode nothing", []string{"--tokenizer", file, "--decode", ""}, 0, "\n", ""},
		{"help", []string{"--help"}, 0, "", "usage: gollm tokenize"},
		{"both", []string{"--model", dir, "--tokenizer", file, "hello"}, 2, "", "not both"},
		{"no text", []string{"--tokenizer", file}, 2, "", "exactly one TEXT"},
		{"two texts", []string{"--tokenizer", file, "a", "b"}, 2, "", "exactly one TEXT"},
		{"bad id", []string{"--tokenizer", file, "--decode", "1,x"}, 2, "", `"x" is not a token id`},
		{"negative id", []string{"--tokenizer", file, "--decode", "-1"}, 2, "", `"-1" is not a token id`},
		{"decode with text", []string{"--tokenizer", file, "--decode", "1", "hello"}, 2, "", "no TEXT"},
		{"unknown flag", []string{"--frobnicate"}, 2, "", "unknown flag"},
		{"missing file", []string{"--tokenizer", filepath.Join(dir, "nope.json"), "x"}, 1, "", "nope.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"tokenize"}, tc.args...), &out, &errb)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d (stderr %q)", code, tc.wantCode, errb.String())
			}
			if tc.wantCode == 0 && out.String() != tc.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tc.wantOut)
			}
			if !strings.Contains(errb.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", errb.String(), tc.wantErr)
			}
		})
	}
}

// Without --model or --tokenizer, tokenize uses the built-in model's tokenizer, as generate and serve
// use the built-in model.
func TestTokenizeDefaultModel(t *testing.T) {
	tok, err := llm.LoadTokenizer("")
	if err != nil {
		t.Fatal(err)
	}
	const text = "func main() {"
	ids := tok.Encode(text, false)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"encode", []string{text}, strings.Join(parts, " ") + "\n"},
		{"decode", []string{"--decode", strings.Join(parts, ",")}, text + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"tokenize"}, tc.args...)...)
			if code != 0 || stdout != tc.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, tc.want)
			}
		})
	}
}

// TestTokenizeLlama3 runs the command on a real tokenizer when the npm test data is installed
// (see .ci/setup.d/20-tokenizer-testdata.sh); ids from HuggingFace tokenizers.
func TestTokenizeLlama3(t *testing.T) {
	file := filepath.Join("..", "..", "weights", "tokenizer", "testdata", "npm", "node_modules", "@lenml", "tokenizer-llama3", "models", "tokenizer.json")
	if _, err := os.Stat(file); err != nil {
		if os.Getenv("GOLLM_REQUIRE_TESTDATA") == "1" {
			t.Fatalf("%s is missing: run .ci/setup.d/20-tokenizer-testdata.sh", file)
		}
		t.Skipf("%s is missing: run .ci/setup.d/20-tokenizer-testdata.sh", file)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"tokenize", "--tokenizer", file, "Hello world<|eot_id|>"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got, want := out.String(), "9906 1917 128009\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}
