package attention

import (
	"fmt"
	"testing"
)

// TestGPUMinPartitionTokens checks the GPU dispatcher's partition bound on the issue-6 shapes and a
// ragged batch: no split when batch × kv_heads nearly fills the SMs; otherwise whole 64-token tiles, at
// least minSplitTokens, at most maxSplitPartitions per context, at most one program per slot unless the
// minimum forces fewer, longer ones, and as many partitions as those limits allow.
func TestGPUMinPartitionTokens(t *testing.T) {
	const sms, perSM = 132, 2
	for _, tc := range []struct {
		batch, ctx, kvHeads int
		want                int // 0: only the properties
	}{
		{256, 256, 12, 272}, {16, 4096, 12, 4112}, {64, 1024, 2, 1040},
		{8, 8192, 12, 4096}, {4, 16384, 12, 3328}, {2, 32768, 12, 3008}, {1, 131072, 12, 6016},
		{32, 2048, 2, 512}, {1, 8192, 8, 512}, {1, 65536, 2, 1024}, {1, 131072, 8, 4032},
		{16, 4096, 1, 0}, {3, 100000, 4, 0}, {1, 600, 1, 0}, {1, 513, 8, 64},
		{1, 1024, 8, 64}, {1, 2048, 8, 64}, {4, 1024, 8, 128}, {8, 1024, 8, 512},
	} {
		t.Run(fmt.Sprintf("b%d_ctx%d_kv%d", tc.batch, tc.ctx, tc.kvHeads), func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx - i%3) // slightly ragged
			}
			longest := tc.ctx
			got := gpuMinPartitionTokens(lens, tc.kvHeads, 16, sms, perSM)
			if tc.want != 0 && got != tc.want {
				t.Errorf("bound %d, want %d", got, tc.want)
			}
			rows := tc.batch * tc.kvHeads
			if 10*rows >= 9*sms {
				if got <= longest {
					t.Errorf("bound %d splits %d rows on %d SMs", got, rows, sms)
				}
				return
			}
			parts := ceilDiv(longest, got)
			// The floor: minSplitTokens, or one tile where partitions that long leave a tenth of the SMs idle.
			floor := minSplitTokens
			if 10*rows*ceilDiv(longest, minSplitTokens) < 9*sms {
				floor = cudaTileTokens
			}
			switch {
			case got%cudaTileTokens != 0:
				t.Errorf("bound %d is not whole tiles", got)
			case got < floor:
				t.Errorf("bound %d below %d", got, floor)
			case parts > maxSplitPartitions:
				t.Errorf("%d partitions", parts)
			case rows*parts > sms*perSM && got > floor:
				t.Errorf("%d programs on %d slots", rows*parts, sms*perSM)
			}
			// One more partition would break a limit.
			more := parts + 1
			next := roundUp(ceilDiv(longest, more), cudaTileTokens)
			if next >= floor && more <= maxSplitPartitions && rows*more <= sms*perSM && ceilDiv(longest, next) == more {
				t.Errorf("bound %d (%d partitions) but %d partitions of %d fit", got, parts, more, next)
			}
		})
	}
}

// TestGraphPlanOneWave checks GraphPlan's second rule: split-k partitions halved while the programs at
// the cap still fit in one wave of the 132 SMs' program slots, never below the one-level length (cap/16).
func TestGraphPlanOneWave(t *testing.T) {
	const sms = 132
	for _, tc := range []struct {
		batch, cap, kvHeads, perSM int
		plan, want                 int // Plan's partition tokens, GraphPlan's
	}{
		{4, 2048, 8, 2, 512, 256},   // 32 rows × 8 partitions = 256 programs ≤ 264 slots; 16 would not fit
		{4, 2048, 8, 4, 512, 128},   // 528 slots: 32 × 16 fit (Llama-3.2-1B's occupancy)
		{8, 2048, 8, 2, 512, 512},   // 64 × 8 = 512 > 264: Plan's stays
		{8, 2048, 8, 4, 512, 256},   // 64 × 8 = 512 ≤ 528
		{2, 2048, 8, 2, 128, 128},   // already at the one-level length
		{4, 8192, 8, 2, 1024, 1024}, // Plan's 32 × 8 = 256 programs are one wave already
		{4, 8192, 8, 4, 512, 512},   // 528 slots: Plan fills them (32 × 16) already
		{1, 8192, 4, 2, 0, 0},       // Plan's partitions are under the one-level length: unchanged
	} {
		t.Run(fmt.Sprintf("b%d_cap%d_kv%d_perSM%d", tc.batch, tc.cap, tc.kvHeads, tc.perSM), func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.cap)
			}
			in := PlanInput{ContextLens: lens, NumHeads: 32, NumKVHeads: tc.kvHeads, HeadDim: 128, BlockSize: 16,
				DTypeSize: 2, NumSMs: sms, ProgramsPerSM: tc.perSM,
				MinPartitionTokens: gpuMinPartitionTokens(lens, tc.kvHeads, 16, sms, tc.perSM)}
			plan, got := tileAligned(Plan(in), lens), GraphPlan(in)
			if tc.plan == 0 {
				if got != plan {
					t.Fatalf("GraphPlan %+v, Plan %+v: want them equal", got, plan)
				}
				return
			}
			if plan.Kernel != SplitK || plan.PartitionTokens != tc.plan {
				t.Fatalf("Plan %+v: want split-k partitions of %d (the case's premise)", plan, tc.plan)
			}
			if got.Kernel != SplitK || got.PartitionTokens != tc.want || got.NumPartitions != ceilDiv(tc.cap, tc.want) {
				t.Errorf("GraphPlan %+v: want %d partitions of %d", got, ceilDiv(tc.cap, tc.want), tc.want)
			}
		})
	}
}

// TestGraphPlan checks the graph plan against Plan: where Plan splits a context into more than 16
// partitions and 16 per context still give 90% of the SMs a program, 16 (or fewer) partitions of whole
// tiles that cover the cap; elsewhere Plan's choice unchanged.
func TestGraphPlan(t *testing.T) {
	const sms = 132
	for _, tc := range []struct {
		batch, cap, kvHeads int
		lengthened          bool
	}{
		{1, 2048, 8, true},    // Llama 3 at batch 1: Plan's 32 partitions of 64 become 16 of 128
		{1, 4096, 8, true},    // 16 of 256
		{2, 2048, 8, false},   // Plan: 16 partitions of 128
		{1, 1024, 8, false},   // Plan's 16 partitions: one level already
		{1, 65536, 2, false},  // 2 rows × 16 partitions would leave most SMs idle
		{1, 131072, 1, false}, // MQA at batch 1
		{64, 2048, 8, false},  // no split at all
		{1, 256, 8, false},    // too short to split
		{4, 32768, 4, false},  // Plan: 16 partitions of 2048
		{1, 8192, 4, false},   // 4 rows × 16 partitions would leave SMs idle
		{1, 131072, 8, true},  // 16 partitions of 8192
	} {
		t.Run(fmt.Sprintf("b%d_cap%d_kv%d", tc.batch, tc.cap, tc.kvHeads), func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.cap)
			}
			in := PlanInput{ContextLens: lens, NumHeads: 32, NumKVHeads: tc.kvHeads, HeadDim: 128, BlockSize: 16,
				DTypeSize: 2, NumSMs: sms, ProgramsPerSM: 2,
				MinPartitionTokens: gpuMinPartitionTokens(lens, tc.kvHeads, 16, sms, 2)}
			plan, got := tileAligned(Plan(in), lens), GraphPlan(in)
			if !tc.lengthened {
				if got != plan {
					t.Fatalf("GraphPlan %+v, Plan %+v: want them equal", got, plan)
				}
				return
			}
			if plan.Kernel != SplitK || plan.NumPartitions <= maxOneLevelPartitions {
				t.Fatalf("Plan %+v: the case does not exercise the rule", plan)
			}
			switch {
			case got.Kernel != SplitK:
				t.Errorf("GraphPlan %+v: want split-k", got)
			case got.NumPartitions > maxOneLevelPartitions:
				t.Errorf("GraphPlan %+v: more than %d partitions", got, maxOneLevelPartitions)
			case got.PartitionTokens%cudaTileTokens != 0:
				t.Errorf("GraphPlan %+v: partitions of part tiles", got)
			case got.PartitionTokens*got.NumPartitions < tc.cap || got.PartitionTokens*(got.NumPartitions-1) >= tc.cap:
				t.Errorf("GraphPlan %+v does not cover %d tokens exactly", got, tc.cap)
			case got.PartitionTokens < plan.PartitionTokens:
				t.Errorf("GraphPlan %+v shortens Plan's partitions %+v", got, plan)
			}
		})
	}
}

// TestLargeStream checks the L2 policy rule of the K/V copies (largeStream) on an H100-sized L2: streams
// of 16 L2 sizes of K and V or more are large.
func TestLargeStream(t *testing.T) {
	const l2 = 50 << 20 // 16 of them are 838.9 MB
	for _, tc := range []struct {
		name                            string
		batch, ctx, kvHeads, dim, bytes int
		want                            bool
	}{
		{"8b-b64-2048", 64, 2048, 8, 128, 2, false},       // 536.9 MB
		{"8b-b64-4096", 64, 4096, 8, 128, 2, true},        // 1073.7 MB
		{"mha-805mb", 1, 131072, 12, 128, 2, false},       // 805.3 MB
		{"at-threshold", 1, 12800, 128, 128, 2, true},     // 838.9 MB: 16 × 50 MiB
		{"below-threshold", 1, 12799, 128, 128, 2, false}, // one token less
		{"fp32-doubles-bytes", 64, 2048, 8, 128, 4, true}, // 1073.7 MB
		{"empty", 0, 0, 8, 128, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx)
			}
			if got := largeStream(lens, tc.kvHeads, tc.dim, tc.bytes, l2); got != tc.want {
				t.Fatalf("largeStream = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMaxPlannedPartitions: the partitions of the GPU's plans (CUDAKernels.Plan's input: the GPU's
// partition bound; tileAligned after Plan; GraphPlan) never exceed maxPlannedPartitions, which sizes
// SplitKWorkspaceBound. Short contexts at batch 1, where the bound drops to one tile, are the case a
// bound of ⌈ctx / DefaultMinPartitionTokens⌉ missed (batch 1 × 1000 tokens, 1 KV head: 16 partitions
// of 64 tokens against 4).
func TestMaxPlannedPartitions(t *testing.T) {
	const sms = 132
	n := 0
	for _, ctx := range []int{1, 65, 300, 513, 1000, 2000, 4000, 8192, 20000, 65536, 131072} {
		for _, kvh := range []int{1, 2, 8, 12} {
			for _, batch := range []int{1, 2, 4, 64} {
				for _, perSM := range []int{1, 2, 4} {
					lens := make([]int32, batch)
					for i := range lens {
						lens[i] = int32(max(1, ctx-i%5))
					}
					in := PlanInput{
						Batch: batch, ContextLens: lens, NumHeads: 4 * kvh, NumKVHeads: kvh, HeadDim: 128,
						BlockSize: 16, DTypeSize: 2, NumSMs: sms, ProgramsPerSM: perSM,
						MinPartitionTokens: gpuMinPartitionTokens(lens, kvh, 16, sms, perSM),
					}
					for name, plan := range map[string]DecodePlan{
						"plan": tileAligned(Plan(in), lens), "graph": tileAligned(GraphPlan(in), lens),
					} {
						n++
						if plan.NumPartitions > maxPlannedPartitions(ctx) {
							t.Errorf("%s: batch %d × %d tokens, %d KV heads, %d an SM: %d partitions of %d tokens, bound %d",
								name, batch, ctx, kvh, perSM, plan.NumPartitions, plan.PartitionTokens, maxPlannedPartitions(ctx))
						}
					}
				}
			}
		}
	}
	t.Logf("%d plans checked", n)
}

// TestGraphPlanTiles: the graph plans of the supported models' shapes (heads, KV heads and head_dim of
// TinyLlama, SmolLM2-135M and -360M, Llama-3.2-1B, Llama-3-8B) at batches 1-8 and caps up to 8192 split
// into whole 64-token tiles. Plan alone cut TinyLlama's and SmolLM2's long caps into 80-, 144- and
// 208-token partitions, each ending in a tile mostly of padding.
func TestGraphPlanTiles(t *testing.T) {
	const sms = 132
	for _, m := range []struct {
		name          string
		hq, kvh, hdim int
	}{{"tinyllama", 32, 4, 64}, {"smollm2-135m", 9, 3, 64}, {"smollm2-360m", 15, 5, 64},
		{"llama-3.2-1b", 32, 8, 64}, {"llama-3-8b", 32, 8, 128}} {
		for _, batch := range []int{1, 2, 4, 8} {
			for _, cap := range []int{128, 256, 512, 1024, 2048, 4096, 8192} {
				for _, perSM := range []int{2, 3, 4} {
					lens := make([]int32, batch)
					for i := range lens {
						lens[i] = int32(cap)
					}
					in := PlanInput{ContextLens: lens, NumHeads: m.hq, NumKVHeads: m.kvh, HeadDim: m.hdim, BlockSize: 16,
						DTypeSize: 2, NumSMs: sms, ProgramsPerSM: perSM,
						MinPartitionTokens: gpuMinPartitionTokens(lens, m.kvh, 16, sms, perSM)}
					if p := GraphPlan(in); p.Kernel == SplitK &&
						(p.PartitionTokens%cudaTileTokens != 0 || p.NumPartitions != ceilDiv(cap, p.PartitionTokens)) {
						t.Errorf("%s, batch %d, cap %d, %d an SM: %+v", m.name, batch, cap, perSM, p)
					}
				}
			}
		}
	}
}
