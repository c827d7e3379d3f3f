//go:build cuda

package engine

import (
	"slices"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// TestCUDAConcurrentFP8KV runs TestCUDAConcurrentBF16's requests on the head-64 model with an FP8 KV
// cache (--kv-cache-dtype fp8) in float32 and in bfloat16: the engine serves them to the end over the
// GPU's e4m3 pages (the RoPE kernel quantizing, the decode kernels' FMA _e4m3 entry points and the
// prefill kernel reading), the pool holds every block again afterwards, and batching changes a
// request's tokens only at near-ties: batching changes which kernel computes a token's products, so a
// K or V element may round to a neighbouring e4m3 code; a request may differ from its run alone only
// from a token whose top-2 logprob gap alone was under 0.05, and at most 3 of the 32 may differ.
func TestCUDAConcurrentFP8KV(t *testing.T) {
	requireGPU(t)
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, cudaHead64Config, 7)
	for _, dt := range []string{"float32", "bfloat16"} {
		t.Run(dt, func(t *testing.T) {
			f, err := weights.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			m, err := model.Load(f, model.Options{NumBlocks: 256, BlockSize: 16, Device: model.DeviceCUDA, DType: dt,
				KVCacheDType: model.KVCacheFP8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			if m.Shape().KVCacheDType != model.KVCacheFP8 {
				t.Fatalf("KV cache dtype %q", m.Shape().KVCacheDType)
			}
			reqs := concurrentRequests(3)
			want := runAlone(t, m, reqs)
			e := newEngine(t, m, Config{MaxNumSeqs: 12, MaxNumBatchedTokens: 48})
			got := runConcurrent(t, e, reqs)
			closeAndCheckPool(t, e)
			differ := 0
			for i := range want {
				if len(got[i].ids) != reqs[i].MaxTokens {
					t.Errorf("request %d: %d tokens, want %d", i, len(got[i].ids), reqs[i].MaxTokens)
				}
				if slices.Equal(got[i].ids, want[i].ids) {
					continue
				}
				differ++
				k := 0
				for k < min(len(got[i].ids), len(want[i].ids)) && got[i].ids[k] == want[i].ids[k] {
					k++
				}
				if k >= len(want[i].logprobs) || len(want[i].logprobs[k].Top) < 2 {
					t.Errorf("request %d: got %v, alone %v; no logprobs at token %d", i, got[i].ids, want[i].ids, k)
					continue
				}
				top := want[i].logprobs[k].Top
				if gap := top[0].Logprob - top[1].Logprob; gap >= 0.05 {
					t.Errorf("request %d: got %v, alone %v; first difference at token %d, where the top-2 gap alone is %.3g",
						i, got[i].ids, want[i].ids, k, gap)
				}
			}
			if differ > 3 {
				t.Errorf("%d of %d requests differ from their runs alone", differ, len(want))
			}
			t.Logf("%d of %d requests differ from their runs alone (near-ties only)", differ, len(want))
		})
	}
}
