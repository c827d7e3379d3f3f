//go:build cuda

package engine

import (
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// TestCUDAConcurrentFP8KV runs TestCUDAConcurrentBF16's requests on the head-64 model with an FP8 KV
// cache (--kv-cache-dtype fp8) in float32 and in bfloat16: the engine serves them to the end over the
// GPU's e4m3 pages (the RoPE kernel quantizing, the decode kernels' _e4m3 entry points and the
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
			for i := range want {
				if len(got[i].ids) != reqs[i].MaxTokens {
					t.Errorf("request %d: %d tokens, want %d", i, len(got[i].ids), reqs[i].MaxTokens)
				}
			}
			checkNearTies(t, got, want)
		})
	}
}
