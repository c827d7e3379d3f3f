package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// benchTinyConfig is a small LLaMA config.json, so that sweeps stay fast.
const benchTinyConfig = `{"architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}`

func writeBenchConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(benchTinyConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// latencyJSON is the part of bench latency --json that the tests read.
type latencyJSON struct {
	Model      string `json:"model"`
	Params     int64  `json:"params"`
	Batch      int    `json:"batch"`
	InputLen   int    `json:"input_len"`
	OutputLen  int    `json:"output_len"`
	DecodeStep struct {
		Count int     `json:"count"`
		P50   float64 `json:"p50_ms"`
	} `json:"decode_step"`
	PrefillMS float64 `json:"prefill_ms"`
	Roofline  struct {
		Context int `json:"context"`
		Bytes   struct {
			Weights int64 `json:"weights"`
			Total   int64 `json:"total"`
		} `json:"bytes"`
		StepMS  float64 `json:"step_ms"`
		Percent float64 `json:"percent"`
		Source  string  `json:"bandwidth_source"`
	} `json:"roofline"`
}

// TestBenchLatencySmolLM2 runs gollm bench latency end to end on the CPU: SmolLM2-135M's shape with random
// weights, batch 1, 16 prompt tokens, 4 generated.
func TestBenchLatencySmolLM2(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "latency", "--config", "smollm2-135m", "--random-weights", "--batch", "1",
		"--input-len", "16", "--output-len", "4", "--warmup", "0", "--iters", "1", "--bandwidth", "1e10", "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r latencyJSON
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.Model != "smollm2-135m" || r.Params != 134_515_008 || r.Batch != 1 || r.InputLen != 16 || r.OutputLen != 4 {
		t.Errorf("header %+v", r)
	}
	// Four tokens: the first from the prefill, three decode steps at contexts 17, 18, 19.
	if r.DecodeStep.Count != 3 || r.Roofline.Context != 18 || !(r.DecodeStep.P50 > 0) || !(r.PrefillMS > 0) {
		t.Errorf("steps %+v, context %d, prefill %v", r.DecodeStep, r.Roofline.Context, r.PrefillMS)
	}
	// Tied bf16 weights: every parameter is read once per step.
	if r.Roofline.Bytes.Weights != 2*134_515_008 || r.Roofline.Source != "flag" {
		t.Errorf("roofline %+v", r.Roofline)
	}
	if want := float64(r.Roofline.Bytes.Total) / 1e10 * 1e3; r.Roofline.StepMS < want*0.999999 || r.Roofline.StepMS > want*1.000001 {
		t.Errorf("roofline step %v ms, want %v", r.Roofline.StepMS, want)
	}
	// Off a terminal the load's progress is log lines, never a bar redrawn with carriage returns.
	if strings.Contains(errb.String(), "\r") {
		t.Errorf("stderr is not a terminal, yet got %q", errb.String())
	}
}

// TestBenchLatencyFP8 runs bench latency with FP8 layers and KV on the CPU and checks that the report
// counts their bytes: a byte a parameter of the layers' matrices, a byte a KV element.
func TestBenchLatencyFP8(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "latency", "--config", writeBenchConfig(t), "--batch", "1", "--input-len", "8",
		"--output-len", "3", "--warmup", "0", "--iters", "1", "--bandwidth", "1e10", "--quantization", "fp8", "--kv-cache-dtype", "fp8"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "2-byte weights (1-byte in the layers), 1-byte KV") {
		t.Errorf("the report does not count FP8 bytes:\n%s", out.String())
	}
}

func TestBenchLatencySweepPlot(t *testing.T) {
	cfg := writeBenchConfig(t)
	plot := filepath.Join(t.TempDir(), "sweep.svg")
	var out, errb bytes.Buffer
	args := []string{"bench", "latency", "--config", cfg, "--batch", "1,2,4", "--input-len", "8", "--output-len", "3",
		"--iters", "1", "--bandwidth", "2.5e10", "--plot", plot}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	for _, want := range []string{"model config", "25 GB/s (flag, read+write copy)", "% of roofline"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if rows := regexp.MustCompile(`(?m)^ +[124] +[0-9.]+ `).FindAllString(text, -1); len(rows) != 3 {
		t.Errorf("%d rows for batches 1, 2, 4:\n%s", len(rows), text)
	}
	data, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	circles := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("plot is not well-formed XML: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "circle" {
			circles++
		}
	}
	if circles != 6 {
		t.Errorf("%d points in the plot, want 3 per panel", circles)
	}
}

func TestBenchThroughputCLI(t *testing.T) {
	cfg := writeBenchConfig(t)
	var out, errb bytes.Buffer
	args := []string{"bench", "throughput", "--config", cfg, "--num-prompts", "6", "--input-len", "4:12",
		"--output-len", "2:5", "--max-num-seqs", "4", "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r struct {
		NumPrompts   int     `json:"num_prompts"`
		InputLen     string  `json:"input_len"`
		OutputTokens int     `json:"output_tokens"`
		OutputTokS   float64 `json:"output_tok_s"`
		RequestsS    float64 `json:"requests_s"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.NumPrompts != 6 || r.InputLen != "4:12" || r.OutputTokens < 12 || r.OutputTokens > 30 || !(r.OutputTokS > 0) || !(r.RequestsS > 0) {
		t.Errorf("result %+v", r)
	}
}

func TestBenchServeCLI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model     string  `json:"model"`
			Prompt    []int32 `json:"prompt"`
			MaxTokens int     `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "m" || r.URL.Path != "/v1/completions" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		for range req.MaxTokens {
			io.WriteString(w, `data: {"choices":[{"index":0,"text":" x","finish_reason":null}]}`+"\n\n")
		}
		fmt.Fprintf(w, `data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`+"\n\ndata: [DONE]\n\n",
			len(req.Prompt), req.MaxTokens)
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	args := []string{"bench", "serve", "--url", srv.URL, "--model-name", "m", "--concurrency", "3", "--num-prompts", "7",
		"--input-len", "5", "--output-len", "4"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"completed 7, failed 0", "TTFT", "ITL", "p99"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// A mixed load reports its short and long prompts apart.
	out.Reset()
	mixed := append(slices.Clone(args), "--long-fraction", "0.5", "--long-input-len", "20:30")
	if code := run(mixed, &out, &errb); code != 0 {
		t.Fatalf("mixed: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"short prompts (5 tokens,", "long prompts (20:30 tokens,", "short TTFT", "long ITL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("mixed report lacks %q:\n%s", want, out.String())
		}
	}
	// A server that rejects everything: the run completes, reports the failures, exits 1.
	out.Reset()
	errb.Reset()
	args[5] = "other"
	if code := run(args, &out, &errb); code != 1 || !strings.Contains(out.String(), "failed 7") {
		t.Errorf("exit %d, report %s", code, out.String())
	}
}

// TestBenchLatencyChunks: bench latency sweeps input lengths in one load and reports each prompt's time
// to first token and prefill rate with the prefill chunk it ran with, given by vLLM's flag name.
func TestBenchLatencyChunks(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "latency", "--config", writeBenchConfig(t), "--batch", "1", "--input-len", "8,40",
		"--output-len", "2", "--warmup", "0", "--iters", "1", "--bandwidth", "1e10", "--max-num-batched-tokens", "16", "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	dec := json.NewDecoder(&out)
	var inputs []int
	for dec.More() {
		var r struct {
			InputLen    int     `json:"input_len"`
			Chunk       int     `json:"max_num_batched_tokens"`
			PrefillMS   float64 `json:"prefill_ms"`
			PrefillTokS float64 `json:"prefill_tok_s"`
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, r.InputLen)
		if r.Chunk != 16 || !(r.PrefillMS > 0) || math.Abs(r.PrefillTokS-float64(r.InputLen)/(r.PrefillMS/1e3)) > 1e-6*r.PrefillTokS {
			t.Errorf("input %d: chunk %d, TTFT %v ms, prefill %v tok/s", r.InputLen, r.Chunk, r.PrefillMS, r.PrefillTokS)
		}
	}
	if fmt.Sprint(inputs) != "[8 40]" {
		t.Errorf("input lengths %v, want [8 40]", inputs)
	}
}

// TestBenchServeInProcess: with --config, bench serve runs the engine in process (no server) on the
// mixed load, each class's requests all completed with their tokens.
func TestBenchServeInProcess(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "serve", "--config", writeBenchConfig(t), "--concurrency", "3", "--num-prompts", "8",
		"--input-len", "4", "--output-len", "5", "--long-fraction", "0.5", "--long-input-len", "60:90",
		"--max-num-seqs", "4", "--max-num-batched-tokens", "16,32", "--long-prefill-token-threshold", "8", "--json"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if strings.Contains(errb.String(), "engine started") {
		t.Errorf("the engine logs without --verbose: %s", errb.String())
	}
	dec := json.NewDecoder(&out)
	for _, chunk := range []int{16, 32} {
		var r struct {
			URL          string `json:"url"`
			Chunk        int    `json:"max_num_batched_tokens"`
			Threshold    int    `json:"long_prefill_token_threshold"`
			Completed    int    `json:"completed"`
			OutputTokens int    `json:"output_tokens"`
			Short, Long  struct {
				Completed int `json:"completed"`
				TTFT      struct {
					Count int `json:"count"`
				} `json:"ttft"`
			}
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if r.URL != "in-process engine" || r.Chunk != chunk || r.Threshold != 8 || r.Completed != 8 || r.OutputTokens != 40 || r.Short.Completed+r.Long.Completed != 8 ||
			r.Short.TTFT.Count != r.Short.Completed || r.Long.TTFT.Count != r.Long.Completed {
			t.Errorf("chunk %d: result %+v", chunk, r)
		}
	}
	errb.Reset()
	if code := run([]string{"bench", "serve", "--config", "llama3-8b", "--url", "http://x"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "run the engine in process") {
		t.Errorf("--config with --url: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"bench", "serve", "--max-batched-tokens", "2048"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "configure an engine in process") {
		t.Errorf("--max-batched-tokens for a server: exit %d, %q", code, errb.String())
	}
	for _, args := range [][]string{{"--quantization", "fp8"}, {"--device", "cuda"}, {"--kv-cache-dtype", "fp8"},
		{"--page-size", "32"}, {"--no-pipelining"}, {"--random-weights"}, {"--cpuprofile", "x.prof"},
		{"--tensor-parallel-size", "2"}} {
		errb.Reset()
		if code := run(append([]string{"bench", "serve", "--url", "http://127.0.0.1:1"}, args...), &out, &errb); code != 2 ||
			!strings.Contains(errb.String(), args[0]+" configure an engine in process") {
			t.Errorf("%s for a server: exit %d, %q", args[0], code, errb.String())
		}
	}
	errb.Reset()
	if code := run([]string{"bench", "serve", "--config", "llama3-8b", "--vocab-size", "5"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--vocab-size are for a server") {
		t.Errorf("--vocab-size in process: exit %d, %q", code, errb.String())
	}
}

// TestBenchServeInProcessSharedPrefix: a system prompt before every request in process, with the
// shared-prefix decode off and always on: the KV cache is sized for the prompt with its prefix, and
// every request completes with its tokens either way.
func TestBenchServeInProcessSharedPrefix(t *testing.T) {
	cfg := writeBenchConfig(t)
	for _, mode := range []string{"off", "always"} {
		var out, errb bytes.Buffer
		args := []string{"bench", "serve", "--config", cfg, "--concurrency", "4", "--num-prompts", "8",
			"--input-len", "4", "--output-len", "5", "--shared-prefix-len", "48", "--shared-prefix", mode, "--json"}
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("--shared-prefix %s: exit %d: %s", mode, code, errb.String())
		}
		var r struct {
			Completed       int `json:"completed"`
			OutputTokens    int `json:"output_tokens"`
			SharedPrefixLen int `json:"shared_prefix_len"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if r.Completed != 8 || r.OutputTokens != 40 || r.SharedPrefixLen != 48 {
			t.Errorf("--shared-prefix %s: result %+v", mode, r)
		}
	}
	// The prefix counts against the context: 510 + 4 + 5 tokens do not fit the shape's 512.
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "serve", "--config", cfg, "--num-prompts", "2", "--input-len", "4", "--output-len", "5",
		"--shared-prefix-len", "510"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "519") {
		t.Errorf("a prefix past the context: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"bench", "serve", "--shared-prefix", "off"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "configure an engine in process") {
		t.Errorf("--shared-prefix for a server: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"bench", "latency", "--config", cfg, "--shared-prefix", "sometimes"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), `--shared-prefix "sometimes"`) {
		t.Errorf("--shared-prefix sometimes: exit %d, %q", code, errb.String())
	}
}

func TestBenchE2EUsageErrors(t *testing.T) {
	cfg := writeBenchConfig(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "latency", "--config", cfg, "--batch", "1,x"}, "--batch"},
		{[]string{"bench", "latency", "--config", cfg, "--model", "dir"}, "exactly one of"},
		{[]string{"bench", "latency", "--config", cfg, "--output-len", "0"}, "must be positive"},
		{[]string{"bench", "latency", "--config", cfg, "extra"}, "unexpected argument"},
		{[]string{"bench", "latency", "--config", cfg, "--device", "tpu"}, "tpu"},
		{[]string{"bench", "throughput", "--config", cfg, "--input-len", "9:3"}, "length range"},
		{[]string{"bench", "throughput", "--config", "nope"}, "neither built in"},
		{[]string{"bench", "serve", "--output-len", "x"}, "length"},
		{[]string{"bench", "serve", "--long-fraction", "0.2"}, "needs both --long-fraction (above 0) and --long-input-len"},
		{[]string{"bench", "serve", "--long-input-len", "4096"}, "needs both"},
		{[]string{"bench", "serve", "--long-fraction", "0.2", "--long-input-len", "0"}, "--long-input-len: length range"},
		{[]string{"bench", "latency", "--config", cfg, "--input-len", "8,0"}, "--input-len: length \"0\""},
		{[]string{"bench", "latency", "--config", cfg, "--input-len", "8,16", "--plot", "x.svg"}, "one --input-len"},
		// Past the context, refused before the weights load (an 8B shape would take minutes on the CPU),
		// naming the shapes that hold it.
		{[]string{"bench", "latency", "--config", "llama3-8b", "--input-len", "32768"},
			"32800 tokens per sequence (input plus output) exceed llama3-8b's context of 8192 tokens (max_position_embeddings); built-in shapes that hold it: gemma3-12b (131072)"},
		{[]string{"bench", "latency", "--config", "llama3.1-8b", "--input-len", "131072", "--output-len", "1"}, "exceed llama3.1-8b's context of 131072"},
		{[]string{"bench", "throughput", "--config", "qwen2.5-7b", "--input-len", "32768", "--output-len", "16"}, "exceed qwen2.5-7b's context of 32768"},
	} {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q, want it to mention %q", code, errb.String(), tc.want)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "latency", "--help"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "--random-weights") {
		t.Errorf("--help: exit %d, %q", code, errb.String())
	}
}

// TestBenchCPUProfile: --cpuprofile writes a profile that pprof can read (a gzipped protobuf) for a run
// on the CPU with a tiny shape, and an unwritable path is an error that names the flag.
func TestBenchCPUProfile(t *testing.T) {
	cfg := writeBenchConfig(t)
	path := filepath.Join(t.TempDir(), "cpu.prof")
	var stdout, stderr bytes.Buffer
	code := runBenchLatency(context.Background(), []string{"--config", cfg, "--batch", "1", "--input-len", "4",
		"--output-len", "2", "--iters", "1", "--warmup", "0", "--json", "--cpuprofile", path}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile of %d bytes is not gzip", len(b))
	}
	code = runBenchLatency(context.Background(), []string{"--config", cfg, "--cpuprofile",
		filepath.Join(t.TempDir(), "missing", "cpu.prof")}, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "--cpuprofile") {
		t.Fatalf("unwritable profile: exit %d, %q", code, stderr.String())
	}
}

// bench throughput refuses negative engine sizes, as bench latency and bench serve do, rather than
// running with its defaults in their place.
func TestBenchThroughputNegativeFlags(t *testing.T) {
	cfg := writeBenchConfig(t)
	for _, flag := range []string{"--max-batched-tokens", "--max-num-batched-tokens", "--kv-blocks"} {
		t.Run(flag, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run([]string{"bench", "throughput", "--config", cfg, "--num-prompts", "2", "--input-len", "4", "--output-len", "2",
				flag, "-5"}, &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), "not negative") {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the flag refused", code, out.String(), errb.String())
			}
		})
	}
}

// TestBenchInterrupted: a bench interrupted by a signal (its context cancelled) exits 130, as generate
// and pull do, not 1 as if it had failed; a command that succeeds keeps its 0.
func TestBenchInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	args := []string{"latency", "--config", "smollm2-135m", "--random-weights", "--batch", "1", "--input-len", "16",
		"--output-len", "4", "--warmup", "0", "--iters", "1", "--bandwidth", "1e10"}
	if code := runCommand(ctx, commands["bench"], args, &out, &errb); code != 130 {
		t.Errorf("interrupted bench latency: exit %d, want 130 (%s)", code, errb.String())
	}
	if code := runCommand(ctx, commands["version"], nil, &out, &errb); code != 0 {
		t.Errorf("version under a cancelled context: exit %d, want 0", code)
	}
}
