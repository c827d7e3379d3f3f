package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of a running command.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestServeFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"--help"}, 0, "--api-key"},
		{"unknown flag", []string{"--nope"}, 2, "unknown flag"},
		{"stray argument", []string{"extra"}, 2, "unexpected argument"},
		{"bad port", []string{"--port", "70000"}, 2, "out of range"},
		{"no queue", []string{"--max-queue", "0"}, 2, "--max-queue 0"},
		{"zero page size", []string{"--page-size", "0"}, 2, "--page-size 0 must be at least 1"},
		{"negative max model len", []string{"--max-model-len", "-5"}, 2, "--max-model-len -5"},
		{"missing model", []string{"--model", t.TempDir(), "--port", "0"}, 1, "gollm serve:"},
		{"kv blocks beyond memory", []string{"--port", "0", "--kv-blocks", "1000000000000"}, 1, "at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr lockedBuffer
			code := runServe(t.Context(), tc.args, &bytes.Buffer{}, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, want %d; stderr %q lacks %q", code, tc.code, stderr.String(), tc.want)
			}
		})
	}
}

// TestServeDefaultModel serves the built-in model on a free port, checks /health and the API key,
// then cancels the context (as SIGINT does) and expects exit code 0.
func TestServeDefaultModel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, []string{"--port", "0", "--api-key", "k", "--kv-blocks", "64"}, &bytes.Buffer{}, &stderr)
	}()
	addr := regexp.MustCompile(`listening on (http://\S+)`)
	var url string
	for deadline := time.Now().Add(time.Minute); url == ""; {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening line: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(url + "/v1/models")
	if err != nil || resp.StatusCode != 401 {
		t.Errorf("/v1/models without the key: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after cancel, want 0: %s", code, stderr.String())
	}
}

// TestServeSIGTERM runs gollm serve as main does (signal handling included) with the defaults but
// for a short drain deadline: it listens on 127.0.0.1, and on SIGTERM it stops accepting, ends a
// long in-flight stream within the deadline (finish_reason "abort", then [DONE]), and exits 0.
func TestServeSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"serve", "--port", "0", "--kv-blocks", "128", "--shutdown-timeout", "300ms"}, &bytes.Buffer{}, &stderr)
	}()
	addr := regexp.MustCompile(`listening on http://(\S+)`)
	var hostPort string
	for deadline := time.Now().Add(time.Minute); hostPort == ""; {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			hostPort = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening line: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if host, _, err := net.SplitHostPort(hostPort); err != nil || host != "127.0.0.1" {
		t.Errorf("listening on %q by default, want 127.0.0.1", hostPort)
	}
	resp, err := http.Post("http://"+hostPort+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"func main() {","max_tokens":1000,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q %v", line, err)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("reading the stream after SIGTERM: %v", err)
	}
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"finish_reason":"abort"`) {
		t.Errorf("the in-flight stream after SIGTERM, past the drain deadline: %.300s ... %.300s", rest, rest[max(0, len(rest)-300):])
	}
	if code := <-done; code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0: %s", code, stderr.String())
	}
	if _, err := net.Dial("tcp", hostPort); err == nil {
		t.Error("still accepting connections after exit")
	}
}
