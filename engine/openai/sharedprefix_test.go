package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/engine/openai"
	"github.com/gollm/gollm/model"
)

// getBody fetches url and returns the status and the body.
func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// TestSharedPrefixN8 serves the built-in model on the CPU with the shared-prefix decode off and always
// on, and asks /v1/completions for n = 8 greedy choices of one 300-token prompt: the eight choices share
// the prompt's pages (7 of them take it from the prefix cache: gollm:prefix_cache_hits_total), their decodes
// run as one group, and the answers are the same either way, all eight alike.
func TestSharedPrefixN8(t *testing.T) {
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprint(100 + (i*53)%900)
	}
	body := fmt.Sprintf(`{"prompt": [%s], "n": 8, "max_tokens": 16, "temperature": 0, "ignore_eos": true}`,
		strings.Join(ids, ","))
	var texts [][]string
	for _, shared := range []string{model.SharedPrefixOff, model.SharedPrefixAlways} {
		quiet := slog.New(slog.DiscardHandler)
		m, err := llm.Load(context.Background(), "", llm.Config{Device: model.DeviceCPU, KVBlocks: 256, PageSize: 16,
			MaxNumSeqs: 8, Logger: quiet, SharedPrefix: shared})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := m.NewServer(openai.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv.Handler())
		status, data := postJSON(t, ts.URL+"/v1/completions", body)
		_, metrics := getBody(t, ts.URL+"/metrics")
		ts.Close()
		m.Close()
		if status != 200 {
			t.Fatalf("shared prefix %q: %d %s", shared, status, data)
		}
		var resp struct {
			Choices []struct {
				Text  string `json:"text"`
				Index int    `json:"index"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 8 {
			t.Fatalf("%d choices, want 8", len(resp.Choices))
		}
		out := make([]string, 8)
		for _, c := range resp.Choices {
			out[c.Index] = c.Text
		}
		for _, s := range out {
			if s != out[0] {
				t.Errorf("shared prefix %q: greedy choices differ: %q", shared, out)
				break
			}
		}
		// The prompt's 18 full pages computed once, the 7 other choices take them from the cache.
		var hits float64
		for _, line := range strings.Split(string(metrics), "\n") {
			if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "gollm:prefix_cache_hits_total") {
				if _, err := fmt.Sscan(f[1], &hits); err != nil {
					t.Fatal(err)
				}
			}
		}
		if want := float64(7 * 18 * 16); hits < want {
			t.Errorf("shared prefix %q: %v prompt tokens from the prefix cache, want at least %v", shared, hits, want)
		}
		texts = append(texts, out)
	}
	if fmt.Sprint(texts[0]) != fmt.Sprint(texts[1]) {
		t.Errorf("answers differ: off %q, always %q", texts[0], texts[1])
	}
}
