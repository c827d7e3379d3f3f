package engine

import (
	"context"
	"testing"
	"time"
)

// TestPrefixQueriedCountedOnce: a request that needs its logits on the host (logprobs), arriving while
// a step whose tokens the model picks is in flight, is admitted into the pipelined next step, undone
// when that step cannot run on the model's side, and admitted again by the next plain step; its
// prompt's prefix-cache lookup must count once (it counted twice: the Prometheus counters
// gollm:prefix_cache_queries_total and _hits_total, and the hit rate, were inflated).
func TestPrefixQueriedCountedOnce(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 5), 64, 4)
	e := newEngine(t, m, Config{})
	a, err := e.Add(context.Background(), Request{PromptIDs: []int32{1, 2, 3}, MaxTokens: 200, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); e.Stats().PipelinedSteps < 3; { // a decodes, pipelined
		if time.Now().After(deadline) {
			t.Fatalf("no pipelined steps: %+v", e.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	prompt := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	b, err := e.Add(context.Background(), Request{PromptIDs: prompt, MaxTokens: 2, IgnoreEOS: true, Logprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, b)
	collect(t, a)
	if st, want := e.Stats(), int64(3+len(prompt)); st.PrefixQueriedTokens != want {
		t.Errorf("PrefixQueriedTokens %d, want %d (each prompt looked up once); preemptions %d",
			st.PrefixQueriedTokens, want, st.Preemptions)
	}
}
