package llm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// externalProgram is a Go program of another module that uses gollm as a library would: the public
// API only, the built-in model on the CPU.
const externalProgram = `package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/engine/openai"
)

func main() {
	ctx := context.Background()
	m, err := llm.Load(ctx, "", llm.Config{Device: "cpu", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(ctx, "// Copyright", llm.Temperature(0), llm.Stop("\n"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("generate: %q\n", res.Text)
	streamed := ""
	for out, err := range m.Stream(ctx, "func (b *Buffer) Len() int {", llm.Temperature(0), llm.Stop("\n}")) {
		if err != nil {
			log.Fatal(err)
		}
		streamed += out.Text
	}
	fmt.Printf("stream: %q\n", streamed)
	if _, err := m.Chat(ctx, []llm.Message{{Role: "user", Content: "hi"}}, llm.MaxTokens(2)); err != nil {
		log.Fatal(err)
	}
	api, err := m.Handler(openai.Config{})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("models: %d %s", resp.StatusCode, body)
}
`

// TestExternalModule builds a program in a module of its own (a temporary go.mod that replaces
// github.com/gollm/gollm with this checkout) against the public API, and runs it on the built-in
// model: what a user's program does, with nothing from inside this module. It needs no network once
// this module's dependencies are in the module cache (GOPROXY=off): go.sum is this module's.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/gollmuser\n\ngo 1.26\n\nrequire github.com/gollm/gollm v0.0.0\n\nreplace github.com/gollm/gollm => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "main.go": []byte(externalProgram)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "gollmuser")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in a module of its own: %v\n%s", err, out)
	}
	run := exec.Command(bin)
	run.Dir = dir
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the program failed: %v\n%s", err, out)
	}
	want := `generate: " 2020 The Go Authors. All rights reserved."` + "\n" +
		`stream: "\n\treturn int(b.N)"` + "\n"
	if got := string(out); !strings.HasPrefix(got, want) || !strings.Contains(got, `models: 200 {"object":"list","data":[{"id":"gollm-default-go"`) {
		t.Errorf("output:\n%s\nwant it to begin with\n%s", got, want)
	}
}
