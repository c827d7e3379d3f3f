package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights/tokenizer"
	"github.com/gollm/gollm/weights/weightstest"
)

// writeTestModel writes a tiny random LLaMA (2 layers, hidden 64, GQA 4/2) with a byte-level BPE
// tokenizer (the 256 GPT-2 byte symbols, a few merges, <s> and </s> specials) into a temporary folder.
func writeTestModel(t *testing.T) string {
	t.Helper()
	return writeTestModelEdited(t, nil)
}

// writeTestModelEdited is writeTestModel with edit applied to the weights (weightstest.WriteLlamaEdited).
func writeTestModelEdited(t *testing.T, edit func(name string, values []float32)) string {
	t.Helper()
	dir := t.TempDir()
	weightstest.WriteLlamaEdited(t, dir, testModelConfig, 11, edit)
	writeTestTokenizer(t, dir)
	return dir
}

// testModelConfig is the config.json of writeTestModel's model.
var testModelConfig = map[string]any{
	"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
	"vocab_size": 300, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
	"num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
	"rms_norm_eps": 1e-5, "bos_token_id": 256, "eos_token_id": 257, "torch_dtype": "float32",
}

// writeTestModelFP8 is writeTestModel with FP8 weights in form (weightstest.WriteFP8, bfloat16 for the
// rest; its config says dtype through torch_dtype, which stays float32's).
func writeTestModelFP8(t *testing.T, form weightstest.FP8Form) string {
	t.Helper()
	dir := t.TempDir()
	config := map[string]any{}
	for k, v := range testModelConfig {
		config[k] = v
	}
	delete(config, "torch_dtype")
	weightstest.WriteFP8(t, dir, config, 11, form, weightstest.FP8Scales{Input: 0.01, K: 0.05, V: 0.02})
	writeTestTokenizer(t, dir)
	return dir
}

// writeTestTokenizer writes writeTestModel's generation config and tokenizer into dir.
func writeTestTokenizer(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "generation_config.json"), []byte(`{"bos_token_id": 256, "eos_token_id": [257, 258]}`))

	// GPT-2's byte → symbol table: printable bytes stand for themselves, the rest map to 256+n.
	vocab := map[string]int{}
	next := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE {
			vocab[string(rune(b))] = b
		} else {
			vocab[string(rune(256+next))] = b
			next++
		}
	}
	// Two merges so that encoding is not the identity: "Ġt" (space t) and "he".
	vocab["Ġt"] = 259
	vocab["he"] = 260
	tok := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 256, "content": "<s>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
			{"id": 257, "content": "</s>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
			{"id": 258, "content": "<eot>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
		},
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false,
			"vocab": vocab, "merges": []string{"Ġ t", "h e"},
		},
	}
	data, _ := json.Marshal(tok)
	writeFile(t, filepath.Join(dir, "tokenizer.json"), data)
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestGenerateJSON(t *testing.T) {
	dir := writeTestModel(t)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompt", "the cat", "--max-tokens", "12",
		"--temperature", "0", "--ignore-eos", "--json", "--kv-blocks", "64")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var got generationJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	if want := tok.Encode("the cat", true); !slices.Equal(got.PromptIDs, want) {
		t.Errorf("prompt_ids %v, want %v", got.PromptIDs, want)
	}
	if len(got.OutputIDs) != 12 || got.FinishReason != "length" || got.Usage.CompletionTokens != 12 {
		t.Errorf("got %d tokens, finish %q, usage %+v; want 12, length", len(got.OutputIDs), got.FinishReason, got.Usage)
	}
	if want := tok.Decode(got.OutputIDs, true); got.Text != want {
		t.Errorf("text %q, want the decoded ids %q", got.Text, want)
	}
	// The decode rate needs the tokens after the first to arrive after it: a reader that wakes once all
	// 12 are out (a loaded machine) receives them in one output, and then the rate is 0, not a guess.
	tm := got.Timings
	spread := tm.TotalSeconds > tm.TTFTSeconds
	if tm.LoadSeconds <= 0 || tm.PrefillTokensPerSecond <= 0 || tm.TTFTSeconds <= 0 || tm.TotalSeconds < tm.TTFTSeconds ||
		spread != (tm.DecodeTokensPerSecond > 0) || tm.DecodeTokensPerSecond < 0 {
		t.Errorf("timings %+v", tm)
	}

	// Streaming prints the same greedy text.
	code, streamed, stderr := runCLI(t, "generate", "--model", dir, "--prompt", "the cat", "--max-tokens", "12",
		"--temperature", "0", "--ignore-eos", "--kv-blocks", "64")
	if code != 0 || streamed != got.Text+"\n" {
		t.Errorf("streamed %q (exit %d, %s), want %q", streamed, code, stderr, got.Text+"\n")
	}

	// --prompt-ids gives the same as the text it encodes.
	ids := make([]string, len(got.PromptIDs))
	for i, id := range got.PromptIDs {
		ids[i] = strings.TrimSpace(string(mustJSON(t, id)))
	}
	code, stdout, stderr = runCLI(t, "generate", "--model", dir, "--prompt-ids", strings.Join(ids, ","), "--max-tokens", "12",
		"--temperature", "0", "--ignore-eos", "--json", "--kv-blocks", "64")
	var again generationJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &again) != nil || !slices.Equal(again.OutputIDs, got.OutputIDs) {
		t.Errorf("--prompt-ids run: exit %d, %s, %s", code, stdout, stderr)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGeneratePromptsFile(t *testing.T) {
	dir := writeTestModel(t)
	lines := []string{
		`{"prompt": "hello there", "max_tokens": 5, "temperature": 0}`,
		`{"prompt_ids": [1, 2, 3], "max_tokens": 3, "temperature": 0.8, "top_p": 0.9, "top_k": 20, "min_p": 0.01, "seed": 7}`,
		``,
		`{"prompt_ids": [4, 5], "max_tokens": 7, "temperature": 0, "stop": ["zzz"]}`,
		`{"prompt": "x", "temperature": 0, "stop": "q", "max_tokens": 4}`,
		`{"prompt": "x", "max_tokenz": 4}`,
		`{"prompt_ids": [1, 2], "max_tokens": 3, "temperature": 0.8, "seed": 7}`,
	}
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	writeFile(t, path, []byte(strings.Join(lines, "\n")))
	code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompts-file", path, "--ignore-eos", "--kv-blocks", "64", "--max-num-seqs", "4")
	if code != 1 { // the misspelled field fails its line, and only its line
		t.Fatalf("exit %d, want 1; stderr %s", code, stderr)
	}
	if !strings.Contains(stderr, `unknown field "max_tokenz"`) || !strings.Contains(stderr, "prompts.jsonl:6") {
		t.Errorf("stderr does not name the bad line: %s", stderr)
	}
	var got []generationJSON
	for line := range strings.SplitSeq(strings.TrimSpace(stdout), "\n") {
		var g generationJSON
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, g)
	}
	wantTokens := []int{5, 3, 7, 4, 0, 3}
	if len(got) != len(wantTokens) {
		t.Fatalf("%d output lines, want %d:\n%s", len(got), len(wantTokens), stdout)
	}
	for i, g := range got {
		if g.Index == nil || *g.Index != i {
			t.Errorf("line %d has index %v", i, g.Index)
		}
		if len(g.OutputIDs) > wantTokens[i] || (i != 3 && i != 4 && len(g.OutputIDs) != wantTokens[i]) {
			t.Errorf("line %d: %d tokens, want %d", i, len(g.OutputIDs), wantTokens[i])
		}
	}
	if got[4].Error == "" || got[4].FinishReason != "" {
		t.Errorf("bad line: %+v", got[4])
	}
	if !slices.Equal(got[1].PromptIDs, []int32{1, 2, 3}) {
		t.Errorf("prompt_ids %v", got[1].PromptIDs)
	}

	// The same seeded line alone gives the same tokens as in the batch.
	alone := filepath.Join(t.TempDir(), "alone.jsonl")
	writeFile(t, alone, []byte(lines[1]+"\n"))
	code, stdout, stderr = runCLI(t, "generate", "--model", dir, "--prompts-file", alone, "--ignore-eos", "--kv-blocks", "64")
	var one generationJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &one) != nil || !slices.Equal(one.OutputIDs, got[1].OutputIDs) {
		t.Errorf("seeded line alone: exit %d, %s %s; batch gave %v", code, stdout, stderr, got[1].OutputIDs)
	}
}

func TestGenerateUsageErrors(t *testing.T) {
	dir := writeTestModel(t)
	missing := filepath.Join(dir, "nope")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"--help"}, 0, "usage: gollm generate"},
		{"no prompt", []string{"--model", dir}, 2, "exactly one of"},
		{"two prompts", []string{"--model", dir, "--prompt", "a", "--prompt-ids", "1"}, 2, "exactly one of"},
		{"bad ids", []string{"--model", dir, "--prompt-ids", "1,x"}, 2, "--prompt-ids"},
		{"negative id", []string{"--model", missing, "--prompt-ids", "1,-2"}, 2, "--prompt-ids: token id -2 is negative"},
		{"missing folder", []string{"--model", filepath.Join(dir, "nope"), "--prompt", "hi"}, 1, "nope: no such model folder"},
		{"empty folder", []string{"--model", t.TempDir(), "--prompt", "hi"}, 1, "config.json"},
		{"prompt argument and flag", []string{"--model", dir, "--prompt", "a", "b"}, 2, "exactly one of"},
		{"two prompt arguments", []string{"--model", dir, "a", "b"}, 2, "want one PROMPT argument (quote it), got 2"},
		{"unknown flag", []string{"--frobnicate"}, 2, "unknown flag"},
		{"prompt too long", []string{"--model", dir, "--prompt-ids", strings.Repeat("1,", 300) + "1", "--kv-blocks", "64"}, 1, "prompt too long"},
		// Sampling flags are checked before the model loads: the missing folder is never opened.
		{"bad top-p", []string{"--model", missing, "hi", "--top-p", "3"}, 2, "top_p 3 must lie in (0, 1]"},
		{"negative temperature", []string{"--model", missing, "hi", "--temperature", "-1"}, 2, "temperature -1 must be >= 0"},
		{"NaN temperature", []string{"--model", missing, "hi", "--temperature", "NaN"}, 2, "temperature NaN"},
		{"infinite temperature", []string{"--model", missing, "hi", "--temperature", "+Inf"}, 2, "temperature +Inf must be a finite number"},
		{"top-k -2", []string{"--model", missing, "hi", "--top-k", "-2"}, 2, "top_k -2"},
		{"min-p 2", []string{"--model", missing, "hi", "--min-p", "2"}, 2, "min_p 2"},
		{"negative repetition penalty", []string{"--model", missing, "hi", "--repetition-penalty", "-1"}, 2, "repetition_penalty -1"},
		{"presence penalty 3", []string{"--model", missing, "hi", "--presence-penalty", "3"}, 2, "presence_penalty 3"},
		{"frequency penalty -3", []string{"--model", missing, "hi", "--frequency-penalty", "-3"}, 2, "frequency_penalty -3"},
		{"max tokens 0", []string{"--model", missing, "hi", "--max-tokens", "0"}, 2, "--max-tokens 0 must be at least 1"},
		{"temperature not a number", []string{"--model", missing, "hi", "--temperature", "hot"}, 2, "invalid argument \"hot\""},
		{"negative kv blocks", []string{"--model", dir, "--prompt", "hi", "--kv-blocks", "-1"}, 2, "--kv-blocks"},
		{"zero page size", []string{"--model", dir, "--prompt", "hi", "--page-size", "0"}, 2, "--page-size"},
		{"negative max model len", []string{"--model", dir, "--prompt", "hi", "--max-model-len", "-1"}, 2, "--max-model-len"},
		{"max model len past the context", []string{"--model", dir, "--prompt", "hi", "--max-model-len", "300"}, 1, "longer than the model's context (max_position_embeddings 256)"},
		{"max model len past the cache", []string{"--model", missing, "--prompt", "hi", "--max-model-len", "200", "--kv-blocks", "4"}, 2, "does not fit the KV cache"},
		{"prompt past max model len", []string{"--model", dir, "--prompt-ids", strings.Repeat("1,", 40) + "1", "--max-model-len", "32"}, 1, "prompt too long"},
		{"negative max num seqs", []string{"--model", dir, "--prompt", "hi", "--max-num-seqs", "-3"}, 2, "--max-num-seqs"},
		{"zero max batched tokens", []string{"--model", dir, "--prompt", "hi", "--max-batched-tokens", "0"}, 2, "--max-batched-tokens"},
		{"unknown device", []string{"--model", missing, "--prompt", "hi", "--device", "tpu"}, 2, `unknown device "tpu"`},
		// Constraints are checked before the model loads: the missing folder is never opened.
		{"two constraints", []string{"--model", missing, "hi", "--regex", "a", "--choice", "b"}, 2, "--regex and --choice each constrain the output"},
		{"regex syntax", []string{"--model", missing, "hi", "--regex", "(a"}, 2, "--regex: constraint: regex: syntax error"},
		{"unsupported schema keyword", []string{"--model", missing, "hi", "--json-schema", writeTemp(t, `{"not":{}}`)}, 2, `JSON Schema keyword "not"`},
		{"schema not JSON", []string{"--model", missing, "hi", "--json-schema", writeTemp(t, `{`)}, 2, "--json-schema: constraint: json_schema: syntax error"},
		{"missing schema file", []string{"--model", missing, "hi", "--json-schema", missing}, 2, "--json-schema: open"},
		{"grammar syntax", []string{"--model", missing, "hi", "--grammar", writeTemp(t, "root ::= (")}, 2, "--grammar: constraint: grammar: syntax error"},
		{"unknown device", []string{"--model", dir, "--prompt", "hi", "--device", "tpu"}, 2, `unknown device "tpu"`},
		{"unknown quantization", []string{"--model", missing, "--prompt", "hi", "--quantization", "int8"}, 2, `--quantization "int8": supported: fp8`},
		{"e5m2 KV cache", []string{"--model", missing, "--prompt", "hi", "--kv-cache-dtype", "fp8_e5m2"}, 2, `--kv-cache-dtype "fp8_e5m2"`},
		// A KV cache no memory holds: an error saying how many pages fit, not makeslice's panic or the
		// runtime's fatal out-of-memory.
		{"kv blocks beyond any slice", []string{"--model", dir, "--prompt", "hi", "--kv-blocks", "1000000000000"}, 1, "KV cache does not fit in memory: 1000000000000 pages of 16 tokens need 7.28 PiB"},
		{"kv blocks beyond memory", []string{"--model", dir, "--prompt", "hi", "--kv-blocks", "100000000"}, 1, "pages fit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"generate"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// The prompt is a positional argument too, as in ollama run: the same request as --prompt.
func TestGeneratePromptArgument(t *testing.T) {
	dir := writeTestModel(t)
	common := []string{"generate", "--model", dir, "--max-tokens", "6", "--temperature", "0", "--ignore-eos", "--json", "--kv-blocks", "64"}
	outputs := map[string]generationJSON{}
	for name, args := range map[string][]string{
		"flag":                 {"--prompt", "the cat"},
		"argument":             {"the cat"},
		"argument, flags last": nil,
	} {
		full := append(slices.Clone(common), args...)
		if args == nil {
			full = []string{"generate", "the cat", "--model", dir, "--max-tokens", "6", "--temperature", "0", "--ignore-eos", "--json", "--kv-blocks", "64"}
		}
		code, stdout, stderr := runCLI(t, full...)
		var got generationJSON
		if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", name, code, stdout, stderr)
		}
		outputs[name] = got
	}
	want := outputs["flag"]
	for name, got := range outputs {
		if !slices.Equal(got.PromptIDs, want.PromptIDs) || !slices.Equal(got.OutputIDs, want.OutputIDs) || len(got.OutputIDs) != 6 {
			t.Errorf("%s: prompt %v output %v; --prompt gave %v %v", name, got.PromptIDs, got.OutputIDs, want.PromptIDs, want.OutputIDs)
		}
	}
}

// --json with --prompts-file is redundant (the file's answers are always JSON lines): accepted, with
// the same output.
func TestGeneratePromptsFileWithJSON(t *testing.T) {
	dir := writeTestModel(t)
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	writeFile(t, path, []byte(`{"prompt": "the cat", "max_tokens": 3, "temperature": 0}`+"\n"+`{"prompt_ids": [1, 2], "max_tokens": 2, "temperature": 0}`+"\n"))
	strip := func(out string) string { // timings differ from run to run
		return regexp.MustCompile(`"timings":\{[^}]*\}`).ReplaceAllString(out, "")
	}
	var outs []string
	for _, extra := range [][]string{nil, {"--json"}} {
		code, stdout, stderr := runCLI(t, append([]string{"generate", "--model", dir, "--prompts-file", path, "--kv-blocks", "64", "--ignore-eos"}, extra...)...)
		if code != 0 || strings.Count(stdout, "\n") != 2 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", extra, code, stdout, stderr)
		}
		outs = append(outs, strip(stdout))
	}
	if outs[0] != outs[1] {
		t.Errorf("--json changed the output:\n%s\n%s", outs[0], outs[1])
	}
}

// Without --model, generate runs the built-in model (written to the user cache directory).
func TestGenerateDefaultModel(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	code, stdout, stderr := runCLI(t, "generate", "--prompt", "func main() {", "--max-tokens", "4", "--temperature", "0", "--ignore-eos", "--json")
	var got generationJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if len(got.OutputIDs) != 4 || got.FinishReason != "length" || got.Text == "" {
		t.Fatalf("got %+v", got)
	}
}

// Interrupted (ctx cancelled, as by Ctrl-C) once its first line is out, a --prompts-file run still
// writes one line per prompt and exits 130; interrupted while the model loads, it exits 130 at once.
func TestGeneratePromptsFileInterrupted(t *testing.T) {
	dir := writeTestModel(t)
	var lines []string
	for range 12 {
		lines = append(lines, `{"prompt": "the cat", "max_tokens": 200, "ignore_eos": true}`)
	}
	lines[0] = `{"prompt": "the cat", "max_tokens": 1}`
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	writeFile(t, path, []byte(strings.Join(lines, "\n")))
	t.Run("while running", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stdout := &cancelOnWrite{cancel: cancel}
		var stderr bytes.Buffer
		code := runGenerate(ctx, []string{"--model", dir, "--prompts-file", path, "--kv-blocks", "64"}, stdout, &stderr)
		if code != 130 {
			t.Errorf("exit %d, want 130 (interrupted); stderr %s", code, stderr.String())
		}
		// Each later prompt ran to its end before the interruption, or was running and is aborted, or was
		// still being handed to the engine and fails with the interruption (which of these is the
		// scheduler's timing); with 200 tokens each, some are interrupted.
		out := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
		if len(out) != len(lines) {
			t.Fatalf("%d output lines for %d prompts: %s", len(out), len(lines), stdout.String())
		}
		interrupted := 0
		for i, l := range out {
			var got struct {
				FinishReason string `json:"finish_reason"`
				Error        string `json:"error"`
			}
			if err := json.Unmarshal([]byte(l), &got); err != nil {
				t.Fatalf("line %d: %v: %s", i, err, l)
			}
			switch {
			case got.FinishReason == "abort" || strings.Contains(got.Error, context.Canceled.Error()):
				interrupted++
			case got.FinishReason != "length" || got.Error != "":
				t.Errorf("line %d neither finished, aborted nor refused by the interruption: %s", i, l)
			}
		}
		if interrupted == 0 {
			t.Errorf("no request interrupted: %s", stdout.String())
		}
	})
	t.Run("while loading", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var stdout, stderr bytes.Buffer
		code := runGenerate(ctx, []string{"--model", dir, "--prompts-file", path, "--kv-blocks", "64"}, &stdout, &stderr)
		if code != 130 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "interrupted while loading the model") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 130, nothing, and why", code, stdout.String(), stderr.String())
		}
	})
}

// cancelOnWrite is a buffer that calls cancel on its first write.
type cancelOnWrite struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.cancel()
	return w.Buffer.Write(p)
}

// inOrder emits each result as soon as it and those before it are done, even while later ones are
// still waiting for a free slot: a long --prompts-file shows its first lines early, and a request
// that waits for an earlier line to be written cannot deadlock the run.
func TestInOrderEmitsBeforeAllAreSubmitted(t *testing.T) {
	const n, parallel = 6, 2
	firstEmitted := make(chan struct{})
	var emitted []int
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		inOrder(n, parallel, func(i int) *result {
			if i > 0 {
				<-firstEmitted // every later run waits until line 0 is out
			}
			return &result{}
		}, func(i int, _ *result) {
			emitted = append(emitted, i)
			if i == 0 {
				close(firstEmitted)
			}
		})
	}()
	select {
	case <-finished:
	case <-time.After(time.Minute): // only a deadlock gets here
		t.Fatal("inOrder deadlocked: line 0 is written only after every run has been started")
	}
	if !slices.Equal(emitted, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("emitted %v", emitted)
	}
}

// The engine flags of the issue reach the engine: pool size, page size, prefix caching.
func TestGenerateEngineFlags(t *testing.T) {
	dir := writeTestModel(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--kv-blocks", "40", "--page-size", "8", "--no-prefix-cache", "--max-num-seqs", "3", "--max-batched-tokens", "96"},
			[]string{"kv_blocks=40", "block_size=8", "prefix_caching=false", "max_num_seqs=3", "max_batched_tokens=96"}},
		{[]string{"--kv-blocks", "50"}, []string{"kv_blocks=50", "block_size=16", "prefix_caching=true", "quantization=\"\"", "kv_cache_dtype=auto"}},
		// vLLM's name of the prefill chunk.
		{[]string{"--kv-blocks", "50", "--max-num-seqs", "4", "--max-num-batched-tokens", "48", "--long-prefill-token-threshold", "16"},
			[]string{"max_batched_tokens=48", "long_prefill_token_threshold=16"}},
		{[]string{"--kv-blocks", "50", "--quantization", "fp8", "--kv-cache-dtype", "fp8"}, []string{"quantization=fp8", "kv_cache_dtype=fp8"}},
	} {
		args := append([]string{"generate", "--model", dir, "--prompt", "hi", "--max-tokens", "2", "--verbose"}, tc.args...)
		code, _, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %s", tc.args, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: the engine log lacks %q:\n%s", tc.args, w, stderr)
			}
		}
	}
}

// The progress bar is drawn on a terminal only: not into a pipe, a file or a buffer.
// TestLoadProgressLogLines: off a terminal the load's progress is a plain log line (no carriage
// returns) that ends with the whole size, so logs keep a record of the load.
func TestLoadProgressLogLines(t *testing.T) {
	var out bytes.Buffer
	report := loadProgress(&out)
	const total = 3 << 20
	for _, loaded := range []int64{1 << 20, 2 << 20, total} {
		report(loaded, total)
	}
	got := out.String()
	if strings.Contains(got, "\r") {
		t.Errorf("carriage returns in a log: %q", got)
	}
	if !strings.Contains(got, "loading weights") || !strings.Contains(got, "3.15 MB") {
		t.Errorf("log %q: want the label and the total (3.15 MB)", got)
	}
}

func TestLoadHint(t *testing.T) {
	for _, tc := range []struct {
		err      error
		kvBlocks int
		want     string
	}{
		{fmt.Errorf("llm: the weights need more: %w", llm.ErrDoesNotFit), 0, "--max-model-len"},
		// Too many KV pages asked for: Load's error wraps both.
		{fmt.Errorf("llm: KVBlocks 9: %w: %w", llm.ErrDoesNotFit, model.ErrKVTooLarge), 9, "give fewer --kv-blocks"},
		// No --kv-blocks, and the weights leave no memory for one page: fewer pages cannot help.
		{fmt.Errorf("llm: %w: %w", llm.ErrDoesNotFit, model.ErrKVTooLarge), 0, "--quantization fp8"},
		{errors.New("weights: config.json: no such file"), 0, ""},
	} {
		got := loadHint(tc.err, tc.kvBlocks)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("loadHint(%v, %d) = %q, want %q", tc.err, tc.kvBlocks, got, tc.want)
		}
		if tc.kvBlocks == 0 && strings.Contains(got, "fewer --kv-blocks") {
			t.Errorf("loadHint(%v, 0) = %q: no --kv-blocks was given", tc.err, got)
		}
	}
}

// TestGenerateConstrained: --json-schema, --grammar, --regex and --choice constrain the output, on the
// command line and for every line of a prompts file, sampled at temperature 1.
func TestGenerateConstrained(t *testing.T) {
	dir := writeTestModel(t)
	schema := writeTemp(t, `{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":9},"b":{"enum":["x","y"]}},"required":["a","b"],"additionalProperties":false}`)
	for _, tc := range []struct {
		name  string
		flags []string
		valid func(string) bool
	}{
		{"json schema", []string{"--json-schema", schema}, func(s string) bool {
			var v struct {
				A *int    `json:"a"`
				B *string `json:"b"`
			}
			return json.Unmarshal([]byte(s), &v) == nil && v.A != nil && *v.A >= 0 && *v.A <= 9 && v.B != nil && (*v.B == "x" || *v.B == "y")
		}},
		{"grammar", []string{"--grammar", writeTemp(t, `root ::= "<" [a-c]{1,3} ">"`)}, regexp.MustCompile(`^<[a-c]{1,3}>$`).MatchString},
		{"regex", []string{"--regex", `[0-9]{3}-[a-z]{2}`}, regexp.MustCompile(`^[0-9]{3}-[a-z]{2}$`).MatchString},
		{"choice", []string{"--choice", "yes", "--choice", "no"}, func(s string) bool { return s == "yes" || s == "no" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range 3 {
				args := append([]string{"generate", "--model", dir, "--prompt", "the cat", "--max-tokens", "64", "--temperature", "1",
					"--seed", fmt.Sprint(seed), "--json", "--kv-blocks", "64"}, tc.flags...)
				code, stdout, stderr := runCLI(t, args...)
				var got generationJSON
				if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil {
					t.Fatalf("exit %d: %s %s", code, stdout, stderr)
				}
				if got.FinishReason == "stop" && !tc.valid(got.Text) || got.FinishReason != "stop" && got.FinishReason != "length" {
					t.Errorf("seed %d: %q (%s) is not valid", seed, got.Text, got.FinishReason)
				}
			}
			prompts := writeTemp(t, `{"prompt": "a", "temperature": 1, "seed": 1, "max_tokens": 64}`+"\n"+`{"prompt": "b", "temperature": 1, "seed": 2, "max_tokens": 64}`+"\n")
			code, stdout, stderr := runCLI(t, append([]string{"generate", "--model", dir, "--prompts-file", prompts, "--kv-blocks", "64"}, tc.flags...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
				var got generationJSON
				if json.Unmarshal([]byte(line), &got) != nil || got.FinishReason == "stop" && !tc.valid(got.Text) {
					t.Errorf("prompts file line %s", line)
				}
			}
		})
	}
}

// TestGenerateSharedPrefix runs a --prompts-file whose prompts begin with one long preamble, and 8
// copies of one prompt, with --shared-prefix off and always: the greedy answers are the same (the
// shared-prefix decode reads the preamble's pages once for every prompt behind it); a bad value is
// refused.
func TestGenerateSharedPrefix(t *testing.T) {
	dir := writeTestModel(t)
	preamble := make([]string, 90)
	for i := range preamble {
		preamble[i] = fmt.Sprint((i*37 + 11) % 250)
	}
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf(`{"prompt_ids": [%s, %d, %d], "max_tokens": 10, "temperature": 0}`, strings.Join(preamble, ", "), i, i+1))
	}
	for range 8 {
		lines = append(lines, fmt.Sprintf(`{"prompt_ids": [%s, 7], "max_tokens": 10, "temperature": 0}`, strings.Join(preamble[:50], ", ")))
	}
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	writeFile(t, path, []byte(strings.Join(lines, "\n")+"\n"))
	// The answers' tokens; usage's cached tokens depend on which request the loop saw first.
	strip := func(out string) string {
		return strings.Join(regexp.MustCompile(`"output_ids":\[[^]]*\]`).FindAllString(out, -1), "\n")
	}
	var outs []string
	for _, mode := range []string{"off", "always"} {
		code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompts-file", path, "--ignore-eos",
			"--kv-blocks", "256", "--page-size", "8", "--max-num-seqs", "16", "--shared-prefix", mode)
		if code != 0 || strings.Count(stdout, "\n") != len(lines) || strings.Count(strip(stdout), "output_ids") != len(lines) {
			t.Fatalf("--shared-prefix %s: exit %d, stdout %q, stderr %q", mode, code, stdout, stderr)
		}
		outs = append(outs, strip(stdout))
	}
	if outs[0] != outs[1] {
		t.Errorf("answers differ:\noff:    %s\nalways: %s", outs[0], outs[1])
	}
	if code, _, stderr := runCLI(t, "generate", "--model", dir, "--prompt", "x", "--shared-prefix", "sometimes"); code != 2 || !strings.Contains(stderr, "--shared-prefix") {
		t.Errorf("--shared-prefix sometimes: exit %d, stderr %q", code, stderr)
	}
}

// A --prompts-file line holding more than one JSON value (a second object, stray text) is a bad line,
// reported by its number, not run as its first object with the rest dropped; the other lines run.
func TestGeneratePromptsFileTrailingData(t *testing.T) {
	dir := writeTestModel(t)
	for _, tc := range []struct {
		name, line string
	}{
		{"two objects", `{"prompt": "a", "max_tokens": 2} {"prompt": "b", "max_tokens": 2}`},
		{"stray text", `{"prompt": "a", "max_tokens": 2}x`},
		{"stray brace", `{"prompt": "a", "max_tokens": 2}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTemp(t, `{"prompt": "c", "max_tokens": 2}`+"\n"+tc.line+"\n"+`{"prompt": "d", "max_tokens": 2}`+"\n")
			code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompts-file", path, "--kv-blocks", "64", "--ignore-eos")
			if code != 1 || !strings.Contains(stderr, filepath.Base(path)+":2:") {
				t.Fatalf("exit %d, stderr %q; want 1 and the bad line named", code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d output lines for 3 input lines: %s", len(lines), stdout)
			}
			for i, l := range lines {
				var got generationJSON
				if err := json.Unmarshal([]byte(l), &got); err != nil {
					t.Fatalf("line %d: %v", i, err)
				}
				if bad := got.Error != ""; bad != (i == 1) {
					t.Errorf("line %d: error %q", i, got.Error)
				}
			}
		})
	}
}

// A --prompts-file line that the engine refuses (a sampling field out of range, a token outside the
// vocabulary, a prompt too long) is reported by its line number, as a line that does not parse is.
func TestGeneratePromptsFileRefusedLineNumber(t *testing.T) {
	dir := writeTestModel(t)
	for _, tc := range []struct {
		name, line, want string
	}{
		{"temperature", `{"prompt": "a", "temperature": -1}`, "temperature -1"},
		{"token outside the vocabulary", `{"prompt_ids": [1, 99999]}`, "outside the vocabulary"},
		{"empty prompt_ids", `{"prompt_ids": []}`, "empty prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Line 4 of the file, the third request (a blank line does not count).
			path := writeTemp(t, `{"prompt": "c", "max_tokens": 2}`+"\n\n"+`{"prompt": "d", "max_tokens": 2}`+"\n"+tc.line+"\n")
			code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompts-file", path, "--kv-blocks", "64", "--max-tokens", "2")
			want := filepath.Base(path) + ":4: "
			if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr, want)
			}
			if n := strings.Count(stdout, "\n"); n != 3 {
				t.Fatalf("%d output lines, want 3: %s", n, stdout)
			}
		})
	}
}

// A --prompts-file that cannot be read is refused before the model loads (here a missing folder,
// never opened), naming the flag, as the other file flags are.
func TestGeneratePromptsFileCheckedBeforeLoad(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		name, file, want string
	}{
		{"missing file", filepath.Join(t.TempDir(), "prompts.jsonl"), "--prompts-file: open"},
		{"a folder", t.TempDir(), "--prompts-file: read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, "generate", "--model", missing, "--prompts-file", tc.file)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "no such model folder") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q before the model loads", code, stdout, stderr, tc.want)
			}
		})
	}
}
