package openai

import (
	"bytes"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// hugeIDs returns a /detokenize body of the largest size the server accepts: about two million ids.
func hugeIDs(limit int64) []byte {
	var b bytes.Buffer
	b.WriteString(`{"tokens":[1`)
	for int64(b.Len())+4 < limit {
		b.WriteString(",1")
	}
	b.WriteString("]}")
	return b.Bytes()
}

// TestDetokenizeBounded is the fault: a 4 MiB body of ids gave a 48 MB answer, and 32 such
// requests at once took the process to 6.1 GB. Now a list longer than the context is refused (400)
// before it is decoded: 32 concurrent bodies of the largest size allocate a few times their own size
// in all (131 MiB here; 3756 MiB before), and /tokenize of a prompt longer than the context is refused
// the same way.
func TestDetokenizeBounded(t *testing.T) {
	_, ts := newFakeServer(t, Config{}, &fakeEngine{maxLen: 2048})
	body := hugeIDs(DefaultMaxBodyBytes)
	const clients = 32
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	statuses := make([]int, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			resp, err := http.Post(ts.URL+"/detokenize", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	for i, st := range statuses {
		if st != http.StatusBadRequest {
			t.Errorf("request %d: %d, want 400", i, st)
		}
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(clients * 4 * len(body)); allocated > limit {
		t.Errorf("%d bodies of %d bytes allocated %d MiB, want under %d MiB", clients, len(body), allocated>>20, limit>>20)
	}
	t.Logf("%d bodies of %.1f MiB: %d MiB allocated in all", clients, float64(len(body))/(1<<20), allocated>>20)

	status, _, data := call(t, "POST", ts.URL+"/detokenize", "", `{"tokens":[`+strings.Repeat("104,", 2047)+`105]}`)
	if status != 200 || !strings.Contains(string(data), strings.Repeat("h", 2047)+"i") {
		t.Errorf("a context's worth of ids: %d %.100s", status, data)
	}
	status, _, data = call(t, "POST", ts.URL+"/detokenize", "", `{"tokens":[`+strings.Repeat("104,", 2048)+`105]}`)
	if status != 400 || !strings.Contains(string(data), "2049 ids") {
		t.Errorf("one id more than the context: %d %s", status, data)
	}
	status, _, data = call(t, "POST", ts.URL+"/tokenize", "", `{"prompt":"`+strings.Repeat("a", 2048)+`","add_special_tokens":false}`)
	if status != 200 || decodeMap(t, data)["count"] != 2048.0 {
		t.Errorf("tokenize a context's worth: %d %.100s", status, data)
	}
	status, _, data = call(t, "POST", ts.URL+"/tokenize", "", `{"prompt":"`+strings.Repeat("a", 2048)+`","add_special_tokens":true}`)
	if status != 400 || !strings.Contains(string(data), "2049 tokens") {
		t.Errorf("tokenize one token more than the context: %d %s", status, data)
	}
}

// TestTokenizeAdmission: /tokenize and /detokenize take a place in the admission limit like a
// generation request: with every place held by blocked generations they get 429, and afterwards
// they are served.
func TestTokenizeAdmission(t *testing.T) {
	f := &fakeEngine{maxLen: 64, block: make(chan struct{})}
	srv, ts := newFakeServer(t, Config{MaxRunning: 1, MaxQueue: 1}, f)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if status, _, body := call(t, "POST", ts.URL+"/v1/completions", "", `{"prompt":"x","max_tokens":2}`); status != 200 {
				t.Errorf("blocked generation: %d %s", status, body)
			}
		})
	}
	waitFor(t, func() bool { return srv.admitted.Load() == 2 })
	for _, r := range []struct{ path, body string }{{"/tokenize", `{"prompt":"hi"}`}, {"/detokenize", `{"tokens":[104]}`}} {
		if status, hdr, body := call(t, "POST", ts.URL+r.path, "", r.body); status != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
			t.Errorf("%s with the queue full: %d %s", r.path, status, body)
		}
	}
	close(f.block)
	wg.Wait()
	for _, r := range []struct{ path, body string }{{"/tokenize", `{"prompt":"hi"}`}, {"/detokenize", `{"tokens":[104]}`}} {
		if status, _, body := call(t, "POST", ts.URL+r.path, "", r.body); status != 200 {
			t.Errorf("%s afterwards: %d %s", r.path, status, body)
		}
	}
	waitFor(t, func() bool { return srv.admitted.Load() == 0 })
}
