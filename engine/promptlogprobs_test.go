package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// hfPromptLogprobs is a golden case's prompt_logprobs.json, written by
// scripts/goldens/make_prompt_logprobs.py with HF transformers.
type hfPromptLogprobs struct {
	DType   string `json:"dtype"`
	Top     int    `json:"top"`
	Prompts []struct {
		PromptIDs []int32 `json:"prompt_ids"`
		Entries   []struct {
			Logprob     float64   `json:"logprob"`
			Rank        int       `json:"rank"`
			TopIDs      []int32   `json:"top_ids"`
			TopLogprobs []float64 `json:"top_logprobs"`
		} `json:"entries"`
	} `json:"prompts"`
}

// firstOutputs reads a stream to its end and returns its first Output, the prompt logprobs of every
// Output (only the first may have them) and the number of Outputs.
func firstOutputs(t *testing.T, s *Stream) (first Output, prompt [][]Logprobs, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		o, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return first, prompt, n
		}
		if err != nil {
			t.Fatalf("stream %s: %v", s.ID(), err)
		}
		if n == 0 {
			first = o
		}
		n++
		prompt = append(prompt, o.PromptLogprobs)
		if o.Err != nil {
			t.Fatalf("stream %s: %v", s.ID(), o.Err)
		}
	}
}

// TestPromptLogprobsMatchTransformers: every golden checkpoint's prompt logprobs on the CPU backend
// against transformers' (checkPromptLogprobsHF).
func TestPromptLogprobsMatchTransformers(t *testing.T) {
	for _, path := range hfPromptLogprobsFiles(t) {
		dir := filepath.Dir(path)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			f, err := weights.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			m, err := model.Load(f, model.Options{NumBlocks: 128, BlockSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			checkPromptLogprobsHF(t, m, path)
		})
	}
}

// hfPromptLogprobsFiles lists the golden checkpoints' prompt_logprobs.json files (committed, so their
// absence fails).
func hfPromptLogprobsFiles(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("../model/testdata/golden/*/prompt_logprobs.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no prompt_logprobs.json under ../model/testdata/golden (%v): run scripts/goldens/make_prompt_logprobs.py", err)
	}
	return paths
}

// checkPromptLogprobsHF runs a golden checkpoint's prompts (7, 33 and 300 tokens) through an engine
// over m with prompt logprobs, chunked by a small MaxPromptLogitRows and beside each other, after a
// plain request for the longest prompt has filled the prefix cache, and compares each prompt token's
// logprob, rank and top 5 with transformers' (path, a prompt_logprobs.json). m must compute in float32.
func checkPromptLogprobsHF(t *testing.T, m Model, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var hf hfPromptLogprobs
	if err := json.Unmarshal(raw, &hf); err != nil {
		t.Fatal(err)
	}
	// float32 from the same weights as transformers after .float(), 16-bit checkpoints included:
	// within float32 rounding (measured 4e-5 on the CPU).
	const tol = 2e-4
	e := newEngine(t, m, Config{MaxNumBatchedTokens: 64, MaxPromptLogitRows: 13})
	longest := hf.Prompts[len(hf.Prompts)-1].PromptIDs
	warm, err := e.Add(context.Background(), Request{PromptIDs: longest, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, warm)
	var streams []*Stream
	for _, p := range hf.Prompts {
		s, err := e.Add(context.Background(), Request{PromptIDs: p.PromptIDs, MaxTokens: 2, PromptLogprobs: true, PromptTopLogprobs: hf.Top})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	for i, p := range hf.Prompts {
		first, prompt, _ := firstOutputs(t, streams[i])
		got := first.PromptLogprobs
		if len(got) != len(p.PromptIDs) {
			t.Fatalf("prompt %d: %d prompt logprobs for %d tokens", i, len(got), len(p.PromptIDs))
		}
		for k, later := range prompt[1:] {
			if later != nil {
				t.Errorf("prompt %d: output %d repeats the prompt logprobs", i, k+1)
			}
		}
		if first.Usage.CachedTokens != 0 {
			t.Errorf("prompt %d: %d cached tokens; prompt logprobs must compute every position", i, first.Usage.CachedTokens)
		}
		if got[0].ID != p.PromptIDs[0] || got[0].Logprob != 0 || got[0].Top != nil {
			t.Errorf("prompt %d: first entry %+v, want the id alone", i, got[0])
		}
		worst := 0.0
		for j, want := range p.Entries {
			g := got[j+1]
			if g.ID != p.PromptIDs[j+1] {
				t.Fatalf("prompt %d token %d: id %d, want %d", i, j+1, g.ID, p.PromptIDs[j+1])
			}
			worst = max(worst, math.Abs(float64(g.Logprob)-want.Logprob))
			if len(g.Top) != hf.Top {
				t.Fatalf("prompt %d token %d: %d alternatives, want %d", i, j+1, len(g.Top), hf.Top)
			}
			for k, alt := range g.Top {
				// Where transformers' neighbours are within the tolerance their order may differ.
				tied := (k > 0 && want.TopLogprobs[k-1]-want.TopLogprobs[k] < 2*tol) ||
					(k+1 < len(want.TopLogprobs) && want.TopLogprobs[k]-want.TopLogprobs[k+1] < 2*tol)
				if !tied && alt.ID != want.TopIDs[k] {
					t.Errorf("prompt %d token %d: alternative %d is %d, want %d", i, j+1, k, alt.ID, want.TopIDs[k])
				}
				worst = max(worst, math.Abs(float64(alt.Logprob)-want.TopLogprobs[k]))
			}
			if g.Rank != want.Rank && !nearRank(want.Logprob, want.TopLogprobs, tol) {
				t.Errorf("prompt %d token %d: rank %d, want %d", i, j+1, g.Rank, want.Rank)
			}
		}
		if worst > tol {
			t.Errorf("prompt %d (%d tokens): logprobs differ from transformers' by up to %.3g > %.3g", i, len(p.PromptIDs), worst, tol)
		}
		t.Logf("prompt of %d tokens: max |Δ logprob| %.2g", len(p.PromptIDs), worst)
	}
	closeAndCheckPool(t, e)
}

// nearRank reports whether a token's rank may legitimately differ from transformers': another of the
// top logprobs lies within 2·tol of its own (beyond the top we cannot tell, so a rank past them is
// not checked either).
func nearRank(lp float64, top []float64, tol float64) bool {
	if lp < top[len(top)-1]-2*tol {
		return true
	}
	for _, v := range top {
		if v != lp && math.Abs(v-lp) < 2*tol {
			return true
		}
	}
	return false
}

// TestPromptLogprobsCases: the engine's prompt logprobs equal the model's own logits over the whole
// prompt, computed in one Forward outside the engine, whatever the chunking, the prefix cache, the
// batch and a KV pool small enough to preempt; a prompt of one token gets its one id-only entry; the
// texts spell the prompt; the logprobs come once, on the first output.
func TestPromptLogprobsCases(t *testing.T) {
	dir := writeTinyModel(t, 77)
	ref := loadTinyModel(t, dir, 64, 8)
	// Prompt bytes: ASCII, then a 3-byte character split over three tokens, then a special token.
	prompt := append([]int32{256}, []int32(bytesOf("func main() { fmt.Println(\"héllo, 世界\") }\n"))...)
	tests := []struct {
		name      string
		cfg       Config
		blocks    int
		prompt    []int32
		top       int
		others    int // plain requests beside it
		keepSpec  bool
		wantPreem bool
	}{
		{"one step", Config{}, 64, prompt, 3, 0, false, false},
		{"chunks of 5 beside two others", Config{MaxPromptLogitRows: 5, MaxNumBatchedTokens: 16}, 64, prompt, 0, 2, false, false},
		{"special tokens kept", Config{MaxPromptLogitRows: 7}, 64, prompt, 2, 0, true, false},
		{"prompt of one token", Config{}, 64, prompt[:1], 4, 0, false, false},
		{"preempted by a small pool", Config{MaxNumBatchedTokens: 64, MaxPromptLogitRows: 9}, 14, prompt, 1, 3, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows := make([]int32, len(tc.prompt))
			for i := range rows {
				rows[i] = int32(i)
			}
			want := wholePromptLogits(t, ref, tc.prompt)
			m := loadTinyModel(t, dir, tc.blocks, 8)
			tc.cfg.Logger = quietLogger()
			e := newEngine(t, m, tc.cfg)
			var others []*Stream
			for i := range tc.others {
				s, err := e.Add(context.Background(), Request{PromptIDs: slices.Repeat([]int32{int32('a' + i)}, 20), MaxTokens: 30})
				if err != nil {
					t.Fatal(err)
				}
				others = append(others, s)
			}
			s, err := e.Add(context.Background(), Request{PromptIDs: tc.prompt, MaxTokens: 20, PromptLogprobs: true,
				PromptTopLogprobs: tc.top, KeepSpecialTokens: tc.keepSpec, Sampling: SamplingParams{Temperature: 0}})
			if err != nil {
				t.Fatal(err)
			}
			first, prompts, n := firstOutputs(t, s)
			for _, o := range others {
				collect(t, o)
			}
			if n < 1 || len(first.PromptLogprobs) != len(tc.prompt) {
				t.Fatalf("%d outputs, first with %d prompt logprobs for %d tokens", n, len(first.PromptLogprobs), len(tc.prompt))
			}
			for k, later := range prompts[1:] {
				if later != nil {
					t.Errorf("output %d repeats the prompt logprobs", k+1)
				}
			}
			var text strings.Builder
			for i, lp := range first.PromptLogprobs {
				text.WriteString(lp.Text)
				if lp.ID != tc.prompt[i] {
					t.Fatalf("entry %d: id %d, want %d", i, lp.ID, tc.prompt[i])
				}
				if i == 0 {
					if lp.Logprob != 0 || lp.Top != nil || lp.Rank != 0 {
						t.Errorf("entry 0: %+v, want the id and text alone", lp)
					}
					continue
				}
				w := computeLogprobs(want[i-1], tc.prompt[i], tc.top)
				if d := math.Abs(float64(lp.Logprob - w.Logprob)); d > 1e-4 || lp.Rank != w.Rank {
					t.Errorf("entry %d: logprob %v rank %d, want %v rank %d", i, lp.Logprob, lp.Rank, w.Logprob, w.Rank)
				}
				if len(lp.Top) != tc.top {
					t.Fatalf("entry %d: %d alternatives, want %d", i, len(lp.Top), tc.top)
				}
				for k := range lp.Top {
					if lp.Top[k].ID != w.Top[k].ID || math.Abs(float64(lp.Top[k].Logprob-w.Top[k].Logprob)) > 1e-4 {
						t.Errorf("entry %d alternative %d: %+v, want %+v", i, k, lp.Top[k], w.Top[k])
					}
					if k == 0 && lp.Top[k].Text == "" && lp.Top[k].ID < 256 && lp.Top[k].ID >= 0x20 && lp.Top[k].ID < 0x7f {
						t.Errorf("entry %d: alternative %d (printable byte) without text", i, lp.Top[k].ID)
					}
				}
			}
			if wantText := (byteTokenizer{}).Decode(tc.prompt, !tc.keepSpec); text.String() != wantText {
				t.Errorf("prompt pieces spell %q, want %q", text.String(), wantText)
			}
			if got := e.Stats().Preemptions > 0; got != tc.wantPreem {
				t.Errorf("preemptions happened: %v, want %v", got, tc.wantPreem)
			}
			closeAndCheckPool(t, e)
		})
	}
}

// wholePromptLogits returns the logits of every position of prompt from one Forward of m over the
// whole prompt in fresh pages.
func wholePromptLogits(t *testing.T, m *model.Model, prompt []int32) [][]float32 {
	t.Helper()
	n := len(prompt)
	st := &model.Step{Tokens: prompt, QueryStart: []int32{0, int32(n)}, ContextLens: []int32{int32(n)}}
	blocks := (n + m.BlockSize() - 1) / m.BlockSize()
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	st.BlockTables = [][]int32{table}
	for i := range n {
		st.Positions = append(st.Positions, int32(i))
		st.SlotMapping = append(st.SlotMapping, int32(i))
		st.LogitRows = append(st.LogitRows, int32(i))
	}
	logits, err := m.Forward(st)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

func bytesOf(s string) []int32 {
	ids := make([]int32, len(s))
	for i := range len(s) {
		ids[i] = int32(s[i])
	}
	return ids
}

// TestPromptLogprobsTextIsLinear: the prompt logprobs' text pieces (request.promptLogprobs, run on the
// step loop with the first token) must cost the prompt's length, whatever the prompt holds. The
// detokenizer emits nothing while its window decodes to nothing new (skipped special tokens) or ends
// in an incomplete character (a run of byte tokens that is not UTF-8), and then decodes the whole
// growing window again at every token (and at every alternative's peek): quadratic in the prompt,
// which a client controls up to the model's context (a prompt of token ids), while every other
// request waits for the loop. 8000 tokens must not allocate more per token than ordinary text does
// many times over.
func TestPromptLogprobsTextIsLinear(t *testing.T) {
	const n = 8000
	tests := []struct {
		name string
		tok  int32
	}{
		{"text", 'a'},
		{"bytes that are not UTF-8", 0x80},
		{"skipped special tokens", 257},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newCountingModel(300, n+10, 16, n/16+4)
			e := newEngine(t, m, Config{MaxNumBatchedTokens: 8192, MaxPromptLogitRows: 8192})
			var first Output
			got := allocatedBytes(func() {
				s, err := e.Add(context.Background(), Request{PromptIDs: slices.Repeat([]int32{tc.tok}, n), MaxTokens: 1,
					PromptLogprobs: true, PromptTopLogprobs: 1})
				if err != nil {
					t.Fatal(err)
				}
				first, _, _ = firstOutputs(t, s)
			})
			if len(first.PromptLogprobs) != n {
				t.Fatalf("%d prompt logprobs for %d tokens", len(first.PromptLogprobs), n)
			}
			if perToken := got / n; perToken > 8<<10 {
				t.Errorf("%d bytes allocated per prompt token over %d tokens: quadratic in the prompt's length", perToken, n)
			}
			t.Logf("%d bytes allocated per prompt token", got/n)
		})
	}
}

// TestPromptTopLogprobsApart: the prompt's alternatives (PromptTopLogprobs) and the generated tokens'
// (TopLogprobs) are counted apart, as vLLM's prompt_logprobs and logprobs are.
func TestPromptTopLogprobsApart(t *testing.T) {
	m := loadTinyModel(t, writeTinyModel(t, 5), 64, 8)
	e := newEngine(t, m, Config{})
	s, err := e.Add(context.Background(), Request{PromptIDs: bytesOf("package main"), MaxTokens: 1,
		Logprobs: true, TopLogprobs: 4, PromptLogprobs: true, PromptTopLogprobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := firstOutputs(t, s)
	if len(first.Logprobs) != 1 || len(first.Logprobs[0].Top) != 4 {
		t.Fatalf("generated logprobs %+v, want one with 4 alternatives", first.Logprobs)
	}
	for i, lp := range first.PromptLogprobs[1:] {
		if len(lp.Top) != 2 {
			t.Errorf("prompt entry %d: %d alternatives, want 2", i+1, len(lp.Top))
		}
	}
	closeAndCheckPool(t, e)
}
