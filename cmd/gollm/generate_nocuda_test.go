//go:build !cuda

package main

import (
	"strings"
	"testing"
)

// In a build without the cuda tag, --device cuda is a clear error and auto runs on the CPU with a
// one-line notice.
func TestGenerateDevice(t *testing.T) {
	dir := writeTestModel(t)
	code, _, stderr := runCLI(t, "generate", "--model", dir, "--prompt-ids", "1,2", "--max-tokens", "2", "--device", "cuda")
	if code != 1 || !strings.Contains(stderr, "CUDA not available") {
		t.Fatalf("--device cuda: exit %d, stderr %q; want 1 and 'CUDA not available'", code, stderr)
	}
	for _, device := range []string{"auto", "cpu"} {
		code, stdout, stderr := runCLI(t, "generate", "--model", dir, "--prompt-ids", "1,2", "--max-tokens", "2", "--json", "--device", device)
		if code != 0 || !strings.Contains(stdout, "output_ids") {
			t.Fatalf("--device %s: exit %d, stdout %q, stderr %q", device, code, stdout, stderr)
		}
		if gotNotice := strings.Contains(stderr, "running on the CPU"); gotNotice != (device == "auto") {
			t.Errorf("--device %s: notice printed = %v, stderr %q", device, gotNotice, stderr)
		}
	}
}
