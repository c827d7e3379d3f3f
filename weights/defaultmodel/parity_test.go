package defaultmodel_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

// greedyGolden is testdata/greedy.json, written by train/train.py in the same run that trained the
// embedded checkpoint: transformers 5.17's greedy continuation of five Go prompts, in float32 math on
// the CPU from the saved bf16 weights.
type greedyGolden struct {
	NewTokens int `json:"new_tokens"`
	Prompts   []struct {
		Prompt     string    `json:"prompt"`
		PromptIDs  []int32   `json:"prompt_ids"`
		OutputIDs  []int32   `json:"output_ids"`
		OutputText string    `json:"output_text"`
		Margins    []float64 `json:"margins"`
		TopLogits  struct {
			IDs    []int32   `json:"ids"`
			Logits []float64 `json:"logits"`
		} `json:"top_logits"`
	} `json:"prompts"`
}

// logitTolerance bounds |gollm − transformers| on the first step's top-20 logits. Both compute in
// float32 from the same bf16 weights; only the order of the additions differs (seen: up to 1.4e-5).
const logitTolerance = 1e-4

const blockSize = 16

// fixture is the embedded model loaded on the CPU backend, its tokenizer and the goldens.
type fixture struct {
	model  *model.Model
	tok    *tokenizer.Tokenizer
	golden greedyGolden
}

func loadFixture(t *testing.T) *fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "greedy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g greedyGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("greedy.json: %v", err)
	}
	if len(g.Prompts) != 5 || g.NewTokens <= 0 {
		t.Fatalf("greedy.json holds %d prompts of %d new tokens, want 5 of some", len(g.Prompts), g.NewTokens)
	}
	// Materialise into a temporary cache, not the user's.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", os.Getenv("XDG_CACHE_HOME"))
	dir, err := defaultmodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	folder, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { folder.Close() })
	numBlocks := 0
	for _, p := range g.Prompts {
		numBlocks += 2 * ((len(p.PromptIDs)+g.NewTokens)/blockSize + 1) // the one-by-one and the batched runs
	}
	m, err := model.Load(folder, model.Options{NumBlocks: numBlocks, BlockSize: blockSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := tokenizer.Load(folder.TokenizerPath())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{model: m, tok: tok, golden: g}
}

// pager hands out KV blocks in order and builds steps that append tokens to sequences.
type pager struct {
	next   int32
	tables [][]int32
	lens   []int
}

// step appends tokens[s] to sequence s for each s (the sequences are numbered from 0 in order) and
// asks for the logits of each one's last row.
func (p *pager) step(tokens [][]int32) *model.Step {
	for len(p.tables) < len(tokens) {
		p.tables = append(p.tables, nil)
		p.lens = append(p.lens, 0)
	}
	s := &model.Step{QueryStart: []int32{0}}
	for seq, toks := range tokens {
		for _, tok := range toks {
			pos := p.lens[seq]
			if len(p.tables[seq])*blockSize <= pos {
				p.tables[seq] = append(p.tables[seq], p.next)
				p.next++
			}
			block := p.tables[seq][pos/blockSize]
			s.Tokens = append(s.Tokens, tok)
			s.Positions = append(s.Positions, int32(pos))
			s.SlotMapping = append(s.SlotMapping, block*blockSize+int32(pos%blockSize))
			p.lens[seq]++
		}
		s.QueryStart = append(s.QueryStart, int32(len(s.Tokens)))
		s.ContextLens = append(s.ContextLens, int32(p.lens[seq]))
		s.BlockTables = append(s.BlockTables, p.tables[seq])
		s.LogitRows = append(s.LogitRows, int32(len(s.Tokens)-1))
	}
	return s
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

// greedy prefills the prompts together in one step, then decodes them together for n tokens; it
// returns each prompt's generated ids and the logits of its first step.
func greedy(t *testing.T, m *model.Model, p *pager, prompts [][]int32, n int) (out [][]int32, first [][]float32) {
	t.Helper()
	logits, err := m.Forward(p.step(prompts))
	if err != nil {
		t.Fatal(err)
	}
	first = logits
	out = make([][]int32, len(prompts))
	next := make([][]int32, len(prompts))
	for i := range n {
		for s := range prompts {
			tok := argmax(logits[s])
			out[s] = append(out[s], tok)
			next[s] = []int32{tok}
		}
		if i == n-1 {
			break
		}
		if logits, err = m.Forward(p.step(next)); err != nil {
			t.Fatalf("decode step %d: %v", i, err)
		}
	}
	return out, first
}

// TestTokenizerMatchesTraining requires gollm's tokenizer to encode each prompt as HF tokenizers did
// (with the <|bos|> the post-processor adds) and to decode transformers' continuation to the same text.
func TestTokenizerMatchesTraining(t *testing.T) {
	f := loadFixture(t)
	for _, p := range f.golden.Prompts {
		t.Run(p.Prompt, func(t *testing.T) {
			if got := f.tok.Encode(p.Prompt, true); !slices.Equal(got, p.PromptIDs) {
				t.Errorf("Encode(%q, true) = %v, want %v", p.Prompt, got, p.PromptIDs)
			}
			if got := f.tok.Decode(p.OutputIDs, false); got != p.OutputText {
				t.Errorf("Decode(output) = %q, want %q", got, p.OutputText)
			}
		})
	}
}

// TestGreedyMatchesTransformers runs gollm's CPU forward greedily on each prompt alone, and on all five
// side by side in one batch, and requires transformers' first-step logits (top 20, within
// logitTolerance) and its generated ids exactly.
func TestGreedyMatchesTransformers(t *testing.T) {
	f := loadFixture(t)
	g := f.golden
	p := &pager{}
	check := func(t *testing.T, i int, got []int32, first []float32) {
		t.Helper()
		want := g.Prompts[i]
		worst := 0.0
		for j, id := range want.TopLogits.IDs {
			d := math.Abs(float64(first[id]) - want.TopLogits.Logits[j])
			worst = math.Max(worst, d)
		}
		if worst > logitTolerance {
			t.Errorf("%q: first-step top-20 logits differ by up to %.3g > %g", want.Prompt, worst, logitTolerance)
		}
		for j := range want.OutputIDs {
			if j >= len(got) || got[j] != want.OutputIDs[j] {
				t.Errorf("%q: token %d differs (transformers' margin there %.3g)\n got %v\nwant %v",
					want.Prompt, j, want.Margins[j], got, want.OutputIDs)
				return
			}
		}
		t.Logf("%q: %d tokens equal, logits within %.2g: %q", want.Prompt, len(got), worst,
			f.tok.Decode(got, false))
	}
	t.Run("one-by-one", func(t *testing.T) {
		for i, pr := range g.Prompts {
			// Each run starts fresh sequences on blocks no earlier run wrote.
			q := &pager{next: p.next}
			out, first := greedy(t, f.model, q, [][]int32{pr.PromptIDs}, g.NewTokens)
			p.next = q.next
			check(t, i, out[0], first[0])
		}
	})
	t.Run("batched", func(t *testing.T) {
		prompts := make([][]int32, len(g.Prompts))
		for i, pr := range g.Prompts {
			prompts[i] = pr.PromptIDs
		}
		q := &pager{next: p.next}
		out, first := greedy(t, f.model, q, prompts, g.NewTokens)
		p.next = q.next
		for i := range g.Prompts {
			check(t, i, out[i], first[i])
		}
	})
}
