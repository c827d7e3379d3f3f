package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
)

// windowConfig is a random Ministral-style model with sliding layers (window 6) around a full one: the
// engine's pool then has a full-attention group and two sliding groups, whose pages it gives back.
var windowConfig = map[string]any{
	"architectures":           []string{"MinistralForCausalLM"},
	"model_type":              "ministral",
	"vocab_size":              300,
	"hidden_size":             64,
	"intermediate_size":       128,
	"num_hidden_layers":       3,
	"num_attention_heads":     4,
	"num_key_value_heads":     2,
	"max_position_embeddings": 512,
	"rms_norm_eps":            1e-5,
	"rope_theta":              10000.0,
	"sliding_window":          6,
	"layer_types":             []string{"sliding_attention", "full_attention", "sliding_attention"},
	"bos_token_id":            256,
	"eos_token_id":            257,
	"torch_dtype":             "float32",
}

// referenceGreedy continues prompt by n greedy tokens, each from a forward over the whole sequence in
// fresh, contiguous pages of every KV group (no cache carried between steps, nothing given back).
func referenceGreedy(t *testing.T, m *model.Model, prompt []int32, n int) []int32 {
	t.Helper()
	groups := len(m.KVLayout().Windows)
	perGroup := m.NumBlocks() / groups
	tokens := slices.Clone(prompt)
	var out []int32
	for range n {
		pages := (len(tokens) + m.BlockSize() - 1) / m.BlockSize()
		if pages > perGroup {
			t.Fatalf("reference: %d tokens need %d pages a group, have %d", len(tokens), pages, perGroup)
		}
		tables := make([][]int32, groups)
		for g := range tables {
			for i := range pages {
				tables[g] = append(tables[g], int32(g*perGroup+i))
			}
		}
		st := &model.Step{Tokens: tokens, QueryStart: []int32{0, int32(len(tokens))}, ContextLens: []int32{int32(len(tokens))},
			BlockTables: tables[:1], LogitRows: []int32{int32(len(tokens) - 1)}}
		for g := 1; g < groups; g++ {
			st.GroupBlockTables = append(st.GroupBlockTables, tables[g:g+1])
		}
		for i := range tokens {
			st.Positions = append(st.Positions, int32(i))
			st.SlotMapping = append(st.SlotMapping, int32(i))
		}
		ids, err := m.ForwardGreedy(st)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ids[0])
		tokens = append(tokens, ids[0])
	}
	return out
}

// TestWindowedModelThroughTheEngine serves a windowed model with everything that moves its KV pages at
// once: a pool too small for every request (preemptions), chunked prefills, shared prompt prefixes
// (prefix hits across the groups, the sliding groups needing only their window's pages), requests
// arriving while others decode, and prompts and outputs much longer than the window, so that the
// sliding groups give pages back and the pool reuses them. Every request's greedy tokens must be those
// of a plain forward over its whole sequence, and no block may outlive the requests.
func TestWindowedModelThroughTheEngine(t *testing.T) {
	dir := t.TempDir()
	weightstest.WriteLlama(t, dir, windowConfig, 11)
	f, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref, err := model.Load(f, model.Options{NumBlocks: 3 * 40, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if got := ref.KVLayout().Windows; !slices.Equal(got, []int{0, 6, 6}) {
		t.Fatalf("KV groups %v, want a full one and two sliding ones", got)
	}

	rng := rand.New(rand.NewPCG(5, 6))
	shared := randomPrompt(rng, 21)
	var reqs []Request
	for i := range 10 {
		prompt := randomPrompt(rng, 3+rng.IntN(30))
		if i%3 == 0 {
			prompt = append(slices.Clone(shared[:10+i]), prompt[:5]...)
		}
		reqs = append(reqs, Request{ID: fmt.Sprint("r", i), PromptIDs: prompt, MaxTokens: 20 + rng.IntN(20), IgnoreEOS: true})
	}
	want := make([][]int32, len(reqs))
	for i, r := range reqs {
		want[i] = referenceGreedy(t, ref, r.PromptIDs, r.MaxTokens)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"pipelined", Config{MaxNumBatchedTokens: 16, MaxNumSeqs: 8}},
		{"plain steps", Config{MaxNumBatchedTokens: 16, MaxNumSeqs: 8, DisablePipelining: true}},
		{"no prefix caching", Config{MaxNumBatchedTokens: 64, MaxNumSeqs: 8, DisablePrefixCaching: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 3 groups × 30 blocks of 4: a sequence of up to 120 tokens fits, a few at a time.
			m, err := model.Load(f, model.Options{NumBlocks: 90, BlockSize: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			e := newEngine(t, m, tc.cfg)
			// A request, then the same prompt again: found in the prefix cache across the groups, the
			// sliding ones serving the pages of the window before the hit (given back while the first
			// request decoded past them, and still cached).
			first := reqs[3]
			for _, id := range []string{"first", "again"} {
				r := first
				r.ID = id
				s, err := e.Add(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				got := collect(t, s)
				if !slices.Equal(got.ids, want[3]) {
					t.Errorf("request %s: %v\nwant %v", id, got.ids, want[3])
				}
				wantCached := 0
				if id == "again" && !tc.cfg.DisablePrefixCaching {
					wantCached = (len(r.PromptIDs) - 1) / 4 * 4
				}
				if got.usage.CachedTokens != wantCached {
					t.Errorf("request %s: %d cached tokens, want %d", id, got.usage.CachedTokens, wantCached)
				}
			}
			// The requests arrive one by one while the engine steps; on a loaded machine the first ones
			// may finish before the last arrive, and the pool never runs short. The whole round (every
			// answer checked) then runs again, up to three times, until one round has preempted.
			var st Stats
			for round := 0; round < 3 && (round == 0 || st.Preemptions == 0 && tc.name != "no prefix caching"); round++ {
				streams := make([]*Stream, len(reqs))
				for i, r := range reqs {
					r.ID = fmt.Sprint(r.ID, "-", round)
					s, err := e.Add(context.Background(), r)
					if err != nil {
						t.Fatal(err)
					}
					streams[i] = s
				}
				for i, s := range streams {
					if got := collect(t, s); !slices.Equal(got.ids, want[i]) {
						t.Errorf("request %s (%d prompt tokens): %v\nwant %v", reqs[i].ID, len(reqs[i].PromptIDs), got.ids, want[i])
					}
				}
				st = e.Stats()
			}
			t.Logf("%d preemptions, prefix hit rate %.2f", st.Preemptions, st.PrefixHitRate)
			if st.Preemptions == 0 && tc.name != "no prefix caching" {
				t.Errorf("no preemption: the pool is not tight enough to test them")
			}
			closeAndCheckPool(t, e)
		})
	}
}

// TestMaxModelLen: the longest request is the model's context (Llama 3.1's 131072 tokens, nothing caps it
// lower), the pool's capacity, or Config.MaxModelLen; with KV groups, the longest sequence the pool holds
// at once (a block of every group per page).
func TestMaxModelLen(t *testing.T) {
	for _, tc := range []struct {
		name               string
		maxPos, numBlocks  int
		layerTypes         []string
		window, configured int
		want               int
	}{
		{"128k context", 131072, 131072 / 16, nil, 0, 0, 131072},
		{"the pool is shorter", 131072, 1000, nil, 0, 0, 16000},
		{"configured", 131072, 131072 / 16, nil, 0, 4096, 4096},
		{"KV groups", 131072, 6000, []string{"sliding_attention", "full_attention", "sliding_attention"}, 1024, 0, 6000 / 3 * 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newCountingModel(32, tc.maxPos, 16, tc.numBlocks)
			m.cfg.NumHiddenLayers, m.cfg.LayerTypes, m.cfg.SlidingWindow = 3, tc.layerTypes, tc.window
			e := newEngine(t, m, Config{MaxModelLen: tc.configured})
			if got := e.MaxModelLen(); got != tc.want {
				t.Errorf("MaxModelLen %d, want %d", got, tc.want)
			}
		})
	}
}
