package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeNotRun are the README's shell commands this test does not run, and why. Each must still be in
// the README (the test fails when one is gone, so that the list cannot go stale).
var readmeNotRun = map[string]string{
	// It runs go test ./..., which runs this test again (and installs system packages first): CI runs
	// it as the entry point, which is what the README says it is.
	"bash .ci/run": "runs the whole test suite, this test included",
	// Root and the network; .ci/setup.d/50-cuda-toolkit.sh installs the same package in CI.
	"sudo apt-get install nvidia-cuda-toolkit": "needs root and the network",
	// Needs cuda.h; CI builds the cuda binary in .ci/after.d/50-cuda.sh after installing the toolkit.
	"go install -tags cuda ./cmd/gollm": "needs the CUDA toolkit",
}

// readmePort is the port the README's serve example uses; the test runs it on a free port instead, so
// that a server already on 8000 cannot answer in its place.
const readmePort = "8000"

// TestREADMECommands runs the shell blocks (```sh) of README.md as written, in order, each as one bash
// script from the repository's root, with `go install ./cmd/gollm` installing into a temporary GOBIN
// that comes first on PATH: the two commands, the install, and the examples on the built-in model,
// serve included. The commands in readmeNotRun are left out.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gollm and runs the README's commands")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(string(readme))
	if len(blocks) < 3 {
		t.Fatalf("README.md has %d sh blocks; want the two commands, the install and the examples", len(blocks))
	}
	for cmd := range readmeNotRun {
		if !strings.Contains(string(readme), cmd) {
			t.Errorf("readmeNotRun lists %q, which the README no longer has", cmd)
		}
	}
	bin := t.TempDir()
	// gollm on PATH from the start: a block may use it before the install block (which replaces it).
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "gollm"), "./cmd/gollm")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	port := freePort(t)
	for i, block := range blocks {
		script, ran := readmeScript(block.body, port)
		name := strconv.Itoa(i+1) + " " + block.section
		if len(ran) == 0 {
			t.Logf("block %s: every command is in readmeNotRun", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", script)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOBIN="+bin, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\nscript:\n%s\noutput:\n%s", err, script, out)
			}
			for _, want := range readmeExpect(ran) {
				if !strings.Contains(string(out), want) {
					t.Errorf("the output lacks %q\nscript:\n%s\noutput:\n%s", want, script, out)
				}
			}
		})
	}
}

// shellBlock is one ```sh block of a Markdown file and the ## section it is in.
type shellBlock struct{ section, body string }

// shellBlocks returns the ```sh blocks of markdown, in order.
func shellBlocks(markdown string) []shellBlock {
	var blocks []shellBlock
	section := ""
	var body *strings.Builder
	for line := range strings.Lines(markdown) {
		trimmed := strings.TrimRight(line, "\n")
		switch {
		case body == nil && strings.HasPrefix(trimmed, "## "):
			section = strings.TrimPrefix(trimmed, "## ")
		case body == nil && trimmed == "```sh":
			body = &strings.Builder{}
		case body != nil && trimmed == "```":
			blocks = append(blocks, shellBlock{section, body.String()})
			body = nil
		case body != nil:
			body.WriteString(line)
		}
	}
	return blocks
}

// readmeScript turns a block into a bash script: the commands of readmeNotRun left out, the README's
// port replaced by port, background jobs killed when the script ends however it ends. It returns the
// commands it kept.
func readmeScript(block, port string) (script string, ran []string) {
	var b strings.Builder
	b.WriteString("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n")
	portRE := regexp.MustCompile(`\b` + readmePort + `\b`)
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		cmd := lines[i]
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) { // a command continued on the next line
			i++
			cmd += "\n" + lines[i]
		}
		skip := false
		for prefix := range readmeNotRun {
			if strings.HasPrefix(strings.TrimSpace(cmd), prefix) {
				skip = true
			}
		}
		if skip || strings.TrimSpace(cmd) == "" {
			continue
		}
		cmd = portRE.ReplaceAllString(cmd, port)
		ran = append(ran, cmd)
		b.WriteString(cmd + "\n")
	}
	return b.String(), ran
}

// readmeExpect is what the output of commands must hold, beyond their success.
func readmeExpect(commands []string) []string {
	var want []string
	for _, c := range commands {
		switch {
		case strings.Contains(c, "gollm version"):
			want = append(want, "commit: ")
		case strings.Contains(c, "--prompts-file"):
			want = append(want, `"index":1`)
		case strings.Contains(c, "--json"):
			want = append(want, `"output_ids"`)
		case strings.Contains(c, "/v1/chat/completions"):
			want = append(want, `"object":"chat.completion"`)
		}
	}
	return want
}

// freePort returns a TCP port free on 127.0.0.1 at the time of the call.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func TestShellBlocks(t *testing.T) {
	md := "# t\n\n## One\n\n```sh\na\nb \\\n  c\n```\n\n```text\nnot run\n```\n\n## Two\n```sh\nbash .ci/run\ncurl localhost:8000/x\n```\n"
	blocks := shellBlocks(md)
	if len(blocks) != 2 || blocks[0].section != "One" || blocks[0].body != "a\nb \\\n  c\n" || blocks[1].section != "Two" {
		t.Fatalf("blocks %q", blocks)
	}
	script, ran := readmeScript(blocks[0].body, "1234")
	if len(ran) != 2 || ran[1] != "b \\\n  c" || !strings.Contains(script, "a\nb \\\n  c\n") {
		t.Errorf("script %q, ran %q", script, ran)
	}
	if _, ran := readmeScript(blocks[1].body, "1234"); len(ran) != 1 || ran[0] != "curl localhost:1234/x" {
		t.Errorf("ran %q", ran)
	}
}

// TestREADMELinks: every relative link of README.md and CHANGELOG.md names a file or folder of the
// repository.
func TestREADMELinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`)
	for _, doc := range []string{"README.md", "CHANGELOG.md"} {
		data, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			n++
			if _, err := os.Stat(filepath.Join("..", "..", target)); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
			}
		}
		if doc == "README.md" && n == 0 {
			t.Errorf("%s: no relative links found", doc)
		}
	}
}
