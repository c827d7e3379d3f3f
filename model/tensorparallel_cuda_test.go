//go:build cuda

package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/weights"
	"gorgonia.org/cu"
)

// rankCUDA is rank r's CUDA backend.
func rankCUDA(m *Model, r int) *cudaBackend {
	return m.par.ranks[r].backend.(*tpBackend).Backend.(*cudaBackend)
}

// loadTP loads cfg sharded over size ranks on GPUs: every rank on GPU 0, summing through host memory,
// when share, else rank r on GPU r with NCCL (size 1 too: loadParallel directly, which a load of
// TensorParallel 1 never reaches).
func loadTP(t *testing.T, cfg *weights.Config, get tensorGetter, dt weights.DType, size int, share bool, quant string) *Model {
	t.Helper()
	tpShareGPU = share
	defer func() { tpShareGPU = false }()
	name := map[weights.DType]string{weights.DTypeF32: "float32", weights.DTypeBF16: "bfloat16"}[dt]
	opts := Options{NumBlocks: 64, BlockSize: 16, Device: DeviceCUDA, DType: name, TensorParallel: size, Quantization: quant}
	m, err := loadParallel(context.Background(), cfg, get, opts, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

// tpCUDAConfigs are the sharding cases on the GPU: GQA, MQA (KV heads replicated), MHA with tied
// embeddings, and biases on Q/K/V and O (Qwen2's and LLaMA's attention_bias), at head size 64.
func tpCUDAConfigs() []struct {
	name string
	cfg  *weights.Config
} {
	var out []struct {
		name string
		cfg  *weights.Config
	}
	for _, tc := range []struct {
		name string
		edit func(*weights.Config)
	}{
		{"gqa", func(*weights.Config) {}},
		{"mqa", func(c *weights.Config) { c.NumKeyValueHeads = 1 }},
		{"mha_tied", func(c *weights.Config) { c.NumKeyValueHeads = 8; c.TieWordEmbeddings = true }},
		{"bias", func(c *weights.Config) { c.QKVBias, c.OBias = true, true }},
	} {
		c := cudaReferenceConfig(64)
		tc.edit(c)
		out = append(out, struct {
			name string
			cfg  *weights.Config
		}{tc.name, c})
	}
	return out
}

// wholeSteps loads cfg whole on the GPU in dtype dt (quantized as quant says) and returns tpPlanSteps'
// steps with its logits.
func wholeSteps(t *testing.T, cfg *weights.Config, get tensorGetter, dt weights.DType, quant string) ([]*Step, [][][]float32) {
	t.Helper()
	dev := gpuDevice(t)
	m, err := load(cfg, get, Options{NumBlocks: 64, BlockSize: 16, Quantization: quant}, func(s Shape) (Backend, error) {
		return newCUDABackend(s, cudaConfig{dtype: dt, dev: dev})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return tpPlanSteps(t, m, cfg.VocabSize)
}

// TestCUDATensorParallel runs the mixed steps of tpPlanSteps (prefills, a chunk beside decodes, rounds
// of decodes) through a model on the GPU whole and sharded over 2 and 4 ranks sharing the GPU, in
// float32 and bfloat16, and compares every logits row. Ranks sharing a GPU sum through host memory (no
// graphs), and refuse the one-shot kernel by name (GOLLM_TP_ALLREDUCE=peer). The shards' sums
// differ from the whole model's only in the order of their float32 additions (1e-4); in bfloat16 the
// whole model also folds its norms into the products and accumulates into the residual, which no rank
// does across an all-reduce, and the roundings those move put rows up to about 3e-2 apart (one rank over
// NCCL, whose sums are the whole model's, too), so 5e-2, the bound of the GPU's bfloat16 against the
// CPU elsewhere. A misplaced shard, a missed all-reduce or one fused away (the residual add the plan
// would fold into the product) gives errors of order 1.
func TestCUDATensorParallel(t *testing.T) {
	gpuDevice(t)
	for _, tc := range tpCUDAConfigs() {
		for _, dt := range []struct {
			dtype weights.DType
			tol   float64
		}{{weights.DTypeF32, 1e-4}, {weights.DTypeBF16, 5e-2}} {
			r := newRandomModel(tc.cfg, weights.DTypeBF16, 5)
			steps, want := wholeSteps(t, tc.cfg, r.get, dt.dtype, "")
			for _, size := range []int{2, 4} {
				t.Run(fmt.Sprintf("%s/%v/tp%d", tc.name, dt.dtype, size), func(t *testing.T) {
					t.Setenv("GOLLM_TP_ALLREDUCE", "auto")
					m := loadTP(t, tc.cfg, r.get, dt.dtype, size, true, "")
					compareTP(t, m, steps, want, dt.tol)
					compareGreedyTP(t, m, steps)
					for rank := range size {
						if st := rankCUDA(m, rank).Stats(); st.Captured+st.Replayed != 0 {
							t.Errorf("rank %d: %d graphs captured, %d replayed; the host sums cannot be captured", rank,
								st.Captured, st.Replayed)
						}
					}
				})
			}
		}
	}
}

// TestCUDATensorParallelFP8 runs a bfloat16 model quantized at load (--quantization fp8) on the GPU
// whole and sharded over 2 ranks sharing it. Each rank's row-parallel products quantize their own
// columns (TestTensorParallelFP8 says why rows then differ by FP8 rounding, which in a model this small
// moves logits by 10-25%): sharded, the model must stay as close to the bfloat16 model as the whole FP8
// model is, over all rows (at most 1.25 times its error), and no row may be farther than 0.5 from the
// whole FP8 model's (a shard of the wrong rows or scales is off by order 1 everywhere); the ranks' greedy
// picks on their GPUs equal the picks of their logits on the host.
func TestCUDATensorParallelFP8(t *testing.T) {
	dev := gpuDevice(t)
	if info := dev.Info(); info.Major*10+info.Minor < 89 {
		t.Skipf("%s has no FP8 products", info.Name)
	}
	cfg := cudaReferenceConfig(64)
	r := newRandomModel(cfg, weights.DTypeBF16, 5)
	steps, ref := wholeSteps(t, cfg, r.get, weights.DTypeBF16, "")
	_, want := wholeSteps(t, cfg, r.get, weights.DTypeBF16, QuantizationFP8)
	m := loadTP(t, cfg, r.get, weights.DTypeBF16, 2, true, QuantizationFP8)
	compareFP8TP(t, m, steps, want, ref, 0.5)
	compareGreedyTP(t, m, steps)
}

// TestCUDATensorParallelNCCL runs the same steps sharded over NCCL: one rank on GPU 0 (the collectives a
// rank's step records, NCCL's all-reduce captured into the decode steps' graphs and replayed), and, on a
// machine of several GPUs, the most of 2, 4 and 8 ranks it has, one a GPU; every sum through NCCL
// (GOLLM_TP_ALLREDUCE=nccl) and the small ones one-shot through the peers' memory (auto).
func TestCUDATensorParallelNCCL(t *testing.T) {
	gpuDevice(t)
	count, err := cu.NumDevices()
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1}
	for _, s := range []int{2, 4, 8} {
		if s <= count {
			sizes = []int{1, s}
		}
	}
	for _, tc := range tpCUDAConfigs()[:2] {
		r := newRandomModel(tc.cfg, weights.DTypeBF16, 5)
		steps, want := wholeSteps(t, tc.cfg, r.get, weights.DTypeBF16, "")
		for _, run := range tpRuns(sizes) {
			size := run.size
			t.Run(fmt.Sprintf("%s/tp%d/%s", tc.name, size, run.mode), func(t *testing.T) {
				t.Setenv("GOLLM_TP_ALLREDUCE", run.mode)
				m := loadTP(t, tc.cfg, r.get, weights.DTypeBF16, size, false, "")
				compareTP(t, m, steps, want, 5e-2)
				compareGreedyTP(t, m, steps)
				for rank := range size {
					st := rankCUDA(m, rank).Stats()
					if st.Captured == 0 || st.Replayed == 0 {
						t.Errorf("rank %d: %d graphs captured, %d replayed: the decode steps with NCCL's all-reduce did not run as graphs",
							rank, st.Captured, st.Replayed)
					}
				}
			})
		}
	}
}

// tpRuns is every size of sizes with each way of summing.
func tpRuns(sizes []int) []struct {
	size int
	mode string
} {
	var out []struct {
		size int
		mode string
	}
	for _, size := range sizes {
		for _, mode := range []string{"nccl", "auto"} {
			out = append(out, struct {
				size int
				mode string
			}{size, mode})
		}
	}
	return out
}

// TestCUDATensorParallelRankFails makes rank 1 of 2 sharing the GPU fail part way through a step, after
// rank 0 has begun waiting for it in an all-reduce (the host sum's; the one-shot kernel's wait is
// TestCUDAPeerAllReduceNoHang's): the step must fail on every rank within seconds (no rank left waiting
// for its peer), and every later step must fail too.
func TestCUDATensorParallelRankFails(t *testing.T) {
	gpuDevice(t)
	cfg := cudaReferenceConfig(64)
	r := newRandomModel(cfg, weights.DTypeBF16, 5)
	m := loadTP(t, cfg, r.get, weights.DTypeBF16, 2, true, "")
	checkRankFailure(t, m, func(on bool) {
		rankCUDA(m, 1).failOp = 0
		if on {
			rankCUDA(m, 1).failOp = 12 // past the first two all-reduces, which rank 0 then waits for
		}
	}, "failed on purpose")
}

// TestCUDATensorParallelRefusals checks that the one-shot all-reduce on ranks sharing a GPU and a group
// larger than the GPUs present are refused by name.
func TestCUDATensorParallelRefusals(t *testing.T) {
	gpuDevice(t)
	count, err := cu.NumDevices()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cudaReferenceConfig(64)
	cfg.NumAttentionHeads = 16
	size := 16
	r := newRandomModel(cfg, weights.DTypeBF16, 5)
	t.Run("peer on a shared GPU", func(t *testing.T) {
		t.Setenv("GOLLM_TP_ALLREDUCE", "peer")
		tpShareGPU = true
		defer func() { tpShareGPU = false }()
		m, err := loadContext(context.Background(), cfg, r.get, Options{NumBlocks: 64, Device: DeviceCUDA, TensorParallel: 2},
			nil, false)
		if err == nil {
			m.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "GOLLM_TP_ALLREDUCE=peer: the one-shot all-reduce needs a GPU a rank") {
			t.Errorf("peer all-reduce with 2 ranks on one GPU: err = %v", err)
		}
	})
	if count >= size {
		t.Skipf("%d GPUs: a group of %d fits", count, size)
	}
	_, err = loadContext(context.Background(), cfg, r.get, Options{NumBlocks: 64, Device: DeviceCUDA, TensorParallel: size},
		nil, false)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("exceeds the %d GPUs present", count)) {
		t.Errorf("tp %d on %d GPUs: err = %v", size, count, err)
	}
}

// BenchmarkCUDATensorParallelStep times Llama-3-8B's decode step (random bf16 weights, every sequence at
// context 1024, zero K/V) run whole and as one NCCL rank (loadParallel at size 1), at batch 1 and 64:
// what the tensor-parallel path costs beside its collectives on one GPU. The whole model picks on the
// device from its CUDA graph (ms/step greedy); a rank's step runs its graph with the all-reduces in it,
// and its logits come to the host (ms/step logits, Forward, which gathers them), or each row's best
// over the rank's slice (ms/step greedy, ForwardGreedy: pickParallelGreedy).
//
//	go test -tags cuda -run XXX -bench CUDATensorParallelStep ./model
func BenchmarkCUDATensorParallelStep(b *testing.B) {
	dev := gpuDevice(b)
	cfg := llama3_8B()
	const blockSize, ctxLen, maxBatch = 16, 1024, 64
	opts := Options{NumBlocks: maxBatch * (ctxLen/blockSize + 1), BlockSize: blockSize, MaxStepTokens: 1024,
		Device: DeviceCUDA, DType: "bfloat16"}
	whole, err := LoadRandom(cfg, 1, opts, newCUDABackendFunc(cudaConfig{dtype: weights.DTypeBF16, dev: dev}))
	if err != nil {
		b.Fatal(err)
	}
	defer whole.Close()
	src, err := newRandomSource(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	ropts := opts
	// The rank sizes its pages from the memory the whole model leaves (sizeKVRanks' derived count).
	ropts.TensorParallel, ropts.SkipWeightCheck, ropts.NumBlocks = 1, true, 0
	rank, err := loadParallel(context.Background(), cfg, src.tensor, ropts, nil, false)
	if err != nil {
		b.Fatal(err)
	}
	defer rank.Close()
	for _, batch := range []int{1, 64} {
		s := &Step{QueryStart: []int32{0}}
		for seq := range batch {
			table := make([]int32, ctxLen/blockSize+1)
			for i := range table {
				table[i] = int32(seq*(ctxLen/blockSize+1) + i)
			}
			pos := int32(ctxLen - 1)
			s.Tokens = append(s.Tokens, int32(seq*97%cfg.VocabSize))
			s.Positions = append(s.Positions, pos)
			s.SlotMapping = append(s.SlotMapping, table[pos/blockSize]*blockSize+pos%blockSize)
			s.QueryStart = append(s.QueryStart, int32(seq+1))
			s.ContextLens = append(s.ContextLens, int32(ctxLen))
			s.BlockTables = append(s.BlockTables, table)
			s.LogitRows = append(s.LogitRows, int32(seq))
		}
		for _, run := range []struct {
			name string
			m    *Model
			step func(*Model) error
		}{
			{"whole-greedy", whole, func(m *Model) error { _, err := m.ForwardGreedy(s); return err }},
			{"tp1-logits", rank, func(m *Model) error { _, err := m.Forward(s); return err }},
			{"tp1-greedy", rank, func(m *Model) error { _, err := m.ForwardGreedy(s); return err }},
		} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, run.name), func(b *testing.B) {
				for range 4 { // every ring slot's graph captured before the timed steps
					if err := run.step(run.m); err != nil {
						b.Fatal(err)
					}
				}
				for b.Loop() {
					if err := run.step(run.m); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/step")
			})
		}
		if st := rankCUDA(rank, 0).Stats(); st.Replayed == 0 {
			b.Errorf("batch %d: the rank's steps replayed no graph", batch)
		}
	}
}

// compareGreedyTP runs steps through m's greedy pick (pickParallelGreedy) twice each: every rank
// reducing its slice on its GPU (PickBest), then copying it to the host and reducing it there
// (tpHostPick). A step rerun writes the same K/V again, so both see the same logits and must pick the
// same ids, the first largest over the whole vocabulary either way.
func compareGreedyTP(t *testing.T, m *Model, steps []*Step) {
	t.Helper()
	before := rankCUDA(m, 0).Stats().BestPicks
	for i, s := range steps {
		dev, err := m.ForwardGreedy(s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		tpHostPick = true
		host, err := m.ForwardGreedy(s)
		tpHostPick = false
		if err != nil {
			t.Fatalf("step %d, picked on the host: %v", i, err)
		}
		if !slices.Equal(dev, host) {
			t.Fatalf("step %d: picked on the GPUs %v, on the host %v", i, dev, host)
		}
	}
	if got := rankCUDA(m, 0).Stats().BestPicks - before; got != len(steps) {
		t.Errorf("%d of %d steps picked on the GPU", got, len(steps))
	}
}

// TestCUDAPickBest checks PickBest, a tensor-parallel rank's greedy pick, against bestOf over each row's
// first cols columns: ties (the first wins, across chunks of ArgmaxChunks too), NaN and +Inf inside the
// columns (bad) and past them (ignored), a row of −Inf, and padding columns past cols larger than every
// column before them (never picked), at column counts inside one chunk, at its edge and over several.
func TestCUDAPickBest(t *testing.T) {
	m, b, dev := sampleTestBackend(t)
	defer m.Close()
	const rows, width = 7, 5000
	logits, err := b.NewTensor(rows, width)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 5))
	for _, cols := range []int{1, 5, 2047, 2048, 2049, 4100, width} {
		t.Run(fmt.Sprint(cols), func(t *testing.T) {
			x := make([]float32, rows*width)
			for i := range x {
				x[i] = rng.Float32()*2 - 1
			}
			row := func(r int) []float32 { return x[r*width : (r+1)*width] }
			for c := cols; c < width; c++ { // padding larger than every column
				row(0)[c], row(1)[c], row(6)[c] = 100, 100, float32(math.NaN())
			}
			row(1)[cols-1], row(1)[0] = 7, 7 // tie: the first
			if cols > 2048 {
				row(1)[2047], row(1)[2048] = 9, 9 // tie across chunks
			}
			row(2)[cols/2] = float32(math.NaN())
			row(3)[cols-1] = float32(math.Inf(1))
			for c := range cols {
				row(4)[c] = float32(math.Inf(-1))
			}
			row(5)[cols-1] = 3 // the last column
			if err := dev.CopyToDevice(tensorOf(logits).ptr, cuda.Bytes(x)); err != nil {
				t.Fatal(err)
			}
			p := newPager(8, 16, newRand(1))
			if err := b.BeginStep(p.step(chunk{0, []int32{1}})); err != nil {
				t.Fatal(err)
			}
			got := make([]rowBest, rows)
			if err := b.PickBest(got, logits, cols); err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				want := bestOf(row(i)[:cols])
				if got[i].bad != want.bad || !want.bad && (got[i].i != want.i || got[i].v != want.v) {
					t.Errorf("row %d: got %+v, want %+v", i, got[i], want)
				}
			}
		})
	}
}

// TestCUDAGoldenTensorParallel runs every golden checkpoint at TP 2 on the GPU in float32 (rank r on GPU
// r where there are two, each way of summing: one-shot for the decode steps' sums, and NCCL for all;
// else both sharing GPU 0, summing through host memory): its four prompts prefilled in one step against transformers'
// last logits (TestCUDAGolden's float32 bounds), then 32 greedy tokens decoded together, picked on the ranks' GPUs, which must be
// transformers' and those of the model run whole on the GPU.
func TestCUDAGoldenTensorParallel(t *testing.T) {
	gpuDevice(t)
	count, err := cu.NumDevices()
	if err != nil {
		t.Fatal(err)
	}
	share := count < 2
	for _, gc := range readGoldens(t) {
		modes := []string{"auto", "nccl"}
		if share {
			modes = []string{"auto"} // ranks sharing a GPU sum through the host whatever the mode
		}
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s/tp2/%s", gc.name, mode), func(t *testing.T) {
				t.Setenv("GOLLM_TP_ALLREDUCE", mode)
				whole, _ := loadGoldenOnGPU(t, gc, cudaMode{name: "f32", dtype: weights.DTypeF32})
				folder, opts := openGoldenCheckpoint(t, gc)
				opts.Device, opts.DType, opts.TensorParallel = DeviceCUDA, "float32", 2
				tpShareGPU = share
				m, err := Load(folder, opts)
				tpShareGPU = false
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := m.Close(); err != nil {
						t.Error(err)
					}
				})
				tol := goldenTolerance(gc.golden) // TestCUDAGolden's bounds for its float32 mode
				want, _ := goldenGreedyOnGPU(t, whole, newModelPager(whole, newRand(uint64(len(gc.name)))), gc, tol)
				got, _ := goldenGreedyOnGPU(t, m, newModelPager(m, newRand(uint64(len(gc.name)))), gc, tol)
				for i, pr := range gc.golden.Prompts {
					if !slices.Equal(got[i], want[i]) || !slices.Equal(got[i], pr.GreedyIDs) {
						t.Errorf("prompt of %d tokens: TP 2 picked %v, the whole model %v, transformers %v", len(pr.PromptIDs),
							got[i], want[i], pr.GreedyIDs)
					}
				}
				for r := range 2 {
					if st := rankCUDA(m, r).Stats(); mode == "auto" && !share && (st.Captured == 0 || st.Replayed == 0) {
						t.Errorf("rank %d: %d graphs captured, %d replayed: the decode steps did not run as graphs", r, st.Captured,
							st.Replayed)
					}
				}
			})
		}
	}
}
