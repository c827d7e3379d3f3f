package engine

import (
	"context"
	"runtime"
	"strings"
	"testing"
)

// allocatedBytes returns the bytes f allocates (the heap's cumulative total, so GC does not matter).
func allocatedBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A reader that falls behind gets the merged updates; merging must cost the size of what it merges,
// not re-copy everything merged so far on every push (20000 pushes of 8 bytes would copy 1.6 GB).
func TestStreamMergeIsLinear(t *testing.T) {
	const n, size = 20000, 8
	s := newStream("lagging")
	delta := strings.Repeat("x", size)
	got := allocatedBytes(func() {
		for range n {
			s.push(Output{Text: delta, TokenIDs: []int32{1}})
		}
	})
	if limit := uint64(64 * n * size); got > limit {
		t.Errorf("%d pushes of %d bytes allocated %d bytes, want at most %d (linear)", n, size, got, limit)
	}
	o, err := s.Recv(context.Background())
	if err != nil || len(o.Text) != n*size || len(o.TokenIDs) != n {
		t.Fatalf("merged output: %d bytes, %d tokens, %v", len(o.Text), len(o.TokenIDs), err)
	}
}

// The engine's per-token work must not grow with the output: the text it keeps per request is what
// it has not streamed yet, not everything so far (20000 one-byte tokens would copy 200 MB).
func TestLongOutputTextIsLinear(t *testing.T) {
	const n = 20000
	m := newCountingModel(256, n+10, 16, n/16+2)
	m.script['z'] = 'a' // a, b, ..., z, a, ...: one byte of text per token
	e := newEngine(t, m, Config{})
	var text int
	got := allocatedBytes(func() {
		s, err := e.Add(context.Background(), Request{PromptIDs: []int32{'a'}, MaxTokens: n, IgnoreEOS: true, Stop: []string{"never"}})
		if err != nil {
			t.Fatal(err)
		}
		text = len(collect(t, s).text)
	})
	if text != n {
		t.Fatalf("%d bytes of text for %d one-byte tokens", text, n)
	}
	if perToken := got / n; perToken > 8<<10 {
		t.Errorf("%d bytes allocated per token over %d tokens: quadratic in the output length", perToken, n)
	}
	t.Logf("%d bytes allocated per token", got/n)
}
