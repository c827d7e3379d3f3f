package openai

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gollm/gollm/engine"
)

// failingFake is a fakeEngine that can fail for good, as engine.Engine does when its device is lost.
type failingFake struct {
	*fakeEngine
	mu  sync.Mutex
	err error
}

func (f *failingFake) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *failingFake) Add(ctx context.Context, req engine.Request) (Stream, error) {
	if err := f.Err(); err != nil {
		return nil, err
	}
	return f.fakeEngine.Add(ctx, req)
}

// TestEngineFailed: once the engine has failed for good (a lost GPU), /health answers 503 and requests
// get 503 with code engine_failed naming the cause, instead of a 200 from a server that can serve
// nothing.
func TestEngineFailed(t *testing.T) {
	f := &failingFake{fakeEngine: &fakeEngine{maxLen: 64}}
	srv, err := New(f, byteTokenizer{}, Config{ModelName: "fake-model", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	if status, _, _ := call(t, "GET", ts.URL+"/health", "", ""); status != 200 {
		t.Fatalf("/health before: %d", status)
	}
	if status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":2}`); status != 200 {
		t.Fatalf("before: %d %s", status, body)
	}
	f.mu.Lock()
	f.err = fmt.Errorf("%w: model: forward: device lost: illegal address", engine.ErrFailed)
	f.mu.Unlock()
	if status, _, _ := call(t, "GET", ts.URL+"/health", "", ""); status != 503 {
		t.Errorf("/health after the failure: %d, want 503", status)
	}
	status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":2}`)
	if status != 503 || !strings.Contains(string(body), `"code":"engine_failed"`) || !strings.Contains(string(body), "illegal address") {
		t.Errorf("request after the failure: %d %s", status, body)
	}
}
