package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gollm/gollm/model/tp"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
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
				compareTP(t, m, steps, want, 1e-5)
			})
		}
	}
}

// compareTP runs steps through m and compares each logits row with want's by relative error.
func compareTP(t *testing.T, m *Model, steps []*Step, want [][][]float32, tol float64) {
	t.Helper()
	for i, s := range steps {
		got, err := m.Forward(s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if len(got) != len(want[i]) {
			t.Fatalf("step %d: %d logits rows, want %d", i, len(got), len(want[i]))
		}
		for j := range got {
			if len(got[j]) != len(want[i][j]) {
				t.Fatalf("step %d row %d: %d logits, want %d", i, j, len(got[j]), len(want[i][j]))
			}
			if e := relErr(got[j], want[i][j]); !(e <= tol) {
				t.Fatalf("step %d row %d: relative error %.3g against the whole model (tolerance %g)", i, j, e, tol)
			}
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
		for i := range 6 {
			s := p.step(chunk{0, []int32{0}})
			s.InputFrom = []int32{0}
			if i%2 == 0 {
				ids, err = m.ForwardGreedy(s)
			} else { // greedy parameters (temperature 0) pick as nil ones do
				var pick *Pick
				if pick, err = m.Start(s, []SampleParams{{Temperature: 0, TopK: 5, Seed: 3}}); err == nil {
					ids, err = pick.Wait()
				}
			}
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

// hostPicker is a CPU backend with PickBest (bestPicker), computed from the step's logits as a device's
// would be: it runs pickParallelGreedy's device path on the CPU, counting the columns each pick covers.
type hostPicker struct {
	Backend
	mu   *sync.Mutex
	cols map[int]int
}

func (h *hostPicker) PickBest(dst []rowBest, src Tensor, cols int) error {
	rows := make([][]float32, len(dst))
	for i := range rows {
		rows[i] = make([]float32, src.Cols)
	}
	if err := h.Backend.CopyToHost(rows, src); err != nil {
		return err
	}
	for i := range dst {
		dst[i] = bestOf(rows[i][:cols])
	}
	h.mu.Lock()
	h.cols[cols]++
	h.mu.Unlock()
	return nil
}

// TestTensorParallelBestPicker runs greedy steps through ranks whose backends pick on their own
// (bestPicker, as a GPU's does): each rank's pick must cover its tokens only (valid: a vocabulary of 97
// leaves the last rank of 4 with 22 of its 25 rows, and every rank's extra zero row out), and the ids
// must be the model's run whole.
func TestTensorParallelBestPicker(t *testing.T) {
	cfg := tpConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 3)
	run := func(size int, newBackend NewBackendFunc) []int32 {
		m, err := load(cfg, r.get, Options{NumBlocks: 16, BlockSize: 4, TensorParallel: size}, newBackend)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		p := newModelPager(m, rand.New(rand.NewPCG(1, 1)))
		var out []int32
		s := p.step(chunk{0, []int32{5, 17, 42, 3, 88}}, chunk{1, []int32{9, 60}})
		for range 6 {
			ids, err := m.ForwardGreedy(s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ids...)
			s = p.step(chunk{0, []int32{0}}, chunk{1, []int32{0}})
			s.InputFrom = []int32{0, 1}
		}
		return out
	}
	want := run(1, NewCPUBackend)
	for _, tc := range []struct {
		size int
		cols []int
	}{{2, []int{48, 49}}, {4, []int{22, 25}}} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			picker := &hostPicker{mu: new(sync.Mutex), cols: map[int]int{}}
			got := run(tc.size, func(s Shape) (Backend, error) {
				b, err := NewCPUBackend(s)
				return &hostPicker{Backend: b, mu: picker.mu, cols: picker.cols}, err
			})
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("greedy ids %v, the whole model's %v", got, want)
			}
			var cols []int
			for c := range picker.cols {
				cols = append(cols, c)
			}
			slices.Sort(cols)
			if !slices.Equal(cols, tc.cols) {
				t.Errorf("the ranks picked over %v columns, want %v (each rank's tokens)", cols, tc.cols)
			}
		})
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
		// Without the cuda tag; with it, TestCUDATensorParallelRefusals checks the GPU count.
		{"cuda", nil, Options{TensorParallel: 2, Device: DeviceCUDA}, "built without the cuda tag"},
	} {
		if tc.name == "cuda" && cudaBuilt {
			continue
		}
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
	checkRankFailure(t, m, func(on bool) { armed.Store(on) }, "injected failure")
}

// checkRankFailure runs a prefill on m, then a step with one rank made to fail by arm(true): that step
// must fail within 30 s with an error saying want (no rank left waiting on a collective for its peer),
// and the step after it (arm(false)) must fail too, the group having ended.
func checkRankFailure(t *testing.T, m *Model, arm func(bool), want string) {
	t.Helper()
	p := newModelPager(m, rand.New(rand.NewPCG(1, 1)))
	if _, err := m.Forward(p.step(chunk{0, []int32{1, 2, 3}})); err != nil {
		t.Fatal(err)
	}
	arm(true)
	done := make(chan error, 1)
	go func() {
		_, err := m.Forward(p.step(chunk{0, []int32{4}}))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("step with a failing rank: error %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a rank's failure hung the step")
	}
	arm(false)
	_, err := m.Forward(p.step(chunk{0, []int32{5}}))
	if err == nil || !errors.Is(err, tp.ErrAborted) && !strings.Contains(err.Error(), want) {
		t.Fatalf("step after the failure: error %v", err)
	}
}

// TestTensorParallelFP8 shards FP8 models over 2 and 4 ranks (fp8Config's 2 KV heads: split, then
// replicated) and runs tpPlanSteps' steps (prefills, a chunk beside decodes, rounds of decodes):
//
//   - a compressed-tensors checkpoint with per-tensor weight scales, static input scales and an FP8 KV
//     cache: every rank quantizes exactly what the whole model does, so only the float32 sums' order
//     differs (1e-4 of each logits row);
//   - one with per-channel scales and per-token activations, and a bfloat16 checkpoint quantized at load
//     (--quantization fp8): a row-parallel product's rank scales its own columns of the input by their
//     own largest value (and, quantized at load, its columns of each weight row), as vLLM's sharded
//     layers do, so its rounding differs from the whole model's. Sharded, the model must stay as close
//     to the float model it stands for (the checkpoint dequantized, or the bfloat16 one) as the whole
//     FP8 model is, over all rows (at most 1.25 times its error), and no row may be farther than 0.15
//     from the whole model's: a shard of the wrong rows or scales is off by order 1.
func TestTensorParallelFP8(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(dir string)
		opts  Options
		exact bool
	}{
		{"static, FP8 KV", func(dir string) {
			weightstest.WriteFP8(t, dir, fp8Config, 21, weightstest.FP8Static, weightstest.FP8Scales{Input: 0.012, K: 0.02, V: 0.006})
		}, Options{KVCacheDType: KVCacheFP8}, true},
		{"dynamic", func(dir string) {
			weightstest.WriteFP8(t, dir, fp8Config, 21, weightstest.FP8Dynamic, weightstest.FP8Scales{})
		}, Options{}, false},
		{"online", func(dir string) { weightstest.WriteLlamaBF16(t, dir, fp8Config, 33) }, Options{Quantization: QuantizationFP8}, false},
	} {
		dir := t.TempDir()
		tc.write(dir)
		f := openFolder(t, dir)
		opts := tc.opts
		opts.NumBlocks, opts.BlockSize = 32, 4
		whole, err := Load(f, opts)
		if err != nil {
			t.Fatal(err)
		}
		steps, want := tpPlanSteps(t, whole, f.Config.VocabSize)
		whole.Close()
		// The float model the FP8 one stands for, on the same steps.
		var ref [][][]float32
		if !tc.exact {
			fopts := Options{NumBlocks: opts.NumBlocks, BlockSize: opts.BlockSize}
			var fm *Model
			if tc.opts.Quantization != "" {
				fm, err = Load(f, fopts)
			} else {
				r, _ := fp8RefModel(t, f, nil)
				cfg := *f.Config
				cfg.Quantization = nil
				fm, err = load(&cfg, r.get, fopts, NewCPUBackend)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range steps {
				rows, err := fm.Forward(s)
				if err != nil {
					t.Fatalf("float model: step %d: %v", i, err)
				}
				ref = append(ref, rows)
			}
			fm.Close()
		}
		for _, size := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.name, size), func(t *testing.T) {
				opts := opts
				opts.TensorParallel = size
				m, err := Load(f, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if tc.exact {
					compareTP(t, m, steps, want, 1e-4)
				} else {
					compareFP8TP(t, m, steps, want, ref, 0.15)
				}
			})
		}
	}
}

// compareFP8TP runs steps through m, a sharded model whose FP8 roundings differ from the whole model's:
// no logits row may be farther than far from the whole model's (want), and over all rows it must be at
// most 1.25 times as far from the float model's (ref) as the whole model is (the sums of squares of the
// rows' relative errors).
func compareFP8TP(t *testing.T, m *Model, steps []*Step, want, ref [][][]float32, far float64) {
	t.Helper()
	var errTP, errWhole float64
	for i, s := range steps {
		got, err := m.Forward(s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for j := range got {
			if e := relErr(got[j], want[i][j]); !(e <= far) {
				t.Fatalf("step %d row %d: relative error %.3g from the whole model", i, j, e)
			}
			errTP += math.Pow(relErr(got[j], ref[i][j]), 2)
			errWhole += math.Pow(relErr(want[i][j], ref[i][j]), 2)
		}
	}
	t.Logf("relative error from the float model: sharded %.4f, whole %.4f", math.Sqrt(errTP), math.Sqrt(errWhole))
	if !(errTP <= 1.25*1.25*errWhole) {
		t.Errorf("sharded, the FP8 model is farther from the float model than whole: %.4f against %.4f",
			math.Sqrt(errTP), math.Sqrt(errWhole))
	}
}

// kvFake is a rank's backend that sizes a KV pool as the CUDA backend does (kvCapacitor, kvAllocator),
// recording what it was asked to allocate.
type kvFake struct {
	Backend
	capacity  int
	allocated []string
}

func (b *kvFake) kvCapacity(float64) (int, error) { return b.capacity, nil }

func (b *kvFake) allocateKV(n int) error {
	b.allocated = append(b.allocated, fmt.Sprintf("allocateKV(%d)", n))
	return nil
}

func (b *kvFake) AllocateKVBlocks(n int) error {
	if n > b.capacity {
		return fmt.Errorf("%d pages do not fit: %w", n, ErrKVTooLarge)
	}
	b.allocated = append(b.allocated, fmt.Sprintf("AllocateKVBlocks(%d)", n))
	return nil
}

// TestSizeKVRanks checks how the ranks of a GPU tensor-parallel model get their KV pools: every rank the
// fewest pages any rank holds at the memory utilization, divided among the ranks sharing a GPU, allocated
// as AllocateKV allocates them; or Options.NumBlocks on every rank, refused where it does not fit; and
// none when a rank has no room for a page.
func TestSizeKVRanks(t *testing.T) {
	cfg := tpConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	for _, tc := range []struct {
		name       string
		capacities []int
		sharing    int
		numBlocks  int
		want       int
		calls      string
		err        string
	}{
		{"fewest", []int{10, 7, 9}, 1, 0, 7, "allocateKV(7)", ""},
		{"shared GPU", []int{10, 10}, 2, 0, 5, "allocateKV(5)", ""},
		{"asked", []int{10, 10}, 1, 6, 6, "AllocateKVBlocks(6)", ""},
		{"asked too many", []int{10, 4}, 1, 6, 0, "", "rank 1: KV pool: 6 pages do not fit"},
		{"no room", []int{3, 1}, 2, 0, 0, "", "no room for a page on each of 2 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ranks []*Model
			var fakes []*kvFake
			for _, c := range tc.capacities {
				m, err := load(cfg, r.get, Options{NumBlocks: 8, BlockSize: 4}, NewCPUBackend)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				f := &kvFake{Backend: m.backend, capacity: c}
				m.backend = &tpBackend{Backend: f}
				ranks, fakes = append(ranks, m), append(fakes, f)
			}
			n, err := sizeKVRanks(ranks, Options{NumBlocks: tc.numBlocks, MaxStepTokens: 16}, tc.sharing)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || n != tc.want {
				t.Fatalf("sizeKVRanks = %d, %v; want %d", n, err, tc.want)
			}
			for i, f := range fakes {
				if got := strings.Join(f.allocated, ","); got != tc.calls || ranks[i].shape.NumBlocks != n {
					t.Errorf("rank %d: allocated %q with %d pages; want %q and %d", i, got, ranks[i].shape.NumBlocks, tc.calls, n)
				}
			}
		})
	}
}

// TestParallelCombine checks the ranks' greedy reductions against the whole row's pick (pickRowCPU):
// every rank's logits (its slice of the row, zero past its tokens) reduced by reduceRows, then combined. The slices' zero rows (past the vocabulary, and
// the one that stands for other ranks' tokens) must never win, so the rows are mostly negative; ties
// across ranks, all −Inf rows, NaN, +Inf and ranks with no tokens at all are among the cases.
func TestParallelCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	inf := float32(math.Inf(1))
	for _, tc := range []struct{ vocab, size int }{{97, 1}, {97, 2}, {97, 4}, {8, 8}, {5, 4}, {1000, 3}, {16, 4}} {
		shardV := (tc.vocab + tc.size - 1) / tc.size
		par := &parallel{vocab: tc.vocab, shardV: shardV}
		for trial := range 200 {
			row := make([]float32, tc.vocab)
			for j := range row {
				row[j] = -1 - float32(rng.IntN(4)) // few values: ties within and across ranks
			}
			switch trial % 5 {
			case 1:
				row[rng.IntN(tc.vocab)] = float32(math.Inf(-1))
			case 2:
				for j := range row {
					row[j] = -inf
				}
			case 3:
				row[rng.IntN(tc.vocab)] = float32(math.NaN())
			case 4:
				row[rng.IntN(tc.vocab)] = inf
			}
			bests := make([][]rowBest, tc.size)
			for r := range tc.size {
				slice := make([]float32, shardV+1) // the rank's logits: zero past its tokens
				if v := par.valid(r); v > 0 {
					copy(slice, row[r*shardV:r*shardV+v])
				}
				bests[r] = par.reduceRows(r, [][]float32{slice})
			}
			if got, want := par.combine(bests, 0), pickRowCPU(row, sampleRow{}); got != want {
				t.Fatalf("vocab %d over %d ranks, trial %d: combined pick %d, the whole row's %d (%v)", tc.vocab, tc.size, trial, got, want, row)
			}
		}
	}
}

// TestTensorParallelSmallVocabulary shards a vocabulary of 5 tokens over 4 ranks (2 a rank: the last
// holds none of them): Forward's gathered rows and the greedy picks are the whole model's.
func TestTensorParallelSmallVocabulary(t *testing.T) {
	cfg := tpConfig()
	cfg.VocabSize = 5
	r := newRandomModel(cfg, weights.DTypeF32, 4)
	run := func(size int) ([][]float32, []int32) {
		m, err := load(cfg, r.get, Options{NumBlocks: 16, BlockSize: 4, TensorParallel: size}, NewCPUBackend)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		p := newModelPager(m, rand.New(rand.NewPCG(1, 1)))
		rows, err := m.Forward(p.step(chunk{0, []int32{1, 4, 2}}))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := m.ForwardGreedy(p.step(chunk{0, []int32{3}}))
		if err != nil {
			t.Fatal(err)
		}
		return rows, ids
	}
	wantRows, wantIDs := run(1)
	gotRows, gotIDs := run(4)
	for i := range wantRows {
		for j := range wantRows[i] {
			if d := math.Abs(float64(gotRows[i][j] - wantRows[i][j])); d > 1e-4 {
				t.Errorf("row %d logit %d: %v over 4 ranks, %v whole", i, j, gotRows[i][j], wantRows[i][j])
			}
		}
	}
	if fmt.Sprint(gotIDs) != fmt.Sprint(wantIDs) {
		t.Errorf("greedy ids %v over 4 ranks, %v whole", gotIDs, wantIDs)
	}
}

// BenchmarkParallelGreedyReduce times one rank's greedy reduction of 64 rows of Llama-3's vocabulary
// (128,257 columns), the host side of a tensor-parallel greedy step at batch 64 and TP 1.
func BenchmarkParallelGreedyReduce(b *testing.B) {
	const vocab, batch = 128256, 64
	par := &parallel{vocab: vocab, shardV: vocab, ranks: make([]*Model, 1)}
	rng := rand.New(rand.NewPCG(3, 4))
	rows := make([][]float32, batch)
	for i := range rows {
		rows[i] = make([]float32, vocab+1)
		for j := range rows[i] {
			rows[i][j] = rng.Float32()
		}
	}
	b.SetBytes(4 * batch * vocab)
	for b.Loop() {
		par.reduceRows(0, rows)
	}
}
