package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gollm/gollm/model/tp"
	"github.com/gollm/gollm/weights"
)

// tpConfig is tinyConfig with 8 query heads, which 2 and 4 ranks divide.
func tpConfig() *weights.Config {
	c := tinyConfig()
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 8, 2, 6
	return c
}

// TestTensorParallelMatchesWhole runs the same mixed steps (prefills, a chunked prefill beside
// decodes, several rounds of decodes) through a model whole and sharded over 2 and 4 ranks, and
// compares every logits row: the sharded sums differ only in the order of their float32 additions.
func TestTensorParallelMatchesWhole(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*weights.Config)
		dt   weights.DType
	}{
		{"gqa", func(*weights.Config) {}, weights.DTypeF32},
		{"gqa_kv4", func(c *weights.Config) { c.NumKeyValueHeads = 4 }, weights.DTypeF32},
		{"mqa_bf16", func(c *weights.Config) { c.NumKeyValueHeads = 1 }, weights.DTypeBF16},
		{"mha_tied", func(c *weights.Config) { c.NumKeyValueHeads = 8; c.TieWordEmbeddings = true }, weights.DTypeF32},
		{"llama_attention_bias", func(c *weights.Config) { c.QKVBias, c.OBias = true, true }, weights.DTypeF32},
		{"qwen2_window", func(c *weights.Config) {
			c.QKVBias = true
			c.LayerTypes, c.SlidingWindow = []string{weights.FullAttention, weights.SlidingAttention}, 5
		}, weights.DTypeBF16},
		{"qwen3", func(c *weights.Config) { c.QKNorm = true }, weights.DTypeF32},
		{"gemma3", func(c *weights.Config) {
			c.NumHiddenLayers = 3
			c.LayerTypes = []string{weights.SlidingAttention, weights.FullAttention, weights.SlidingAttention}
			c.SlidingWindow, c.LocalRopeTheta, c.LocalRopeScaling = 6, 100, weights.RopeScaling{Type: "default"}
			c.HiddenAct, c.QKNorm, c.NormOffset, c.SandwichNorm, c.EmbedScale = weights.ActGELUTanh, true, 1, true, true
			c.QueryPreAttnScalar, c.FinalLogitSoftcap, c.TieWordEmbeddings = 24, 5, true
		}, weights.DTypeF32},
	} {
		cfg := tpConfig()
		tc.cfg(cfg)
		r := newRandomModel(cfg, tc.dt, 1)
		whole, err := load(cfg, r.get, Options{NumBlocks: 64, BlockSize: 4}, NewCPUBackend)
		if err != nil {
			t.Fatal(err)
		}
		steps, want := tpPlanSteps(t, whole, cfg.VocabSize)
		whole.Close()
		for _, size := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.name, size), func(t *testing.T) {
				m, err := load(cfg, r.get, Options{NumBlocks: 64, BlockSize: 4, TensorParallel: size}, NewCPUBackend)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				for i, s := range steps {
					got, err := m.Forward(s)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if len(got) != len(want[i]) {
						t.Fatalf("step %d: %d logits rows, want %d", i, len(got), len(want[i]))
					}
					for j := range got {
						if len(got[j]) != cfg.VocabSize {
							t.Fatalf("step %d row %d: %d logits, want %d", i, j, len(got[j]), cfg.VocabSize)
						}
						for k, v := range got[j] {
							w := want[i][j][k]
							if d := math.Abs(float64(v - w)); !(d <= 1e-4*math.Max(1, math.Abs(float64(w)))) {
								t.Fatalf("step %d row %d token %d: logit %v, whole model's %v", i, j, k, v, w)
							}
						}
					}
				}
			})
		}
	}
}

// tpPlanSteps builds the steps of three sequences (two prefills; a prefill chunk beside two decodes;
// the rest of the prompt; four rounds of decodes) and returns them with m's logits for each.
func tpPlanSteps(t *testing.T, m *Model, vocab int) ([]*Step, [][][]float32) {
	t.Helper()
	rng := rand.New(rand.NewPCG(2, 3))
	p := newModelPager(m, rng)
	prompts := [][]int32{randomTokens(rng, 9, vocab), randomTokens(rng, 1, vocab), randomTokens(rng, 21, vocab)}
	plan := [][]chunk{{{0, prompts[0]}, {1, prompts[1]}}, {{0, nil}, {2, prompts[2][:8]}, {1, nil}}, {{2, prompts[2][8:]}}}
	for range 4 {
		plan = append(plan, []chunk{{1, nil}, {2, nil}, {0, nil}})
	}
	var steps []*Step
	var logits [][][]float32
	for i, chunks := range plan {
		for j := range chunks {
			if chunks[j].tokens == nil {
				chunks[j].tokens = randomTokens(rng, 1, vocab)
			}
		}
		s := p.step(chunks...)
		rows, err := m.Forward(s)
		if err != nil {
			t.Fatalf("whole model: step %d: %v", i, err)
		}
		// The pager edits its block tables in place as windows slide: keep this step's.
		c := *s
		c.BlockTables = cloneTables(s.BlockTables)
		c.GroupBlockTables = nil
		for _, g := range s.GroupBlockTables {
			c.GroupBlockTables = append(c.GroupBlockTables, cloneTables(g))
		}
		steps, logits = append(steps, &c), append(logits, rows)
	}
	return steps, logits
}

func cloneTables(tables [][]int32) [][]int32 {
	out := make([][]int32, len(tables))
	for i, t := range tables {
		out[i] = append([]int32(nil), t...)
	}
	return out
}

// TestTensorParallelGreedy checks that the pick paths (ForwardGreedy, and Start with InputFrom feeding
// the previous picks) run a sharded model to the whole model's tokens.
func TestTensorParallelGreedy(t *testing.T) {
	cfg := tpConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 3)
	run := func(size int) []int32 {
		m, err := load(cfg, r.get, Options{NumBlocks: 16, BlockSize: 4, TensorParallel: size}, NewCPUBackend)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		p := newModelPager(m, rand.New(rand.NewPCG(1, 1)))
		ids, err := m.ForwardGreedy(p.step(chunk{0, []int32{5, 17, 42, 3, 88}}))
		if err != nil {
			t.Fatal(err)
		}
		out := append([]int32(nil), ids...)
		for range 6 {
			s := p.step(chunk{0, []int32{0}})
			s.InputFrom = []int32{0}
			ids, err = m.ForwardGreedy(s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ids...)
		}
		return out
	}
	want := run(1)
	for _, size := range []int{2, 4} {
		if got := run(size); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("tp %d: greedy ids %v, whole model's %v", size, got, want)
		}
	}
}

func TestTensorParallelRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*weights.Config)
		opts Options
		want string
	}{
		{"negative", nil, Options{TensorParallel: -1}, "must be at least 1"},
		{"heads", nil, Options{TensorParallel: 3}, "does not divide the 8 attention heads"},
		{"kv heads", func(c *weights.Config) { c.NumAttentionHeads, c.NumKeyValueHeads = 12, 3 }, Options{TensorParallel: 4},
			"neither divides the 3 key/value heads"},
		{"cuda", nil, Options{TensorParallel: 2, Device: DeviceCUDA}, errTPCPUOnly.Error()},
		{"fp8 weights", nil, Options{TensorParallel: 2, Quantization: QuantizationFP8}, "FP8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tpConfig()
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			r := newRandomModel(cfg, weights.DTypeF32, 1)
			tc.opts.NumBlocks = 8
			m, err := load(cfg, r.get, tc.opts, NewCPUBackend)
			if err == nil {
				m.Close()
				t.Fatal("load succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// panickingBackend panics in its MatMul once armed.
type panickingBackend struct {
	Backend
	armed *atomic.Bool
}

func (b *panickingBackend) MatMul(dst, x Tensor, w Weight) {
	if b.armed.Load() {
		panic("injected failure")
	}
	b.Backend.MatMul(dst, x, w)
}

// TestTensorParallelFailingRank checks that a rank that panics mid-step fails the step on every rank
// (none waits on its collectives) and every step after it.
func TestTensorParallelFailingRank(t *testing.T) {
	cfg := tpConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	var built atomic.Int32
	armed := new(atomic.Bool)
	newBackend := func(s Shape) (Backend, error) {
		b, err := NewCPUBackend(s)
		if err == nil && built.Add(1) == 3 { // the third of four ranks
			b = &panickingBackend{Backend: b, armed: armed}
		}
		return b, err
	}
	m, err := load(cfg, r.get, Options{NumBlocks: 16, BlockSize: 4, TensorParallel: 4}, newBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := newModelPager(m, rand.New(rand.NewPCG(1, 1)))
	if _, err := m.Forward(p.step(chunk{0, []int32{1, 2, 3}})); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := m.Forward(p.step(chunk{0, []int32{4}}))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Fatalf("step with a panicking rank: error %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a rank's failure hung the step")
	}
	armed.Store(false)
	_, err = m.Forward(p.step(chunk{0, []int32{5}}))
	if err == nil || !errors.Is(err, tp.ErrAborted) && !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("step after the failure: error %v", err)
	}
}
