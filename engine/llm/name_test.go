package llm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gollm/gollm/weights/defaultmodel"
)

// TestDisplayName: the name a model is served under is ORG/NAME (without the revision) for a Hugging
// Face name, a folder's base name for a folder, and the built-in model's name for "".
func TestDisplayName(t *testing.T) {
	dir := t.TempDir()
	local := filepath.Join(dir, "Llama-3.2-1B")
	if err := os.Mkdir(local, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ model, want string }{
		{"", defaultmodel.Name()},
		{"meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"},
		{"meta-llama/Llama-3.2-1B-Instruct@main", "meta-llama/Llama-3.2-1B-Instruct"},
		{local, "Llama-3.2-1B"},
		{local + "/", "Llama-3.2-1B"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			if got := displayName(tc.model); got != tc.want {
				t.Errorf("displayName(%q) = %q, want %q", tc.model, got, tc.want)
			}
		})
	}
}

// TestLoadReturnsWhenCancelled: ending ctx ends Load at once even while the load cannot stop (here held
// before it reads anything), and the load, released later, frees what it built.
func TestLoadReturnsWhenCancelled(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	beforeLoad = func() {
		close(entered)
		<-release
	}
	defer func() { beforeLoad = func() {} }()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		m, err := Load(ctx, "", Config{Device: "cpu", KVBlocks: 64})
		if m != nil {
			m.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Load: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Load still running after its context ended")
	}
	close(release) // the held load now starts, sees the ended context and stops
}

// TestDisplayNameRelative: a folder given relative to the working directory, "." or ".." included, is
// named by the folder's own name (what serve lists in /v1/models), not by "." or "..".
func TestDisplayNameRelative(t *testing.T) {
	local := filepath.Join(t.TempDir(), "Llama-3.2-1B")
	sub := filepath.Join(local, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	for _, tc := range []struct{ model, want string }{
		{".", "sub"},
		{"./", "sub"},
		{"..", "Llama-3.2-1B"},
		{"../", "Llama-3.2-1B"},
		{"../sub/..", "Llama-3.2-1B"},
		{"../../Llama-3.2-1B", "Llama-3.2-1B"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			if got := displayName(tc.model); got != tc.want {
				t.Errorf("displayName(%q) = %q, want %q", tc.model, got, tc.want)
			}
		})
	}
}
