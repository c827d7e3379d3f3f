package main

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestServeHostOrigin is the fault: gollm serve without an API key served any Host and
// Origin and accepted text/plain, so a web page could drive it. Now a rebound host, a cross-site page
// and a text/plain body are refused (403, 403, 415); localhost, this machine's name, --allowed-hosts
// and --allowed-origins are served.
func TestServeHostOrigin(t *testing.T) {
	url := startServe(t, "--model", writeTestModel(t), "--kv-blocks", "16",
		"--allowed-hosts", "gollm.lan", "--allowed-origins", "https://ui.example.com")
	hostname, _ := os.Hostname()
	for _, tc := range []struct {
		name, host, origin, contentType string
		status                          int
	}{
		{"rebound host", "attacker.example:8000", "", "application/json", 403},
		{"cross-site page", "", "https://attacker.example", "application/json", 403},
		{"text/plain", "", "", "text/plain", 415},
		{"localhost", "localhost:8000", "", "application/json", 200},
		{"this machine", hostname, "", "application/json", 200},
		{"allowed host", "gollm.lan:8000", "", "application/json", 200},
		{"allowed origin", "", "https://ui.example.com", "application/json", 200},
		{"localhost page", "", "http://localhost:3000", "application/json", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":2}`))
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			req.Header.Set("Content-Type", tc.contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}
