package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
		{"zero chunk by vLLM's name", []string{"--max-num-batched-tokens", "0"}, 2, "--max-batched-tokens 0 must be at least 1"},
		{"negative chunk cap", []string{"--long-prefill-token-threshold", "-1"}, 2, "--long-prefill-token-threshold -1 must be at least 0"},
		{"missing model", []string{"--model", t.TempDir(), "--port", "0"}, 1, "gollm serve:"},
		{"kv blocks beyond memory", []string{"--port", "0", "--kv-blocks", "1000000000000"}, 1, "at most"},
		{"unknown tool-call parser", []string{"--tool-call-parser", "xml"}, 2, "--tool-call-parser \"xml\": want one of hermes, llama3_json, mistral"},
		{"missing chat template", []string{"--chat-template", "/nonexistent/t.jinja"}, 2, "--chat-template: open /nonexistent/t.jinja"},
		{"broken chat template", []string{"--chat-template", writeTemp(t, "{% for %}")}, 2, "--chat-template:"},
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
	addr := regexp.MustCompile(`ready on (http://\S+)`)
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
	addr := regexp.MustCompile(`ready on http://(\S+)`)
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

// TestServeWhileLoading: serve binds its port before the model loads and answers 503 on /health and
// on the API until it has loaded, then 200; interrupted while loading, it exits 0 without loading.
// The load is held where it starts (holdLoad) until the test releases it.
func TestServeWhileLoading(t *testing.T) {
	for _, interrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "loads", true: "interrupted"}[interrupt], func(t *testing.T) {
			entered, release := holdLoad(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr lockedBuffer
			done := make(chan int, 1)
			go func() {
				done <- runServe(ctx, []string{"--port", "0", "--kv-blocks", "64"}, &bytes.Buffer{}, &stderr)
			}()
			url := waitForLine(t, &stderr, done, regexp.MustCompile(`listening on (http://\S+)`))
			<-entered
			for _, path := range []string{"/health", "/v1/models"} {
				resp, err := http.Get(url + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 503 || path != "/health" && !strings.Contains(string(body), "model_loading") {
					t.Errorf("%s while loading: %d %s", path, resp.StatusCode, body)
				}
			}
			if interrupt {
				cancel()
			}
			close(release)
			if !interrupt {
				waitForLine(t, &stderr, done, regexp.MustCompile(`ready on (http://\S+)`))
				resp, err := http.Get(url + "/health")
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("/health once loaded: %v %v", resp, err)
				}
				resp.Body.Close()
				cancel()
			}
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("exit %d, want 0: %s", code, stderr.String())
				}
			case <-time.After(time.Minute):
				t.Fatalf("serve did not exit after the interrupt: %s", stderr.String())
			}
			if loaded := strings.Contains(stderr.String(), "ready on"); loaded == interrupt {
				t.Errorf("model loaded: %v, want %v: %s", loaded, !interrupt, stderr.String())
			}
		})
	}
}

// waitForLine waits for re to match the command's stderr and returns its first group; it fails if
// the command exits first.
func waitForLine(t *testing.T, stderr *lockedBuffer, done chan int, re *regexp.Regexp) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line matching %s: %s", re, stderr.String())
		}
	}
}

// writeTemp writes text to a new temporary file and returns its path.
func writeTemp(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Serve's limits and timeouts are checked before the model loads (the missing folder is never
// opened): openai.Config reads 0 or less as its default, so such a value would be silently replaced.
func TestServeLimitFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-n", "0"}, "--max-n 0 must be at least 1"},
		{[]string{"--max-n", "-1"}, "--max-n -1 must be at least 1"},
		{[]string{"--max-stop", "0"}, "--max-stop 0 must be at least 1"},
		{[]string{"--max-body-bytes", "-1"}, "--max-body-bytes -1 must be at least 1"},
		{[]string{"--max-header-bytes", "0"}, "--max-header-bytes 0 must be at least 1"},
		{[]string{"--max-tokens-limit", "-5"}, "--max-tokens-limit -5 must be at least 0"},
		{[]string{"--read-timeout", "0s"}, "--read-timeout 0s must be positive"},
		{[]string{"--write-timeout", "-1s"}, "--write-timeout -1s must be positive"},
		{[]string{"--idle-timeout", "0s"}, "--idle-timeout 0s must be positive"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout -1s must be 0 or more"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"serve", "--port", "0", "--model", missing}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// An API key that no Authorization header can carry (white space in it) is refused before the model
// loads (the missing folder is never opened), naming where it came from.
func TestServeAPIKeyCheckedBeforeLoad(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		name, env string
		args      []string
		want      string
	}{
		{"flag", "", []string{"--api-key", "a b"}, "--api-key holds white space"},
		{"flag, trailing newline", "", []string{"--api-key", "key\n"}, "--api-key holds white space"},
		{"environment", "key ", nil, "$GOLLM_API_KEY holds white space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOLLM_API_KEY", tc.env)
			code, _, stderr := runCLI(t, append([]string{"serve", "--port", "0", "--model", missing}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "listening on") {
				t.Fatalf("exit %d, stderr %q; want 2 and %q before listening", code, stderr, tc.want)
			}
		})
	}
}
