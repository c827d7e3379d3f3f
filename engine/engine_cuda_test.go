//go:build cuda

package engine

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gollm/gollm/internal/gputest"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// The batching equivalence of engine_test.go on the CUDA backend: these tests run the engine over a model on
// the GPU (go test -tags cuda ./engine/ on a machine with one; they skip without, unless
// GOLLM_REQUIRE_GPU=1). In float32 the GPU computes like the CPU reference, so a request must give the
// same tokens batched with others (prefill chunks beside decodes, graph buckets with padding rows,
// preemption and recompute) as alone.

// cudaGoldenCheckpoint is a committed golden checkpoint of package model (float32, heads of 16: decode
// steps run the prefill attention kernel over the cache).
const cudaGoldenCheckpoint = "../model/testdata/golden/llama3_f32_untied_v4"

// cudaHead64Config is a random model whose heads of 64 take package attention's decode kernels (grouped
// and split-k) and whose matrices the skinny product covers in 16-bit modes.
var cudaHead64Config = map[string]any{
	"architectures":           []string{"LlamaForCausalLM"},
	"model_type":              "llama",
	"vocab_size":              300,
	"hidden_size":             256,
	"intermediate_size":       512,
	"num_hidden_layers":       2,
	"num_attention_heads":     8,
	"num_key_value_heads":     2,
	"head_dim":                64,
	"max_position_embeddings": 512,
	"rms_norm_eps":            1e-5,
	"rope_theta":              10000.0,
	"bos_token_id":            256,
	"eos_token_id":            257,
	"tie_word_embeddings":     false,
	"torch_dtype":             "float32",
}

// requireGPU skips the test when no GPU can be used (fails instead when GOLLM_REQUIRE_GPU=1).
func requireGPU(t *testing.T) {
	t.Helper()
	_, _, err := model.ResolveDevice(model.DeviceCUDA)
	gputest.Require(t, err)
}

// loadCUDAModel loads the checkpoint in dir on the GPU in compute dtype dt with a KV pool of numBlocks
// pages of blockSize tokens.
func loadCUDAModel(t *testing.T, dir, dt string, numBlocks, blockSize int) *model.Model {
	t.Helper()
	f, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, model.Options{NumBlocks: numBlocks, BlockSize: blockSize, Device: model.DeviceCUDA, DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// cudaCheckpoints are the models of the float32 tests: the golden checkpoint and a head-64 random one.
func cudaCheckpoints(t *testing.T) []struct{ name, dir string } {
	t.Helper()
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, cudaHead64Config, 7)
	return []struct{ name, dir string }{{"golden", cudaGoldenCheckpoint}, {"head64", dir}}
}

// concurrentRequests are 32 greedy requests of prompt lengths 1…70 and 4…10 new tokens.
func concurrentRequests(seed uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 2))
	reqs := make([]Request, 32)
	for i := range reqs {
		reqs[i] = Request{
			ID:        fmt.Sprint("r", i),
			PromptIDs: randomPrompt(rng, 1+(i*37)%70),
			MaxTokens: 4 + i%7,
			IgnoreEOS: true,
		}
	}
	return reqs
}

// TestCUDAPromptLogprobs: every golden checkpoint's prompt logprobs on the GPU in float32 (logits rows
// gathered from chunked prefills beside each other) against transformers', as on the CPU.
func TestCUDAPromptLogprobs(t *testing.T) {
	requireGPU(t)
	for _, path := range hfPromptLogprobsFiles(t) {
		dir := filepath.Dir(path)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			checkPromptLogprobsHF(t, loadCUDAModel(t, dir, "float32", 128, 16), path)
		})
	}
}

// TestCUDAConcurrentGreedyEqualsAlone is TestConcurrentGreedyEqualsAlone on the GPU in float32: 32 concurrent greedy
// requests give exactly the tokens each gives alone. Alone, every step is one sequence (a prefill, then
// decode graphs of bucket 1); together, chunked prefills share steps with decodes and decode steps replay
// graphs of buckets up to 16.
func TestCUDAConcurrentGreedyEqualsAlone(t *testing.T) {
	requireGPU(t)
	for _, ck := range cudaCheckpoints(t) {
		t.Run(ck.name, func(t *testing.T) {
			m := loadCUDAModel(t, ck.dir, "float32", 256, 16)
			reqs := concurrentRequests(1)
			want := runAlone(t, m, reqs)
			e := newEngine(t, m, Config{MaxNumSeqs: 12, MaxNumBatchedTokens: 48})
			got := runConcurrent(t, e, reqs)
			checkSame(t, got, want)
			closeAndCheckPool(t, e)
			if st := e.Stats(); st.Steps >= st.GenerationTokens/2 {
				t.Errorf("stats %+v: no batching happened", st)
			}
		})
	}
}

// TestCUDAPreemptionEqualsAlone is TestPreemptionEqualsAlone on the GPU in float32: a pool so small that running
// sequences are preempted and recomputed gives the same tokens, finishes and leaks no block. Pages of 8
// tokens (the decode kernels' smallest) and of 4 (decode through the prefill kernel).
func TestCUDAPreemptionEqualsAlone(t *testing.T) {
	requireGPU(t)
	for _, ck := range cudaCheckpoints(t) {
		for _, pool := range []struct{ blocks, size int }{{8, 8}, {12, 4}} {
			t.Run(fmt.Sprintf("%s/%dx%d", ck.name, pool.blocks, pool.size), func(t *testing.T) {
				m := loadCUDAModel(t, ck.dir, "float32", pool.blocks, pool.size)
				rng := rand.New(rand.NewPCG(5, 6))
				reqs := make([]Request, 8)
				for i := range reqs {
					reqs[i] = Request{PromptIDs: randomPrompt(rng, 6+i*2), MaxTokens: 20, IgnoreEOS: true}
				}
				want := runAlone(t, m, reqs)
				for _, caching := range []bool{true, false} {
					t.Run(fmt.Sprintf("prefix caching %v", caching), func(t *testing.T) {
						e := newEngine(t, m, Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 32, DisablePrefixCaching: !caching})
						got := runConcurrent(t, e, reqs)
						checkSame(t, got, want)
						if st := e.Stats(); st.Preemptions == 0 {
							t.Errorf("no preemption happened (stats %+v): the test does not test what it claims", st)
						}
						closeAndCheckPool(t, e)
					})
				}
			})
		}
	}
}

// TestCUDAConcurrentBF16 runs test 1 on the head-64 model in bfloat16, the fast path (decode products on
// the skinny kernel with fused SwiGLU and RoPE, larger steps on cuBLAS). Batching changes which
// kernel computes a token's products, so 16-bit rounding may flip a choice between near-equal logits:
// a request may differ from its run alone only from a token whose top-2 logprob gap alone was under
// 0.05, and at most 3 of the 32 may differ at all.
func TestCUDAConcurrentBF16(t *testing.T) {
	requireGPU(t)
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, cudaHead64Config, 7)
	m := loadCUDAModel(t, dir, "bfloat16", 256, 16)
	reqs := concurrentRequests(3)
	want := runAlone(t, m, reqs)
	e := newEngine(t, m, Config{MaxNumSeqs: 12, MaxNumBatchedTokens: 48})
	got := runConcurrent(t, e, reqs)
	closeAndCheckPool(t, e)
	checkNearTies(t, got, want)
}

// checkNearTies compares requests run together (got) with the same requests run alone (want): where their
// tokens part, the run alone must have had a near-tie there (its top two log-probabilities within 0.05),
// which a batch's other summation order may break the other way; at most three requests may part.
func checkNearTies(t *testing.T, got, want []result) {
	t.Helper()
	differ := 0
	for i := range want {
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
}
