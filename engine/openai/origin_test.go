package openai

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// originCase is one request of TestHostOrigin: its method, path, Host, Origin and Content-Type
// headers, and the status and CORS header it must get.
type originCase struct {
	name                      string
	method, path              string
	host, origin, contentType string
	preflight, requestHeaders string // Access-Control-Request-Method and -Headers
	status                    int
	allowOrigin               bool   // Access-Control-Allow-Origin is the request's Origin
	allowHeadersHas           string // a header Access-Control-Allow-Headers must list
}

func runOriginCase(t *testing.T, base string, key string, tc originCase) {
	t.Helper()
	body := ""
	if tc.method == "POST" {
		body = `{"prompt":"hi","max_tokens":2}`
	}
	req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tc.host != "" {
		req.Host = tc.host
	}
	if tc.origin != "" {
		req.Header.Set("Origin", tc.origin)
	}
	if tc.contentType != "" {
		req.Header.Set("Content-Type", tc.contentType)
	}
	if tc.preflight != "" {
		req.Header.Set("Access-Control-Request-Method", tc.preflight)
	}
	if tc.requestHeaders != "" {
		req.Header.Set("Access-Control-Request-Headers", tc.requestHeaders)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != tc.status {
		t.Errorf("status %d, want %d: %s", resp.StatusCode, tc.status, data)
	}
	if resp.StatusCode >= 400 {
		checkErrorObject(t, data)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); (got == tc.origin && got != "") != tc.allowOrigin {
		t.Errorf("Access-Control-Allow-Origin %q (Origin %q), want it set: %v", got, tc.origin, tc.allowOrigin)
	}
	if tc.allowHeadersHas != "" && !strings.Contains(strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), tc.allowHeadersHas) {
		t.Errorf("Access-Control-Allow-Headers %q lacks %s", resp.Header.Get("Access-Control-Allow-Headers"), tc.allowHeadersHas)
	}
}

// TestHostOrigin: a server without an API key refuses requests for a host it does not know (DNS
// rebinding: a page whose own name now resolves to 127.0.0.1), requests from web pages of other
// origins (cross-site request forgery), and bodies that are not JSON (a browser posts text/plain, a
// form or multipart without a CORS preflight); it serves loopback names, IP addresses, its allowed
// hosts and origins, answers CORS preflights from allowed origins, and keeps /health open. Before,
// all of these were served. With an API key the Host and Origin checks are off (a page cannot know
// the key) and only allowed origins get CORS headers; non-JSON bodies are refused either way.
func TestHostOrigin(t *testing.T) {
	cfg := templateConfig(t)
	cfg.AllowedHosts = []string{"gollm.internal", "*.corp.example"}
	cfg.AllowedOrigins = []string{"https://app.example.com"}
	_, ts := newFakeServer(t, cfg, &fakeEngine{})
	u, _ := url.Parse(ts.URL)
	self := u.Host
	const post, get = "POST", "GET"
	const cmpl = "/v1/completions"
	noKey := []originCase{
		{name: "rebound host", method: post, path: cmpl, host: "evil.example:8000", status: 403},
		{name: "rebound host, models", method: get, path: "/v1/models", host: "evil.example", status: 403},
		{name: "rebound host, metrics", method: get, path: "/metrics", host: "rebind.evil.example", status: 403},
		{name: "rebound host, health", method: get, path: "/health", host: "evil.example", status: 200},
		{name: "localhost", method: post, path: cmpl, host: "localhost:8000", status: 200},
		{name: "LOCALHOST.", method: post, path: cmpl, host: "LOCALHOST.:8000", status: 200},
		{name: "a localhost subdomain", method: get, path: "/v1/models", host: "app.localhost", status: 200},
		{name: "IPv4", method: post, path: cmpl, host: "192.168.1.5:8000", status: 200},
		{name: "IPv6", method: post, path: cmpl, host: "[::1]:8000", status: 200},
		{name: "allowed host", method: post, path: cmpl, host: "gollm.internal:8000", status: 200},
		{name: "allowed subdomain", method: post, path: cmpl, host: "a.b.corp.example", status: 200},
		{name: "not the parent of an allowed subdomain", method: post, path: cmpl, host: "corp.example", status: 403},
		{name: "suffix without a dot", method: post, path: cmpl, host: "evilcorp.example", status: 403},
		{name: "cross-site POST", method: post, path: cmpl, origin: "https://evil.example", status: 403},
		{name: "cross-site GET", method: get, path: "/v1/models", origin: "http://evil.example", status: 403},
		{name: "null origin", method: post, path: cmpl, origin: "null", status: 403},
		{name: "file origin", method: post, path: cmpl, origin: "file://", status: 403},
		{name: "localhost page", method: post, path: cmpl, origin: "http://localhost:3000", status: 200, allowOrigin: true},
		{name: "loopback page", method: post, path: cmpl, origin: "http://127.0.0.1:5173", status: 200, allowOrigin: true},
		{name: "loopback lookalike", method: post, path: cmpl, origin: "http://127.0.0.1.evil.example", status: 403},
		{name: "own origin", method: post, path: cmpl, origin: "http://" + self, status: 200, allowOrigin: true},
		{name: "allowed origin", method: post, path: cmpl, origin: "https://app.example.com", status: 200, allowOrigin: true},
		{name: "allowed origin's other scheme", method: post, path: cmpl, origin: "http://app.example.com", status: 403},
		{name: "text/plain", method: post, path: cmpl, contentType: "text/plain;charset=UTF-8", status: 415},
		{name: "form", method: post, path: cmpl, contentType: "application/x-www-form-urlencoded", status: 415},
		{name: "multipart", method: post, path: "/tokenize", contentType: "multipart/form-data; boundary=x", status: 415},
		{name: "bad content type", method: post, path: "/detokenize", contentType: "json", status: 415},
		{name: "json with charset", method: post, path: cmpl, contentType: "application/json; charset=utf-8", status: 200},
		{name: "a +json type", method: post, path: cmpl, contentType: "application/vnd.gollm+json", status: 200},
		{name: "preflight, localhost page", method: "OPTIONS", path: cmpl, origin: "http://localhost:5173", preflight: "POST",
			requestHeaders: "content-type, authorization, x-stainless-os", status: 204, allowOrigin: true, allowHeadersHas: "x-stainless-os"},
		{name: "preflight, foreign page", method: "OPTIONS", path: cmpl, origin: "https://evil.example", preflight: "POST", status: 403},
		{name: "preflight, odd header names", method: "OPTIONS", path: cmpl, origin: "http://localhost", preflight: "POST",
			requestHeaders: "x-ok, x bad, x:c", status: 204, allowOrigin: true, allowHeadersHas: "x-ok"},
		{name: "OPTIONS without preflight", method: "OPTIONS", path: cmpl, status: 405},
	}
	for _, tc := range noKey {
		t.Run("no key/"+tc.name, func(t *testing.T) { runOriginCase(t, ts.URL, "", tc) })
	}

	cfg.APIKey = "k"
	_, keyed := newFakeServer(t, cfg, &fakeEngine{})
	withKey := []originCase{
		{name: "any host", method: post, path: cmpl, host: "api.example.net", status: 200},
		{name: "any origin, no CORS", method: post, path: cmpl, origin: "https://evil.example", status: 200},
		{name: "localhost page, CORS", method: post, path: cmpl, origin: "http://localhost:3000", status: 200, allowOrigin: true},
		{name: "text/plain", method: post, path: cmpl, contentType: "text/plain", status: 415},
		{name: "preflight without the key", method: "OPTIONS", path: cmpl, origin: "http://localhost:3000", preflight: "POST", status: 204, allowOrigin: true},
		{name: "preflight, foreign page", method: "OPTIONS", path: cmpl, origin: "https://evil.example", preflight: "POST", status: 403},
	}
	for _, tc := range withKey {
		key := "k"
		if tc.method == "OPTIONS" {
			key = "" // browsers send no credentials with a preflight
		}
		t.Run("key/"+tc.name, func(t *testing.T) { runOriginCase(t, keyed.URL, key, tc) })
	}
}

// TestCORSAllowHeaders: the preflight's echo of requested headers keeps only header names (tokens),
// so that nothing a page asks for can add a header or a line to the answer.
func TestCORSAllowHeaders(t *testing.T) {
	for _, tc := range []struct{ requested, want string }{
		{"", "Authorization, Content-Type"},
		{"content-type, authorization", "Authorization, Content-Type"},
		{"X-Stainless-OS, openai-beta", "Authorization, Content-Type, X-Stainless-OS, openai-beta"},
		{"x bad, x:c, x\r\ny, ok", "Authorization, Content-Type, ok"},
	} {
		if got := corsAllowHeaders(tc.requested); got != tc.want {
			t.Errorf("corsAllowHeaders(%q) = %q, want %q", tc.requested, got, tc.want)
		}
	}
}
