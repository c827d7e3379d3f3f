package attention

import (
	"fmt"
	"testing"
)

// TestGPUMinPartitionTokens checks the GPU dispatcher's partition bound on the issue-6 shapes (head_dim
// 128, 2 split-k programs an SM), head_dim-64 shapes of the batch sweep (3 an SM) and a ragged
// batch: no split when the rows keep the GPU busy (fillsGPU: twice the rows at head_dim 64); otherwise
// whole 64-token tiles, at least minSplitTokens, at most maxSplitPartitions per context, and as many
// partitions as give each slot one program (each SM one program where the floor drops to one tile, the
// small calls) unless the minimum forces fewer, longer ones.
func TestGPUMinPartitionTokens(t *testing.T) {
	for _, tc := range []struct {
		batch, ctx, kvHeads, headDim int
		want                         int // 0: only the properties
	}{
		{256, 256, 12, 128, 272}, {16, 4096, 12, 128, 4112}, {64, 1024, 2, 128, 1040},
		{8, 8192, 12, 128, 4096}, {4, 16384, 12, 128, 3328}, {2, 32768, 12, 128, 3008},
		{1, 131072, 12, 128, 6016}, {32, 2048, 2, 128, 512}, {1, 8192, 8, 128, 512},
		{1, 65536, 2, 128, 1024}, {1, 131072, 8, 128, 4032},
		{16, 4096, 1, 128, 0}, {3, 100000, 4, 128, 0}, {1, 600, 1, 128, 0}, {1, 513, 8, 128, 64},
		{1, 1024, 8, 128, 64},                          // 8 rows: 16 partitions, one program an SM
		{1, 2048, 8, 128, 128}, {1, 4096, 8, 128, 256}, // not 32 of 64 and 128 (slower: one program an SM wins)
		{4, 1024, 8, 128, 256}, {8, 1024, 8, 128, 512},
		{16, 4096, 8, 128, 4112}, // 128 rows of head_dim 128 fill the GPU
		{16, 4096, 8, 64, 1408},  // 128 rows of head_dim 64 do not: 3 partitions, 384 programs on 396 slots
		{8, 4096, 8, 64, 704},    // not 8 of 512: 512 programs are two waves of 396 slots
		{4, 1024, 8, 64, 256},    // small: one program an SM (faster than 16 of 64)
		{32, 4096, 8, 64, 4112},  // 256 rows of head_dim 64 fill it
		{16, 1024, 8, 64, 1040},  // short contexts: 128 rows fill it at head_dim 64 too
		{16, 2048, 8, 64, 2064},
		{34, 4096, 8, 128, 4112}, // 272 rows: fills the GPU (the tail is tailBound's)
	} {
		t.Run(fmt.Sprintf("b%d_ctx%d_kv%d_d%d", tc.batch, tc.ctx, tc.kvHeads, tc.headDim), func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx - i%3) // slightly ragged
			}
			longest := tc.ctx
			tokenBytes := 2 * 2 * tc.headDim
			g := h100(tc.headDim)
			sms := g.sms
			got := gpuMinPartitionTokens(lens, tc.kvHeads, tokenBytes, 16, g)
			if tc.want != 0 && got != tc.want {
				t.Errorf("bound %d, want %d", got, tc.want)
			}
			rows := tc.batch * tc.kvHeads
			if fillsGPU(rows, tokenBytes, longest, g) {
				if got <= longest {
					t.Errorf("bound %d splits %d rows on %d SMs", got, rows, sms)
				}
				return
			}
			parts := ceilDiv(longest, got)
			// The floor: minSplitTokens, or one tile where partitions that long leave a tenth of the SMs
			// idle; then the target is a program an SM, else a program a slot.
			floor, slots := minSplitTokens, sms*g.splitPerSM
			if 10*rows*ceilDiv(longest, minSplitTokens) < 9*sms {
				floor, slots = cudaTileTokens, rows*ceilDiv(sms, rows)
			}
			switch {
			case got%cudaTileTokens != 0:
				t.Errorf("bound %d is not whole tiles", got)
			case got < floor:
				t.Errorf("bound %d below %d", got, floor)
			case parts > maxSplitPartitions:
				t.Errorf("%d partitions", parts)
			case rows*parts > slots && got > floor:
				t.Errorf("%d programs on %d slots", rows*parts, slots)
			}
			// One more partition would break a limit.
			more := parts + 1
			next := roundUp(ceilDiv(longest, more), cudaTileTokens)
			if next >= floor && more <= maxSplitPartitions && rows*more <= slots && ceilDiv(longest, next) == more {
				t.Errorf("bound %d (%d partitions) but %d partitions of %d fit", got, parts, more, next)
			}
		})
	}
}

// TestTailBound checks the tail rule: rows past the grouped kernel's slots by less than 0.4 of a wave,
// or by less than half a wave whose rows alone do not fill the GPU at contexts of longSplitTokens or
// more, get a bound of at most tailParts partitions (no shorter than minSplitTokens), elsewhere no bound.
// The H100 cases are the tail sweep's, where Plan's 2-4 partitions under it ran near the best split and
// the overflow of 1.45 waves (120 rows of head_dim 128) fills the GPU; the H200 cases the overflow
// sweep's, where that overflow does not (170 rows would) and two partitions ran faster from 2048 tokens
// on, but slower at 1024, and past 1.5 waves grouped was as fast or faster (docs/bench/attention-h200.md).
func TestTailBound(t *testing.T) {
	for _, tc := range []struct {
		g                            gpuSize
		batch, ctx, kvHeads, headDim int
		want                         int // 0: no tail bound
	}{
		{h100(128), 32, 4096, 8, 128, 0},    // 256 rows on 264 grouped slots
		{h100(128), 33, 4096, 8, 128, 0},    // 264 rows: one wave exactly
		{h100(128), 34, 4096, 8, 128, 1024}, // 272 rows: 4 partitions (grouped 234.6 µs, split 199.1)
		{h100(128), 44, 4096, 8, 128, 1024}, // 352 rows: 1.33 waves
		{h100(128), 47, 4096, 8, 128, 1024}, // 376 rows: an overflow of 112 rows does not fill 132 SMs
		{h100(128), 48, 4096, 8, 128, 0},    // 384 rows: 1.45 waves, grouped within 2% of the best
		{h100(128), 48, 2048, 8, 128, 0},
		{h100(128), 40, 2048, 8, 128, 512},
		{h100(128), 40, 1024, 8, 128, 512}, // the floor allows 2 partitions
		{h100(128), 40, 512, 8, 128, 512},  // nothing to split (Plan keeps it whole)
		{h100(64), 66, 4096, 8, 64, 0},     // 528 rows: one wave of the 1B's 4 grouped programs an SM
		{h100(64), 70, 4096, 8, 64, 1024},  // 560 rows
		{h100(64), 96, 4096, 8, 64, 0},     // 768 rows: 1.45 waves
		{h100(128), 26, 2048, 32, 128, 0},  // Llama-2-7B, 832 rows: 3.2 waves
		{h200(128), 34, 4096, 8, 128, 1024},
		{h200(128), 48, 4096, 8, 128, 1024}, // 1.45 waves (grouped 199.7 µs, 2 partitions 190.2)
		{h200(128), 48, 2048, 8, 128, 512},
		{h200(128), 48, 1024, 8, 128, 0},    // 1024 tokens: grouped 54.7, 2 partitions 56.9
		{h200(128), 32, 2048, 12, 128, 512}, // MHA 384 rows: 102.8 against 99.9
		{h200(128), 12, 4096, 32, 128, 1024},
		{h200(128), 47, 2048, 8, 128, 512},  // 103.5 against 99.6
		{h200(128), 49, 8192, 8, 128, 2048}, // 392 rows: 1.48 waves
		{h200(128), 50, 4096, 8, 128, 0},    // 1.52 waves: 2 partitions would be a fourth wave
		{h200(128), 54, 2048, 8, 128, 0},    // grouped 110.3, 3 partitions 114.6
		{h200(128), 64, 4096, 8, 128, 0},    // 1.94 waves: grouped 245.0, split 249.4
		{h200(64), 96, 4096, 8, 64, 1024},   // 768 rows of head_dim 64: 198.0 against 193.5
		{h200(64), 96, 2048, 8, 64, 0},      // 240 rows of 64 fill it at 2048 tokens (101.7 against 104.1)
		{h200(64), 96, 1024, 8, 64, 0},
		{h200(64), 100, 4096, 8, 64, 0}, // 1.52 waves: grouped 202.9, 4 partitions 212.3
	} {
		t.Run(fmt.Sprintf("bw%.2f_b%d_ctx%d_kv%d_d%d", tc.g.bw, tc.batch, tc.ctx, tc.kvHeads, tc.headDim), func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx)
			}
			in := PlanInput{ContextLens: lens, NumKVHeads: tc.kvHeads, HeadDim: tc.headDim, DTypeSize: 2}
			got, ok := tailBound(in, tc.g)
			if ok != (tc.want != 0) || got != tc.want {
				t.Errorf("tailBound = %d, %v; want %d", got, ok, tc.want)
			}
		})
	}
}

// TestGPUGraphPlanTail checks that a graph's plan applies the tail rule to its rows (the model's batch
// bucket) where the smallest batch it serves is near a wave: Llama-3-8B at cap 4096 splits the
// 40-sequence bucket (320 rows on 264 grouped slots, batches from 33), not the 48- and 64-sequence ones;
// a Llama-2-13B-shaped bucket of 8 (320 rows of 40 KV heads, batches from 5: 200 rows) stays GraphPlan's.
func TestGPUGraphPlanTail(t *testing.T) {
	for _, tc := range []struct {
		batch, minBatch, heads, kvHeads int
		split                           bool
	}{{32, 17, 32, 8, false}, {40, 33, 32, 8, true}, {48, 41, 32, 8, false}, {64, 57, 32, 8, false}, {8, 5, 40, 40, false}} {
		lens := make([]int32, tc.batch)
		for i := range lens {
			lens[i] = 4096
		}
		g := h100(128)
		in := gpuPlanInput(lens, tc.heads, tc.kvHeads, 128, 2, 16, g)
		got := gpuGraphPlan(in, g, tc.minBatch)
		if split := got.Kernel == SplitK; split != tc.split {
			t.Errorf("batch %d: %+v, want split %v", tc.batch, got, tc.split)
		}
		if !tc.split && got != GraphPlan(in) {
			t.Errorf("batch %d: %+v, GraphPlan %+v", tc.batch, got, GraphPlan(in))
		}
		if tc.split && (got.NumPartitions < 2 || got.NumPartitions > tailParts) {
			t.Errorf("batch %d: %+v, want 2-%d partitions", tc.batch, got, tailParts)
		}
	}
}

// TestGraphPlanOneWave checks GraphPlan's second rule: split-k partitions halved while the programs that
// work at three quarters of the cap still fit in one wave of the 132 SMs' split-k program slots, never
// below the one-level length (cap/16). The first four cases are the decode steps measured on the H100
// (Llama-3.2-1B: head_dim 64, 3 split-k programs an SM; Llama-3-8B: 128, 2), where the rule's choice
// was the fastest of 128, 256 and 512 tokens.
func TestGraphPlanOneWave(t *testing.T) {
	const sms = 132
	for _, tc := range []struct {
		name                                string
		batch, cap, kvHeads, headDim, perSM int
		plan, want                          int // Plan's partition tokens, GraphPlan's
	}{
		{"1b", 4, 2048, 8, 64, 3, 512, 128},    // 32 rows × 12 working partitions = 384 ≤ 396 slots
		{"1b", 8, 2048, 8, 64, 3, 512, 256},    // 64 × 6 = 384 fit; 64 × 12 would not
		{"8b", 4, 2048, 8, 128, 2, 512, 256},   // 32 × 6 = 192 ≤ 264; 32 × 12 would not
		{"8b", 8, 2048, 8, 128, 2, 512, 512},   // 64 × 6 = 384 > 264: Plan's stays
		{"1b", 8, 4096, 8, 64, 3, 704, 512},    // Plan's 704 shortened to a power of two tiles: 64 × 6 fit
		{"1b", 16, 4096, 8, 64, 3, 1408, 1024}, // 128 × 3 = 384 fit
		{"8b", 2, 2048, 8, 128, 2, 256, 128},   // 16 × 12 = 192 fit; 64 would be under the one-level length
		{"8b", 4, 8192, 8, 128, 2, 1024, 1024}, // 32 × 12 working 512-token partitions would not fit
		{"tinyllama", 1, 8192, 4, 64, 3, 0, 0}, // Plan's partitions are under the one-level length: unchanged
	} {
		t.Run(fmt.Sprintf("%s_b%d_cap%d", tc.name, tc.batch, tc.cap), func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.cap)
			}
			in := PlanInput{ContextLens: lens, NumHeads: 32, NumKVHeads: tc.kvHeads, HeadDim: tc.headDim, BlockSize: 16,
				DTypeSize: 2, NumSMs: sms, ProgramsPerSM: tc.perSM,
				MinPartitionTokens: gpuMinPartitionTokens(lens, tc.kvHeads, 2*2*tc.headDim, 16, h100(tc.headDim))}
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
		{1, 2048, 8, false},   // Llama 3 at batch 1: Plan's 16 partitions of 128, one program an SM
		{1, 4096, 8, false},   // 16 of 256
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
				MinPartitionTokens: gpuMinPartitionTokens(lens, tc.kvHeads, fullRowTokenBytes, 16, h100(128))}
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

// TestLargeStream checks the L2 policy rule of the K/V copies (largeStream) on an H100-sized L2 and
// memory: streams of 16 L2 sizes of K and V or more are large; on memory of 4 TB/s or more (the H200's)
// none is, and an unknown bandwidth (0) counts as slow.
func TestLargeStream(t *testing.T) {
	const l2 = 50 << 20 // 16 of them are 838.9 MB
	const h100, h200 = h100PeakBandwidth, 4.81e12
	for _, tc := range []struct {
		name                            string
		batch, ctx, kvHeads, dim, bytes int
		bw                              float64
		want                            bool
	}{
		{"8b-b64-2048", 64, 2048, 8, 128, 2, h100, false},       // 536.9 MB
		{"8b-b64-4096", 64, 4096, 8, 128, 2, h100, true},        // 1073.7 MB
		{"mha-805mb", 1, 131072, 12, 128, 2, h100, false},       // 805.3 MB
		{"at-threshold", 1, 12800, 128, 128, 2, h100, true},     // 838.9 MB: 16 × 50 MiB
		{"below-threshold", 1, 12799, 128, 128, 2, h100, false}, // one token less
		{"fp32-doubles-bytes", 64, 2048, 8, 128, 4, h100, true}, // 1073.7 MB
		{"empty", 0, 0, 8, 128, 2, h100, false},
		{"unknown-bandwidth", 64, 4096, 8, 128, 2, 0, true},
		{"h200-8b-b64-4096", 64, 4096, 8, 128, 2, h200, false},
		{"h200-8b-b128-8192", 128, 8192, 8, 128, 2, h200, false}, // 4295 MB
		{"just-under-4tbs", 64, 4096, 8, 128, 2, 3.99e12, true},
		{"at-4tbs", 64, 4096, 8, 128, 2, 4e12, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx)
			}
			if got := largeStream(lens, tc.kvHeads, tc.dim, tc.bytes, l2, tc.bw); got != tc.want {
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
						MinPartitionTokens: gpuMinPartitionTokens(lens, kvh, fullRowTokenBytes, 16, gpuSize{sms: sms, groupedPerSM: perSM, splitPerSM: perSM}),
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
						MinPartitionTokens: gpuMinPartitionTokens(lens, m.kvh, 2*2*m.hdim, 16, gpuSize{sms: sms, groupedPerSM: perSM, splitPerSM: perSM})}
					if p := GraphPlan(in); p.Kernel == SplitK &&
						(p.PartitionTokens%cudaTileTokens != 0 || p.NumPartitions != ceilDiv(cap, p.PartitionTokens)) {
						t.Errorf("%s, batch %d, cap %d, %d an SM: %+v", m.name, batch, cap, perSM, p)
					}
				}
			}
		}
	}
}

// h100 is the H100's size for a bf16 call of head_dim d on the mma path: 132 SMs; grouped and split-k
// programs an SM as the occupancy API gives them (d128: 2 and 2; d64: 4 and 3).
func h100(d int) gpuSize {
	if d == 64 {
		return gpuSize{sms: 132, groupedPerSM: 4, splitPerSM: 3}
	}
	return gpuSize{sms: 132, groupedPerSM: 2, splitPerSM: 2}
}

// h200 is h100(d) with the H200's memory bandwidth (its driver's 4.81 TB/s: bw 1.43).
func h200(d int) gpuSize { g := h100(d); g.bw = bandwidthScale(4.81e12); return g }

// TestFillsGPUBandwidth checks that the rows which keep the memory busy grow with its bandwidth
// (fillsGPU's g.bw): at the H100's 128 rows of head_dim 128 fill 132 SMs and the call runs grouped; at
// the H200's (bw 1.44, from its driver's 4.81 TB/s) they split in two (faster there at Llama-3-8B batch
// 16 × 4096: docs/bench/attention-h200.md), and 192 rows still fill it. An unknown bandwidth (0) is the
// H100's.
func TestFillsGPUBandwidth(t *testing.T) {
	unknown := func(d int) gpuSize { g := h100(d); g.bw = bandwidthScale(0); return g }
	for _, tc := range []struct {
		name                         string
		g                            gpuSize
		batch, ctx, kvHeads, headDim int
		want                         int // the partition bound: > ctx means grouped
	}{
		{"h100-8b-b16-4096", h100(128), 16, 4096, 8, 128, 4112},
		{"unknown-8b-b16-4096", unknown(128), 16, 4096, 8, 128, 4112},
		{"h200-8b-b16-4096", h200(128), 16, 4096, 8, 128, 2048},
		{"h200-8b-b24-4096", h200(128), 24, 4096, 8, 128, 4112}, // 192 rows fill it
		{"h200-7b-b4-4096", h200(128), 4, 4096, 32, 128, 2048},
		{"h200-1b-b16-1024", h200(64), 16, 1024, 8, 64, 512}, // 128 rows: 2 of 512 tokens
		{"h100-1b-b16-1024", h100(64), 16, 1024, 8, 64, 1040},
		// head_dim 256 takes as many rows as head_dim 128: 128 rows at 16k split on the H200, 512 do not.
		{"h200-gemma3-b16-16384", h200(256), 16, 16384, 8, 256, 8192},
		{"h200-gemma3-b64-4096", h200(256), 64, 4096, 8, 256, 4112},
		{"h100-gemma3-b16-16384", h100(256), 16, 16384, 8, 256, 16400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx)
			}
			if got := gpuMinPartitionTokens(lens, tc.kvHeads, 2*2*tc.headDim, 16, tc.g); got != tc.want {
				t.Fatalf("bound %d, want %d", got, tc.want)
			}
		})
	}
	if bandwidthScale(3.35232e12) != 1 || bandwidthScale(4.81e12) < 1.43 || bandwidthScale(1e12) != 1 {
		t.Fatalf("bandwidthScale: %v %v %v", bandwidthScale(3.35232e12), bandwidthScale(4.81e12), bandwidthScale(1e12))
	}
	// The H100's driver figure leaves fillsGPU's boundary where the H100's batch sweep put it: 119 rows of head_dim
	// 128 fill 132 SMs, 118 do not; at head_dim 64 past longSplitTokens, 238 and 237.
	h100bw := gpuSize{sms: 132, bw: bandwidthScale(3.35232e12)}
	for _, c := range []struct {
		rows, tokenBytes, longest int
		want                      bool
	}{{119, 512, 4096, true}, {118, 512, 4096, false}, {238, 256, 4096, true}, {237, 256, 4096, false}} {
		if got := fillsGPU(c.rows, c.tokenBytes, c.longest, h100bw); got != c.want {
			t.Errorf("H100: fillsGPU(%d rows, %d bytes a token) = %v, want %v", c.rows, c.tokenBytes, got, c.want)
		}
	}
}
