package main

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalDuringLoad: the first SIGTERM (or SIGINT) while the model loads ends gollm serve and
// gollm generate at once with a clear message and exit code 130. Before, the load ignored the
// signal (a FIFO as config.json blocked it for good, and the signal was swallowed). The load is made
// to block where it starts (beforeLoad), as a load stuck reading or uploading weights would.
func TestSignalDuringLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		sig  syscall.Signal
	}{
		{"serve, SIGTERM", []string{"serve", "--port", "0"}, syscall.SIGTERM},
		{"generate, SIGINT", []string{"generate", "--prompt", "hi"}, syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			defer close(release)
			beforeLoad = func() {
				close(entered)
				<-release
			}
			defer func() { beforeLoad = func() {} }()
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
				if code != 130 || !strings.Contains(stderr.String(), "interrupted while loading the model") {
					t.Errorf("exit %d, stderr %q; want 130 and the reason", code, stderr.String())
				}
			case <-time.After(time.Second):
				t.Fatal("still loading a second after the signal")
			}
		})
	}
}
