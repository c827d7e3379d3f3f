package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestGenerateTensorParallel checks that --tensor-parallel-size 2 and 4 generate the tokens the whole
// model does (greedy), through the engine, and that sizes that cannot shard the model are refused.
func TestGenerateTensorParallel(t *testing.T) {
	dir := writeTestModel(t)
	generate := func(size string) []int32 {
		t.Helper()
		code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompt", "the cat sat", "--max-tokens", "12",
			"--temperature", "0", "--ignore-eos", "--json", "--kv-blocks", "64", "--device", "cpu", "--tensor-parallel-size", size)
		if code != 0 {
			t.Fatalf("--tensor-parallel-size %s: exit %d: %s", size, code, stderr)
		}
		var out generationJSON
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.OutputIDs) != 12 {
			t.Fatalf("--tensor-parallel-size %s: %q: %v", size, stdout, err)
		}
		return out.OutputIDs
	}
	want := generate("1")
	for _, size := range []string{"2", "4"} {
		if got := generate(size); !slices.Equal(got, want) {
			t.Errorf("--tensor-parallel-size %s: %v, the whole model's %v", size, got, want)
		}
	}
	for _, tc := range []struct {
		size string
		code int
		want string
	}{
		{"0", 2, "--tensor-parallel-size 0 must be at least 1"},
		{"3", 1, "tensor parallel size 3 does not divide the 4 attention heads"},
	} {
		code, _, stderr := runCLI(t, "generate", "--model", dir, "--prompt", "hi", "--kv-blocks", "64", "--device", "cpu",
			"--tensor-parallel-size", tc.size)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("--tensor-parallel-size %s: exit %d, stderr %q; want %d and %q", tc.size, code, stderr, tc.code, tc.want)
		}
	}
}

// TestBenchLatencyTensorParallel runs bench latency sharded over two ranks on the CPU, and checks that
// a GPU run in a build without CUDA fails by saying so.
func TestBenchLatencyTensorParallel(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "latency", "--config", writeBenchConfig(t), "--batch", "2", "--input-len", "8",
		"--output-len", "3", "--warmup", "0", "--iters", "1", "--bandwidth", "1e10", "--tensor-parallel-size", "2"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	errb.Reset()
	code = run([]string{"bench", "latency", "--config", writeBenchConfig(t), "--device", "cuda", "--tensor-parallel-size", "2"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "cuda") {
		t.Errorf("--device cuda --tensor-parallel-size 2: exit %d, %q", code, errb.String())
	}
}
