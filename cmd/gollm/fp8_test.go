package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/gollm/gollm/weights/weightstest"
)

// TestGenerateFP8 runs generate on FP8 checkpoints of both compressed-tensors forms and AutoFP8's,
// with and without --kv-cache-dtype fp8, and checks that --quantization fp8 on the bfloat16 checkpoint
// of the same weights generates exactly what the per-channel FP8 checkpoint does.
func TestGenerateFP8(t *testing.T) {
	generate := func(t *testing.T, dir string, flags ...string) []int32 {
		t.Helper()
		args := append([]string{"generate", "--model", dir, "--prompt", "the cat sat", "--max-tokens", "10",
			"--temperature", "0", "--ignore-eos", "--json", "--kv-blocks", "64", "--device", "cpu"}, flags...)
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", flags, code, stderr)
		}
		var out generationJSON
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.OutputIDs) != 10 {
			t.Fatalf("%v: %q: %v", flags, stdout, err)
		}
		return out.OutputIDs
	}
	dynamic := writeTestModelFP8(t, weightstest.FP8Dynamic)
	fromCheckpoint := generate(t, dynamic)
	for _, form := range []weightstest.FP8Form{weightstest.FP8Static, weightstest.FP8AutoFP8, weightstest.FP8Block} {
		dir := writeTestModelFP8(t, form)
		generate(t, dir)
		generate(t, dir, "--kv-cache-dtype", "fp8")
	}
	generate(t, dynamic, "--kv-cache-dtype", "fp8", "--quantization", "fp8")

	bf16 := t.TempDir()
	config := map[string]any{}
	for k, v := range testModelConfig {
		config[k] = v
	}
	delete(config, "torch_dtype")
	weightstest.WriteLlamaBF16(t, bf16, config, 11)
	writeTestTokenizer(t, bf16)
	if online := generate(t, bf16, "--quantization", "fp8"); !slices.Equal(online, fromCheckpoint) {
		t.Errorf("--quantization fp8 generates %v, the FP8 checkpoint %v", online, fromCheckpoint)
	}
}
