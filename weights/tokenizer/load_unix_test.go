//go:build unix

package tokenizer

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gollm/gollm/weights"
)

// TestLoadFIFO: a FIFO as tokenizer.json is refused at once instead of blocking the load.
func TestLoadFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Load(path)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, weights.ErrNotRegular) {
			t.Fatalf("Load: %v, want ErrNotRegular", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Load still blocked after a second")
	}
}
