package openai

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestServeLoading: the port answers at once, 503 on /health and on every route while the model
// loads; the loaded server then serves, and Config.Ready is called once it does (a /health right after
// it answers 200); an interrupt while loading stops cleanly, and a failed load is returned, neither
// calling Ready; the listener is closed in every case.
func TestServeLoading(t *testing.T) {
	tests := []struct {
		name string
		// finish ends the load: it returns the loaded server, or an error; cancel interrupts instead.
		fail, cancel bool
	}{
		{name: "loads, then serves"},
		{name: "load fails", fail: true},
		{name: "interrupted while loading", cancel: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := templateConfig(t)
			cfg.ModelName = "m"
			cfg.Logger = quietLogger()
			ready := make(chan struct{}, 2)
			cfg.Ready = func() { ready <- struct{}{} }
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			url := "http://" + ln.Addr().String()
			release := make(chan struct{})
			loadEnded := make(chan error, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() {
				served <- ServeLoading(ctx, ln, time.Second, cfg, func(ctx context.Context) (*Server, error) {
					select {
					case <-release:
					case <-ctx.Done():
						loadEnded <- ctx.Err()
						return nil, ctx.Err()
					}
					if tc.fail {
						return nil, errors.New("no such model")
					}
					return New(&fakeEngine{maxLen: 64}, byteTokenizer{}, cfg)
				})
			}()
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/health", ""}, {"GET", "/v1/models", ""}, {"GET", "/metrics", ""},
				{"POST", "/v1/completions", `{"prompt":"a"}`}, {"POST", "/v1/chat/completions", `{}`},
			} {
				status, header, body := call(t, r.method, url+r.path, "", r.body)
				if status != 503 || header.Get("Retry-After") == "" || r.path != "/health" && !contains(body, `"code":"model_loading"`) {
					t.Errorf("%s %s while loading: %d %s", r.method, r.path, status, body)
				}
			}
			switch {
			case tc.cancel:
				cancel()
				if err := <-loadEnded; !errors.Is(err, context.Canceled) {
					t.Errorf("load's context: %v", err)
				}
				if err := <-served; err != nil {
					t.Errorf("ServeLoading after an interrupt: %v, want nil", err)
				}
			case tc.fail:
				close(release)
				if err := <-served; err == nil || err.Error() != "no such model" {
					t.Errorf("ServeLoading after a failed load: %v", err)
				}
			default:
				close(release)
				select {
				case <-ready:
				case <-time.After(time.Minute):
					t.Fatal("Ready not called")
				}
				if status, _, body := call(t, "GET", url+"/health", "", ""); status != 200 {
					t.Errorf("/health once Ready was called: %d %s", status, body)
				}
				if status, _, body := call(t, "POST", url+"/v1/completions", "", `{"prompt":"a","max_tokens":2}`); status != 200 {
					t.Errorf("completion once loaded: %d %s", status, body)
				}
				cancel()
				if err := <-served; err != nil {
					t.Errorf("ServeLoading: %v", err)
				}
			}
			if n := len(ready); n != 0 {
				t.Errorf("Ready called %d more times", n)
			}
			if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
				c.Close()
				t.Error("still listening")
			}
		})
	}
}

func contains(body []byte, s string) bool { return strings.Contains(string(body), s) }
