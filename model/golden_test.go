package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// goldenDir holds tiny random checkpoints and HF transformers' outputs for them, written by
// scripts/goldens/make_goldens.py (LLaMA) and make_family_goldens.py (Qwen2, Qwen3, Mistral, Ministral,
// Gemma 3); see their headers to regenerate.
const goldenDir = "testdata/golden"

// golden is one case's golden.json.
type golden struct {
	Case                string    `json:"case"`
	Style               string    `json:"style"`
	DType               string    `json:"dtype"`
	TransformersVersion string    `json:"transformers_version"`
	NewTokens           int       `json:"new_tokens"`
	InvFreq             []float64 `json:"inv_freq"` // LLaMA cases: the one rotary table
	// Family cases: every rotary table by buffer name, and the config as transformers read it.
	Family   string               `json:"family"`
	Rotary   map[string][]float64 `json:"rotary"`
	HFConfig map[string]any       `json:"hf_config"`
	Prompts  []struct {
		PromptIDs  []int32   `json:"prompt_ids"`
		GreedyIDs  []int32   `json:"greedy_ids"`
		MinMargin  float64   `json:"min_margin"`
		LastLogits []float64 `json:"last_logits"`
	} `json:"prompts"`
}

// goldenCase is a loaded golden case: the checkpoint on the CPU backend and transformers' answers.
type goldenCase struct {
	name   string
	model  *Model
	golden golden
	tol    float64 // max abs logit error allowed
}

// goldenFile is one case under goldenDir: its name, its checkpoint's folder and its golden.json.
type goldenFile struct {
	name   string
	dir    string
	golden golden
}

// readGoldens reads every case's golden.json under goldenDir. The goldens are committed, so their
// absence is a failure.
func readGoldens(t *testing.T) []goldenFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*", "golden.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no goldens under %s (%v): run scripts/goldens/make_goldens.py", goldenDir, err)
	}
	var files []goldenFile
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var g golden
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		dir := filepath.Dir(path)
		files = append(files, goldenFile{name: filepath.Base(dir), dir: dir, golden: g})
	}
	return files
}

// openGoldenCheckpoint opens gf's checkpoint, closed at the end of the test, and returns it with the KV
// pool every golden suite loads it with: pages of 16 tokens, room for the batched greedy run and the
// whole and chunked prefills of every prompt, in every KV group (the pager gives the sliding groups'
// pages back, but not at once).
func openGoldenCheckpoint(t *testing.T, gf goldenFile) (*weights.Folder, Options) {
	t.Helper()
	folder, err := weights.Open(gf.dir)
	if err != nil {
		t.Fatalf("%s: %v", gf.dir, err)
	}
	t.Cleanup(func() { folder.Close() })
	const blockSize = 16
	numBlocks := 0
	for _, p := range gf.golden.Prompts {
		numBlocks += 3 * len(KVLayoutOf(folder.Config).Windows) * ((len(p.PromptIDs)+gf.golden.NewTokens)/blockSize + 1)
	}
	return folder, Options{NumBlocks: numBlocks, BlockSize: blockSize}
}

// goldenTolerance is the largest logit error allowed against g's transformers logits when computing in
// float32 (the CPU backend, the GPU's float32 modes): 1e-3 for a float32 checkpoint, 2e-2 for one
// stored in 16 bits.
func goldenTolerance(g golden) float64 {
	if g.DType == "float32" {
		return 1e-3
	}
	return 2e-2
}

// loadGoldens opens every case under goldenDir with weights.Open and Load. The goldens are committed,
// so their absence is a failure.
func loadGoldens(t *testing.T) []goldenCase {
	t.Helper()
	return loadGoldensTP(t, 0)
}

// loadGoldensTP is loadGoldens with the models sharded over tensorParallel ranks (0: whole).
func loadGoldensTP(t *testing.T, tensorParallel int) []goldenCase {
	t.Helper()
	var cases []goldenCase
	for _, gf := range readGoldens(t) {
		folder, opts := openGoldenCheckpoint(t, gf)
		opts.TensorParallel = tensorParallel
		m, err := Load(folder, opts)
		if err != nil {
			t.Fatalf("%s: %v", gf.dir, err)
		}
		t.Cleanup(func() { m.Close() })
		cases = append(cases, goldenCase{name: gf.name, model: m, golden: gf.golden, tol: goldenTolerance(gf.golden)})
	}
	return cases
}

func float64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// argmaxRows is argmax of each row.
func argmaxRows(rows [][]float32) []int32 {
	ids := make([]int32, len(rows))
	for i, row := range rows {
		ids[i] = argmax(row)
	}
	return ids
}

// TestGoldenGreedy prefills all four prompts of a case in one step (ragged lengths 1, 7, 33, 300 side by
// side, shuffled pages), checks the last prompt position's logits against transformers', then decodes
// the four sequences together greedily and requires transformers' 32 tokens exactly.
func TestGoldenGreedy(t *testing.T) {
	for _, gc := range loadGoldens(t) {
		t.Run(gc.name, func(t *testing.T) { checkGoldenGreedy(t, gc) })
	}
}

// TestGoldenGreedyTensorParallel is TestGoldenGreedy on every case sharded over two ranks: the same
// logits within the same tolerance of transformers', and transformers' greedy tokens exactly.
func TestGoldenGreedyTensorParallel(t *testing.T) {
	for _, gc := range loadGoldensTP(t, 2) {
		t.Run(gc.name, func(t *testing.T) { checkGoldenGreedy(t, gc) })
	}
}

// checkGoldenGreedy is TestGoldenGreedy's check of one case, on gc.model: the decode steps' logits come
// to the host and the argmax is picked there.
func checkGoldenGreedy(t *testing.T, gc goldenCase) {
	m, g := gc.model, gc.golden
	p := newModelPager(m, newRand(uint64(len(gc.name))))
	got, worst := goldenGreedy(t, m, p, g, gc.tol, func(s *Step) ([]int32, error) {
		logits, err := m.Forward(s)
		if err != nil {
			return nil, err
		}
		return argmaxRows(logits), nil
	})
	t.Logf("%s (%s, %s config, transformers %s): worst last-logits diff %.3g", gc.name, g.DType, g.Style,
		g.TransformersVersion, worst)
	checkGreedyIDs(t, g, got, nil)
}

// goldenGreedy prefills g's prompts side by side in one step on m (sequences 0 to len-1 of p), checks
// each prompt's last logits against transformers' within tol, picks the first token of each from them
// (argmax on the host), then runs the other g.NewTokens-1 decode steps for all the prompts together
// with decode, which returns each sequence's greedy pick. It returns each prompt's g.NewTokens tokens
// and the worst last-logits difference; checkGreedyIDs compares the tokens with transformers'.
// TestGoldenGreedy (CPU) and TestCUDAGolden (through goldenGreedyOnGPU) share it.
func goldenGreedy(t *testing.T, m *Model, p *pager, g golden, tol float64, decode func(*Step) ([]int32, error)) ([][]int32, float64) {
	t.Helper()
	prompts := make([][]int32, len(g.Prompts))
	for i, pr := range g.Prompts {
		prompts[i] = pr.PromptIDs
	}
	var worst float64
	got := greedyRun(t, p, prompts, g.NewTokens, func(step int, s *Step) ([]int32, error) {
		if step > 0 {
			return decode(s)
		}
		logits, err := m.Forward(s)
		if err != nil {
			return nil, err
		}
		for i, pr := range g.Prompts {
			diff := maxAbsDiff(logits[i], pr.LastLogits)
			worst = math.Max(worst, diff)
			if diff > tol {
				t.Errorf("prompt of %d tokens: last logits max abs diff %g > %g", len(pr.PromptIDs), diff, tol)
			}
		}
		return argmaxRows(logits), nil
	})
	return got, worst
}

// greedyRun runs steps steps of greedy generation for prompts side by side, as sequences 0 to len-1 of
// p: the first step prefills every prompt, each later one feeds every sequence its last pick. pick runs
// the step it is given (step 0: the prefill) and returns each sequence's next token. greedyRun returns
// each sequence's steps picks. goldenGreedy and runPrompts share it.
func greedyRun(t *testing.T, p *pager, prompts [][]int32, steps int, pick func(step int, s *Step) ([]int32, error)) [][]int32 {
	t.Helper()
	chunks := make([]chunk, len(prompts))
	for i, pr := range prompts {
		chunks[i] = chunk{seq: i, tokens: pr}
	}
	got := make([][]int32, len(prompts))
	for step := range steps {
		ids, err := pick(step, p.step(chunks...))
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for i := range chunks {
			got[i] = append(got[i], ids[i])
			chunks[i].tokens = []int32{ids[i]}
		}
	}
	return got
}

// checkGreedyIDs compares each prompt's greedy tokens got (from goldenGreedy) with transformers',
// reporting a prompt's first miss unless excused (nil: none is) forgives a miss for a prompt whose
// smallest greedy margin is minMargin. It returns how many tokens matched before each prompt's first
// miss, summed, and the total of transformers' tokens.
func checkGreedyIDs(t *testing.T, g golden, got [][]int32, excused func(minMargin float64) bool) (matched, total int) {
	t.Helper()
	for i, pr := range g.Prompts {
		n := 0
		for n < len(pr.GreedyIDs) && got[i][n] == pr.GreedyIDs[n] {
			n++
		}
		matched, total = matched+n, total+len(pr.GreedyIDs)
		if n < len(pr.GreedyIDs) && (excused == nil || !excused(pr.MinMargin)) {
			t.Errorf("prompt of %d tokens: greedy token %d is %d, transformers says %d (margin %.3g)\n got %v\nwant %v",
				len(pr.PromptIDs), n, got[i][n], pr.GreedyIDs[n], pr.MinMargin, got[i], pr.GreedyIDs)
		}
	}
	return matched, total
}

// TestGoldenChunkedPrefill prefills each prompt in chunks of 5 tokens (each chunk attending to the
// prefix that earlier steps cached) and compares the last logits with transformers' and with a prefill
// of the whole prompt in one step.
func TestGoldenChunkedPrefill(t *testing.T) {
	for _, gc := range loadGoldens(t) {
		t.Run(gc.name, func(t *testing.T) {
			// Chunking changes only the order of float32 sums inside attention.
			checkChunkedPrefill(t, gc.model, newModelPager(gc.model, newRand(99)), gc.golden, 0, gc.tol, 1e-4)
		})
	}
}

// checkChunkedPrefill prefills each of g's prompts on m twice, as sequences seq+2i (whole, in one step)
// and seq+2i+1 of p (in chunks of 5 tokens, each attending to the prefix that earlier steps cached),
// and checks the chunked prefill's last logits against transformers' within tol and against the whole
// prefill's within chunkTol. TestGoldenChunkedPrefill (CPU) and TestCUDAGolden share it.
func checkChunkedPrefill(t *testing.T, m *Model, p *pager, g golden, seq int, tol, chunkTol float64) {
	t.Helper()
	for i, pr := range g.Prompts {
		whole, err := m.Forward(p.step(chunk{seq: seq + 2*i, tokens: pr.PromptIDs}))
		if err != nil {
			t.Fatal(err)
		}
		var last [][]float32
		for start := 0; start < len(pr.PromptIDs); start += 5 {
			end := min(start+5, len(pr.PromptIDs))
			if last, err = m.Forward(p.step(chunk{seq: seq + 2*i + 1, tokens: pr.PromptIDs[start:end]})); err != nil {
				t.Fatal(err)
			}
		}
		if diff := maxAbsDiff(last[0], pr.LastLogits); diff > tol {
			t.Errorf("prompt of %d tokens in chunks of 5: last logits max abs diff %g > %g", len(pr.PromptIDs), diff, tol)
		}
		if diff := maxAbsDiff(last[0], float64s(whole[0])); diff > chunkTol {
			t.Errorf("prompt of %d tokens: chunked and whole prefill logits differ by %g > %g", len(pr.PromptIDs),
				diff, chunkTol)
		}
	}
}

// TestGoldenInvFreq checks the rotary frequencies computed from each config (4- and 5-style, default,
// linear and llama3 scaling, Gemma 3's table per layer type) against the inv_freq buffers of
// transformers' model, to within an ulp or two.
func TestGoldenInvFreq(t *testing.T) {
	for _, gc := range loadGoldens(t) {
		t.Run(gc.name, func(t *testing.T) {
			cfg, sh := gc.model.Config(), gc.model.Shape()
			tables := map[string][]float64{"inv_freq": gc.golden.InvFreq}
			if gc.golden.InvFreq == nil {
				tables = gc.golden.Rotary
			}
			if len(tables) == 0 {
				t.Fatal("golden.json has no rotary table")
			}
			for name, want := range tables {
				// Gemma 3's sliding layers rotate by their own table; every other buffer is the full
				// layers' (or the only) one.
				got := sh.RopeInvFreq
				if strings.Contains(name, weights.SlidingAttention) && sh.LocalRopeInvFreq != nil {
					got = sh.LocalRopeInvFreq
				}
				if len(want) != len(got) {
					t.Fatalf("%s: %d frequencies, transformers has %d (config %+v)", name, len(got), len(want), cfg.RopeScaling)
				}
				for i, w := range want {
					if rel := math.Abs(float64(got[i])-w) / w; rel > 3e-7 {
						t.Errorf("%s[%d] = %g, transformers %g (rope %+v)", name, i, got[i], w, cfg.RopeScaling)
					}
				}
			}
		})
	}
}

// TestGoldenConfig checks what gollm read from each family case's config.json, in whichever form it was
// written, against the config transformers built from the same file: layer types and window, head size,
// heads, tying, activation, attention scale and final soft cap (which the image-text head leaves out).
func TestGoldenConfig(t *testing.T) {
	for _, gc := range loadGoldens(t) {
		if gc.golden.Family == "" {
			continue
		}
		t.Run(gc.name, func(t *testing.T) {
			cfg, hf := gc.model.Config(), gc.golden.HFConfig
			text := hf
			if tc, ok := hf["text_config"].(map[string]any); ok {
				text = tc
			}
			num := func(key string) float64 {
				v, _ := text[key].(float64)
				return v
			}
			window := int(num("sliding_window")) // null when the family turned it off
			var hfTypes []string
			if types, ok := text["layer_types"].([]any); ok {
				for _, v := range types {
					hfTypes = append(hfTypes, v.(string))
				}
			} else { // MistralConfig has none: its one mask slides on every layer
				for range int(num("num_hidden_layers")) {
					hfTypes = append(hfTypes, weights.SlidingAttention)
				}
			}
			for l, want := range hfTypes {
				if got := cfg.LayerType(l); got != want && !(want == weights.SlidingAttention && window == 0) {
					t.Errorf("layer %d: %s, transformers %s", l, got, want)
				}
				wantWindow := 0
				if want == weights.SlidingAttention {
					wantWindow = window
				}
				if got := cfg.LayerWindow(l); got != wantWindow {
					t.Errorf("layer %d: window %d, transformers %d", l, got, wantWindow)
				}
			}
			checks := []struct {
				name      string
				got, want float64
			}{
				{"head_dim", float64(cfg.HeadDim), headDimOf(num("head_dim"), num("hidden_size"), num("num_attention_heads"))},
				{"num_key_value_heads", float64(cfg.NumKeyValueHeads), num("num_key_value_heads")},
				{"num_hidden_layers", float64(len(hfTypes)), float64(cfg.NumHiddenLayers)},
				{"query_pre_attn_scalar", cfg.QueryPreAttnScalar, num("query_pre_attn_scalar")},
			}
			if gc.golden.Family != "gemma3" { // Gemma3ForConditionalGeneration's head does not cap
				checks = append(checks, struct {
					name      string
					got, want float64
				}{"final_logit_softcapping", cfg.FinalLogitSoftcap, num("final_logit_softcapping")})
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s: %v, transformers %v", c.name, c.got, c.want)
				}
			}
			if tie, _ := hf["tie_word_embeddings"].(bool); cfg.TieWordEmbeddings != tie {
				t.Errorf("tie_word_embeddings: %v, transformers %v", cfg.TieWordEmbeddings, tie)
			}
			act, _ := text["hidden_activation"].(string)
			if act == "" {
				act, _ = text["hidden_act"].(string)
			}
			if cfg.Activation() != act {
				t.Errorf("activation %q, transformers %q", cfg.Activation(), act)
			}
		})
	}
}

// headDimOf is a transformers config's head size: head_dim, or hidden_size / num_attention_heads for the
// classes without one (Qwen2Config).
func headDimOf(headDim, hidden, heads float64) float64 {
	if headDim > 0 {
		return headDim
	}
	return math.Floor(hidden / heads)
}
