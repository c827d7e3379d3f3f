package main

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gollm/gollm/engine/llm"
)

// holdLoad makes the commands' loads wait where they start until release is closed (then they load),
// as a load stuck reading or uploading weights would, giving up when their context ends as llm.Load
// does; entered is closed when the first load starts. It restores loadModel at the test's end.
func holdLoad(t *testing.T) (entered, release chan struct{}) {
	t.Helper()
	entered, release = make(chan struct{}), make(chan struct{})
	var once bool
	loadModel = func(ctx context.Context, name string, cfg llm.Config) (*llm.Model, error) {
		if !once {
			once = true
			close(entered)
		}
		select {
		case <-release:
			return llm.Load(ctx, name, cfg)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	t.Cleanup(func() { loadModel = llm.Load })
	return entered, release
}

// TestSignalDuringLoad: the first SIGTERM (or SIGINT) while the model loads ends gollm generate at once
// with a clear message and exit code 130, and gollm serve at once with exit code 0 (a server stopped
// before it served, as a supervisor asks). Before, the load ignored the signal.
func TestSignalDuringLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		sig     syscall.Signal
		code    int
		message string
	}{
		{"serve, SIGTERM", []string{"serve", "--port", "0"}, syscall.SIGTERM, 0, "listening on"},
		{"generate, SIGINT", []string{"generate", "--prompt", "hi"}, syscall.SIGINT, 130, "interrupted while loading the model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := holdLoad(t)
			defer close(release)
			var stderr lockedBuffer
			done := make(chan int, 1)
			go func() { done <- run(tc.args, &bytes.Buffer{}, &stderr) }()
			select {
			case <-entered:
			case code := <-done:
				t.Fatalf("exited with %d before loading: %s", code, stderr.String())
			case <-time.After(time.Minute):
				t.Fatal("the load never started")
			}
			if err := syscall.Kill(syscall.Getpid(), tc.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != tc.code || !strings.Contains(stderr.String(), tc.message) || strings.Contains(stderr.String(), "ready on") {
					t.Errorf("exit %d, stderr %q; want %d and %q, never ready", code, stderr.String(), tc.code, tc.message)
				}
			case <-time.After(time.Second):
				t.Fatal("still loading a second after the signal")
			}
		})
	}
}
