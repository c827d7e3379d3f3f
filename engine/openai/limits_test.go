package openai

import (
	"bufio"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRequestLimits checks each per-request bound: every one answers 400 (413 for the body) with
// an OpenAI error object naming the field, before any engine work.
func TestRequestLimits(t *testing.T) {
	cfg := templateConfig(t)
	cfg.MaxBodyBytes = 4096
	cfg.MaxN = 3
	cfg.MaxStopStrings = 2
	cfg.MaxStopLength = 8
	cfg.MaxTokensLimit = 20
	cfg.MaxSequences = 5
	f := &fakeEngine{maxLen: 64}
	_, ts := newFakeServer(t, cfg, f)
	long := strings.Repeat("p", 70)
	tests := []struct {
		name, path, body string
		status           int
		param            string
	}{
		{"n", "/v1/completions", `{"prompt":"a","n":4}`, 400, "n"},
		{"n zero", "/v1/completions", `{"prompt":"a","n":0}`, 400, "n"},
		{"chat n", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"n":4}`, 400, "n"},
		{"max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":21}`, 400, "max_tokens"},
		{"max_tokens negative", "/v1/completions", `{"prompt":"a","max_tokens":-1}`, 400, "max_tokens"},
		{"max_completion_tokens", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_completion_tokens":21}`, 400, "max_completion_tokens"},
		{"min_tokens over max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":2,"min_tokens":3}`, 400, "min_tokens"},
		{"min_tokens over the default max_tokens", "/v1/completions", `{"prompt":"a","min_tokens":17}`, 400, "min_tokens"},
		{"chat min_tokens over the server's limit", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"min_tokens":21}`, 400, "min_tokens"},
		{"logprobs", "/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "logprobs"},
		{"logprobs negative", "/v1/completions", `{"prompt":"a","logprobs":-1}`, 400, "logprobs"},
		{"top_logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs"},
		{"stop strings", "/v1/completions", `{"prompt":"a","stop":["a","b","c"]}`, 400, "stop"},
		{"stop length", "/v1/completions", `{"prompt":"a","stop":"123456789"}`, 400, "stop"},
		{"stop token ids", "/v1/completions", `{"prompt":"a","stop_token_ids":[1,2,3]}`, 400, "stop_token_ids"},
		{"stop token id outside the vocabulary", "/v1/completions", `{"prompt":"a","stop_token_ids":[258]}`, 400, "stop_token_ids"},
		{"prompt token outside the vocabulary", "/v1/completions", `{"prompt":[1,2,258]}`, 400, "prompt"},
		{"sequences per request", "/v1/completions", `{"prompt":["a","b","c"],"n":2,"max_tokens":1}`, 400, "prompt"},
		{"sequences per request, best_of", "/v1/completions", `{"prompt":["a","b"],"best_of":3,"max_tokens":1}`, 400, "prompt"},
		{"best_of below n", "/v1/completions", `{"prompt":"a","n":2,"best_of":1}`, 400, "best_of"},
		{"best_of above the server's n", "/v1/completions", `{"prompt":"a","best_of":4}`, 400, "best_of"},
		{"best_of streamed", "/v1/completions", `{"prompt":"a","best_of":2,"stream":true}`, 400, "best_of"},
		{"chat best_of", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"best_of":2}`, 400, "best_of"},
		{"body", "/v1/completions", `{"prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, ""},
		{"prompt longer than the context", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "prompt"},
		{"token ids longer than the context", "/v1/completions", `{"prompt":[` + strings.Repeat("1,", 70) + `1]}`, 400, "prompt"},
		{"second prompt too long", "/v1/completions", `{"prompt":["a","` + long + `"],"max_tokens":1}`, 400, "prompt"},
		{"prompt plus max_tokens", "/v1/completions", `{"prompt":"` + long[:50] + `","max_tokens":20}`, 400, "prompt"},
		{"chat longer than the context", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := call(t, "POST", ts.URL+tc.path, "", tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			checkErrorObject(t, body)
			if tc.param != "" && !strings.Contains(string(body), `"param":"`+tc.param+`"`) {
				t.Errorf("param is not %q: %s", tc.param, body)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 0 {
		t.Errorf("%d requests reached the engine; limits must be checked before any work", len(f.requests))
	}
}

// TestChunkedBodyLimit: a body without Content-Length is cut at the limit too.
func TestChunkedBodyLimit(t *testing.T) {
	cfg := templateConfig(t)
	cfg.MaxBodyBytes = 1024
	_, ts := newFakeServer(t, cfg, &fakeEngine{})
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"prompt":"`))
		for range 100 {
			if _, err := pw.Write([]byte(strings.Repeat("x", 100))); err != nil {
				return
			}
		}
		pw.Write([]byte(`"}`))
		pw.Close()
	}()
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", pr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 {
		t.Errorf("chunked body over the limit: %d %s", resp.StatusCode, body)
	}
	pr.Close()
}

// rawConn dials the server for hand-written HTTP; reads fail after a generous guard deadline so a
// broken limit fails the test instead of hanging it.
func rawConn(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(time.Minute))
	return c
}

// TestConnectionLimits checks the limits net/http enforces for the server: header size, the time
// to send the header block and the body, and idle keep-alive connections.
func TestConnectionLimits(t *testing.T) {
	newServer := func(t *testing.T, change func(*Config)) string {
		cfg := templateConfig(t)
		cfg.ModelName = "m"
		cfg.Logger = quietLogger()
		change(&cfg)
		srv, err := New(&fakeEngine{maxLen: 64}, byteTokenizer{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return serveOnLoopback(t, srv, time.Second)
	}
	t.Run("header size", func(t *testing.T) {
		url := newServer(t, func(c *Config) { c.MaxHeaderBytes = 1024 })
		req, _ := http.NewRequest("GET", url+"/v1/models", nil)
		req.Header.Set("X-Big", strings.Repeat("h", 16<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("16 KiB header with a 1 KiB limit: %d, want 431", resp.StatusCode)
		}
		if status, _, _ := call(t, "GET", url+"/v1/models", "", ""); status != 200 {
			t.Errorf("a normal request after that: %d", status)
		}
	})
	t.Run("header never finished", func(t *testing.T) {
		url := newServer(t, func(c *Config) { c.ReadTimeout = 200 * time.Millisecond })
		c := rawConn(t, url)
		io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n") // and nothing more
		data, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("the server did not close a connection whose header never ended: %v", err)
		}
		if len(data) > 0 && !strings.Contains(string(data), " 408 ") {
			t.Errorf("answer to an unfinished header: %q", data)
		}
	})
	t.Run("body never finished", func(t *testing.T) {
		url := newServer(t, func(c *Config) { c.ReadTimeout = 200 * time.Millisecond })
		c := rawConn(t, url)
		io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a body that never ended: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("%d %s, want 408", resp.StatusCode, body)
		}
		checkErrorObject(t, body)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		url := newServer(t, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
		c := rawConn(t, url)
		rd := bufio.NewReader(c)
		io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("first request: %d, close %v", resp.StatusCode, resp.Close)
		}
		if n, err := rd.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("idle connection: read %d, %v; want the server to close it", n, err)
		}
	})
}

// smallSendBuffers shrinks the send buffer of every accepted connection, so that a client that
// stops reading blocks the server's writes after a few kilobytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// dialSmall connects with a small receive buffer and sends a hand-written POST; the caller never
// reads the answer.
func dialSmall(t *testing.T, addr, path, body string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	return c
}

// TestReaderThatNeverReads: a client that stops reading (its socket buffers full) is cut off after
// WriteTimeout and its request aborted, streamed or not, while other clients are served meanwhile.
func TestReaderThatNeverReads(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := &fakeEngine{maxLen: 1 << 20}
			cfg := templateConfig(t)
			cfg.ModelName = "m"
			cfg.Logger = quietLogger()
			cfg.WriteTimeout = 300 * time.Millisecond
			cfg.VocabSize = 0
			srv, err := New(f, byteTokenizer{}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			url := serveOnLoopbackListener(t, srv, smallSendBuffers{ln})
			// Streamed: a practically endless stream; not streamed: a response of megabytes (4
			// choices of 20k tokens with logprobs), written once generation ends.
			body := `{"prompt":"a","max_tokens":500000,"stream":true,"logprobs":5}`
			if !stream {
				body = `{"prompt":"a","max_tokens":20000,"n":4,"logprobs":5}`
			}
			dialSmall(t, strings.TrimPrefix(url, "http://"), "/v1/completions", body)
			waitFor(t, func() bool { return srv.admitted.Load() > 0 })
			// Meanwhile another client is served in full.
			if status, _, out := call(t, "POST", url+"/v1/completions", "", `{"prompt":"b","max_tokens":4,"stream":true}`); status != 200 ||
				!strings.HasSuffix(string(out), "data: [DONE]\n\n") {
				t.Errorf("another client while one is stuck: %d %s", status, out)
			}
			// The stuck one is cut off: its handler returns (and a stream's engine work is aborted).
			waitFor(t, func() bool { return srv.admitted.Load() == 0 && srv.handling.Load() == 0 })
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.live != 0 {
				t.Errorf("%d engine requests still live", f.live)
			}
			if stream && f.aborted != 1 {
				t.Errorf("%d requests aborted, want the stuck stream's", f.aborted)
			}
		})
	}
}

// serveOnLoopbackListener is serveOnLoopback over a given listener.
func serveOnLoopbackListener(t *testing.T, srv *Server, ln net.Listener) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// TestAuthEveryRoute: with an API key, every route but GET /health (known, unknown, or with the
// wrong method) refuses requests without the right bearer token, before reading their bodies.
func TestAuthEveryRoute(t *testing.T) {
	cfg := templateConfig(t)
	cfg.APIKey = "k3y-with-some-length"
	f := &fakeEngine{}
	_, ts := newFakeServer(t, cfg, f)
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/models", ""}, {"GET", "/v1/models/fake-model", ""}, {"GET", "/metrics", ""},
		{"POST", "/v1/completions", `{"prompt":"a"}`}, {"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}]}`},
		{"POST", "/tokenize", `{"prompt":"a"}`}, {"POST", "/detokenize", `{"tokens":[1]}`},
		{"GET", "/v1/engines", ""}, {"POST", "/health", ""}, {"DELETE", "/v1/models/fake-model", ""}, {"GET", "/../../etc/passwd", ""},
		{"PUT", "/v1/completions", "{}"}, {"GET", "/", ""},
	}
	keys := []string{"", "K3Y-WITH-SOME-LENGTH", "k3y", "k3y-with-some-length-and-more", "k3y-with-some-lengtH"}
	for _, r := range routes {
		for _, key := range keys {
			status, _, body := call(t, r.method, ts.URL+r.path, key, r.body)
			if status != http.StatusUnauthorized {
				t.Errorf("%s %s with key %q: %d %s", r.method, r.path, key, status, body)
				continue
			}
			checkErrorObject(t, body)
		}
		// A key padded with spaces inside the value is refused, not trimmed (net/http drops the white
		// space around a header's value, which HTTP says is not part of it).
		for _, header := range []string{"Basic k3y-with-some-length", "k3y-with-some-length", "Bearer", "Bearer ",
			"Bearer  k3y-with-some-length", "Bearer k3y-with-some-length x", "Bearer\tk3y-with-some-length",
			"Bearer k3y-with-some-length \t k3y", "Bearerk3y-with-some-length"} {
			req, _ := http.NewRequest(r.method, ts.URL+r.path, strings.NewReader(r.body))
			req.Header.Set("Authorization", header)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q: %d", r.method, r.path, header, resp.StatusCode)
			}
		}
		if status, _, body := call(t, r.method, ts.URL+r.path, cfg.APIKey, r.body); status == http.StatusUnauthorized {
			t.Errorf("%s %s with the key: %d %s", r.method, r.path, status, body)
		}
		// RFC 7235: the scheme's name is case-insensitive.
		for _, scheme := range []string{"bearer", "BEARER", "bEaReR"} {
			req, _ := http.NewRequest(r.method, ts.URL+r.path, strings.NewReader(r.body))
			req.Header.Set("Authorization", scheme+" "+cfg.APIKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q: 401", r.method, r.path, scheme+" KEY")
			}
		}
		// Two Authorization headers, one of them right: refused (which one counts is not defined).
		req, _ := http.NewRequest(r.method, ts.URL+r.path, strings.NewReader(r.body))
		req.Header.Add("Authorization", "Bearer "+cfg.APIKey)
		req.Header.Add("Authorization", "Bearer wrong")
		if resp, err := http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with two Authorization headers: %d", r.method, r.path, resp.StatusCode)
		}
	}
	if status, _, _ := call(t, "GET", ts.URL+"/health", "", ""); status != 200 {
		t.Errorf("GET /health without the key: %d", status)
	}
	for _, key := range []string{" k3y", "k3y ", "k 3y", "k3y\n"} {
		if _, err := New(f, byteTokenizer{}, Config{ModelName: "m", APIKey: key}); err == nil {
			t.Errorf("New accepted the API key %q, which no header can carry", key)
		}
	}
}

// TestNoFilesystemAccess is the static half of "no file path ever comes from a request": the
// server and the chat template interpreter, which see request data, import nothing that opens
// files or runs programs (the model folder is read by weights, from the command line's --model).
func TestNoFilesystemAccess(t *testing.T) {
	forbidden := map[string]bool{"os": true, "os/exec": true, "io/fs": true, "io/ioutil": true, "path/filepath": true, "plugin": true,
		"syscall": true, "unsafe": true, "github.com/gollm/gollm/weights": true}
	for _, dir := range []string{".", "../../weights/chattemplate"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if forbidden[p] {
					t.Errorf("%s imports %s", path, p)
				}
			}
			checked++
		}
		if checked == 0 {
			t.Errorf("no source files in %s", dir)
		}
	}
}

// TestCheckContext: a prompt must leave room in the context and max_tokens must fit after it, however
// large (a max_tokens near the int range once wrapped the sum and passed).
func TestCheckContext(t *testing.T) {
	srv, err := New(&fakeEngine{maxLen: 64}, byteTokenizer{}, Config{ModelName: "m", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prompt, maxTokens int
		ok                bool
	}{
		{5, 0, true}, {5, 59, true}, {63, 1, true},
		{64, 0, false}, {5, 60, false}, {5, 1000, false}, {5, math.MaxInt, false}, {5, math.MaxInt - 4, false},
	} {
		aerr := srv.checkContext(tc.prompt, tc.maxTokens, "prompt")
		if (aerr == nil) != tc.ok {
			t.Errorf("checkContext(prompt %d, max_tokens %d) with a 64-token context: %v, want ok %v", tc.prompt, tc.maxTokens, aerr, tc.ok)
		}
		if aerr != nil && (aerr.status != 400 || !strings.Contains(aerr.Message, "maximum context length") || strings.Contains(aerr.Message, "-") ||
			aerr.Code == nil || *aerr.Code != "context_length_exceeded") {
			t.Errorf("checkContext(prompt %d, max_tokens %d): %+v", tc.prompt, tc.maxTokens, aerr)
		}
	}
}
