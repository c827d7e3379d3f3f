package attention

import (
	"math/rand/v2"
	"testing"
)

func repeat(n int, ctx int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = ctx
	}
	return s
}

func TestPlan(t *testing.T) {
	h100 := func(batch int, ctx int32, hq, hkv int) PlanInput {
		return PlanInput{Batch: batch, ContextLens: repeat(batch, ctx), NumHeads: hq, NumKVHeads: hkv,
			HeadDim: 128, BlockSize: 16, DTypeSize: 2, NumSMs: 132}
	}
	straggler := h100(64, 128, 32, 8)
	straggler.ContextLens[17] = 131072
	onePageMin := h100(1, 4096, 8, 1)
	onePageMin.MinPartitionTokens = 16
	page32 := h100(1, 65536, 32, 8)
	page32.BlockSize = 32
	page48 := h100(1, 65536, 32, 8)
	page48.BlockSize = 48
	twoProgramsPerSM := h100(1, 131072, 32, 8)
	twoProgramsPerSM.ProgramsPerSM = 2
	cpu := func(workers, batch int, ctx int32, hq, hkv int) PlanInput {
		in := h100(batch, ctx, hq, hkv)
		in.NumSMs, in.DTypeSize = workers, 4
		return in
	}

	for _, tc := range []struct {
		name          string
		in            PlanInput
		want          Kernel
		minPartitions int // split-k: at least this many partitions of the longest context
	}{
		{"batch 1 x 128k x 8 kv heads splits across the GPU", h100(1, 131072, 32, 8), SplitK, 17},
		{"batch 1 x 128k with 2 programs per SM splits finer", twoProgramsPerSM, SplitK, 33},
		{"batch 1 x 64k MHA splits", h100(1, 65536, 12, 12), SplitK, 11},
		{"batch 2 x 32k MHA splits", h100(2, 32768, 12, 12), SplitK, 4},
		{"batch 8 x 2048 x 8 kv heads splits", h100(8, 2048, 32, 8), SplitK, 2},
		{"batch 4 x 2048 llama70b splits", h100(4, 2048, 64, 8), SplitK, 2},
		{"batch 1 x 8192 llama3-8b splits", h100(1, 8192, 32, 8), SplitK, 8},
		{"mqa batch 16 x 4096 splits", h100(16, 4096, 32, 1), SplitK, 4},
		{"one straggler among short contexts splits", straggler, SplitK, 17},
		{"batch 256 x 1024 x 8 kv heads is grouped", h100(256, 1024, 32, 8), Grouped, 0},
		{"batch 256 x 256 MHA is grouped", h100(256, 256, 12, 12), Grouped, 0},
		{"batch 128 x 8192 x 8 kv heads is grouped", h100(128, 8192, 32, 8), Grouped, 0},
		{"batch 64 x 4096 x 8 kv heads is grouped", h100(64, 4096, 32, 8), Grouped, 0},
		{"batch 32 x 2048 MHA is grouped", h100(32, 2048, 12, 12), Grouped, 0},
		{"tiny context batch 1 is grouped", h100(1, 100, 32, 8), Grouped, 0},
		{"context of one minimum partition is grouped", h100(1, 256, 32, 1), Grouped, 0},
		{"context of one token is grouped", h100(1, 1, 32, 8), Grouped, 0},
		{"empty batch is grouped", PlanInput{NumHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16, NumSMs: 132}, Grouped, 0},
		{"partitions may be one page when allowed", onePageMin, SplitK, 8},
		{"page 32", page32, SplitK, 8},
		{"page 48 (not a power of two)", page48, SplitK, 8},
		{"cpu 2 workers x 8 kv heads is grouped", cpu(2, 1, 4096, 32, 8), Grouped, 0},
		{"cpu 2 workers, mqa batch 1 splits in two", cpu(2, 1, 4096, 32, 1), SplitK, 2},
		{"cpu 16 workers, batch 1 x 8 kv heads splits", cpu(16, 1, 32768, 32, 8), SplitK, 2},
		{"cpu 2 workers, batch 4 mqa is grouped", cpu(2, 4, 4096, 32, 1), Grouped, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Plan(tc.in)
			if got.Kernel != tc.want {
				t.Fatalf("Plan = %+v, want %v", got, tc.want)
			}
			checkPlanInvariants(t, tc.in, got)
			if got.Kernel == SplitK && got.NumPartitions < tc.minPartitions {
				t.Errorf("Plan = %+v, want at least %d partitions", got, tc.minPartitions)
			}
		})
	}
}

// checkPlanInvariants checks what every plan must satisfy, whatever the model's constants.
func checkPlanInvariants(t *testing.T, in PlanInput, p DecodePlan) {
	t.Helper()
	maxCtx := 0
	for _, n := range in.ContextLens {
		maxCtx = max(maxCtx, int(n))
	}
	switch p.Kernel {
	case Grouped:
		if p.PartitionTokens != 0 || p.NumPartitions != 1 {
			t.Errorf("grouped plan %+v: want 0 partition tokens and 1 partition", p)
		}
	case SplitK:
		minPart := in.MinPartitionTokens
		if minPart <= 0 {
			minPart = DefaultMinPartitionTokens
		}
		if p.PartitionTokens <= 0 || p.PartitionTokens%in.BlockSize != 0 || p.PartitionTokens < minPart {
			t.Errorf("split-k plan %+v: partition not a multiple of page %d at least %d", p, in.BlockSize, minPart)
		}
		if p.NumPartitions < 2 || p.NumPartitions != ceilDiv(maxCtx, p.PartitionTokens) {
			t.Errorf("split-k plan %+v: %d partitions do not cover context %d exactly", p, p.NumPartitions, maxCtx)
		}
	default:
		t.Errorf("plan %+v: unknown kernel", p)
	}
}

func TestPlanInvariantsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		batch := 1 + rng.IntN(64)
		lens := make([]int32, batch)
		for i := range lens {
			lens[i] = int32(1 + rng.IntN(1<<uint(1+rng.IntN(17))))
		}
		hkv := []int{1, 2, 4, 8, 12, 32}[rng.IntN(6)]
		in := PlanInput{
			Batch: batch, ContextLens: lens, NumHeads: hkv * (1 + rng.IntN(8)), NumKVHeads: hkv,
			HeadDim: []int{64, 128}[rng.IntN(2)], BlockSize: []int{8, 16, 32}[rng.IntN(3)],
			DTypeSize: []int{2, 4}[rng.IntN(2)], NumSMs: 1 + rng.IntN(160), ProgramsPerSM: rng.IntN(4),
			MinPartitionTokens: []int{0, 16, 100, 512}[rng.IntN(4)],
		}
		checkPlanInvariants(t, in, Plan(in))
		if t.Failed() {
			t.Fatalf("input %+v", in)
		}
	}
}

func TestPlanBatchMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for Batch != len(ContextLens)")
		}
	}()
	Plan(PlanInput{Batch: 2, ContextLens: []int32{5}, NumHeads: 1, NumKVHeads: 1, HeadDim: 64, BlockSize: 16, NumSMs: 1})
}

// BenchmarkPlan measures the dispatcher itself, which runs once per step.
func BenchmarkPlan(b *testing.B) {
	for _, tc := range []struct {
		name  string
		batch int
		ctx   int32
	}{{"b1_ctx131072", 1, 131072}, {"b256_ctx1024", 256, 1024}, {"b256_ctx32768", 256, 32768}} {
		b.Run(tc.name, func(b *testing.B) {
			in := PlanInput{Batch: tc.batch, ContextLens: repeat(tc.batch, tc.ctx), NumHeads: 32, NumKVHeads: 8,
				HeadDim: 128, BlockSize: 16, DTypeSize: 2, NumSMs: 132, ProgramsPerSM: 2}
			for b.Loop() {
				Plan(in)
			}
		})
	}
}
