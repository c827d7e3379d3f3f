package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"text", nil, 0, []string{"gollm ", "commit: ", "go:     " + runtime.Version(), "cuda:   "}},
		{"json", []string{"--json"}, 0, []string{`"version":`, `"commit":`, `"cuda":`}},
		{"stray argument", []string{"x"}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"version"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output %q lacks %q", stdout, w)
				}
			}
		})
	}
	if cuda := buildVersion().CUDA; cuda != cudaBuilt {
		t.Errorf("cuda %v", cuda)
	}
}

// A binary built from this checkout names its module version and the commit it was built at, as
// git sees it.
func TestVersionOfABuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gollm")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	// go build stamps VCS information only where .git is a directory (a clone, as CI's), not in a
	// git worktree, whose .git is a file.
	if fi, err := os.Stat(filepath.Join("..", "..", ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree: go build does not stamp VCS information here")
	}
	commit := strings.TrimSpace(string(head))
	bin := filepath.Join(t.TempDir(), "gollm")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	// The module version is the commit's pseudo-version (v0.0.0-TIME-COMMIT, +dirty with local changes).
	if !strings.Contains(v.Version, commit[:12]) || v.Commit != commit || v.CUDA != cudaBuilt || v.Go != runtime.Version() ||
		strings.HasSuffix(v.Version, "+dirty") != v.Modified {
		t.Errorf("version %+v; want the pseudo-version of %s", v, commit)
	}
}
