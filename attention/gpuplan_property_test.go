package attention

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// propertyPlans is gpuPlanInput's input and gpuPlan's plan: CUDAKernels.planInput and Plan without CUDA.
func propertyPlans(lens []int32, numHeads, kvHeads, headDim, elem, blockSize int, g gpuSize) (PlanInput, DecodePlan) {
	in := gpuPlanInput(lens, numHeads, kvHeads, headDim, elem, blockSize, g)
	return in, gpuPlan(in, g)
}

// checkPlan reports a plan's broken invariant, or "".
func checkPlan(p DecodePlan, longest, blockSize int) string {
	switch p.Kernel {
	case Grouped:
		if p.NumPartitions != 1 || p.PartitionTokens != 0 {
			return "grouped plan with partitions"
		}
	case SplitK:
		switch {
		case p.PartitionTokens <= 0 || p.PartitionTokens%cudaTileTokens != 0:
			return "partitions not whole tiles"
		case p.PartitionTokens%blockSize != 0:
			return "partitions not whole pages"
		case p.NumPartitions < 2:
			return "split-k with fewer than 2 partitions"
		case p.NumPartitions != ceilDiv(longest, p.PartitionTokens):
			return "NumPartitions != ceil(longest/PartitionTokens)"
		case p.NumPartitions > maxPlannedPartitions(longest):
			return "more partitions than maxPlannedPartitions"
		}
	default:
		return "unknown kernel"
	}
	return ""
}

// TestGPUPlanInvariants is a randomized property test of the eager (gpuPlan: CUDAKernels.Plan, tailBound
// included) and graph (GraphPlan on PlanInput, all rows at the cap as decodeGraphed plans them, and
// ragged) plans over ragged batches, 1-token contexts, contexts up to 262144, kv heads 1..64, head_dim
// 64/128 at 2 or 4 bytes, 1..200 SMs, 0..8 programs an SM.
func TestGPUPlanInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 21))
	ctxs := []int{1, 2, 63, 64, 65, 127, 128, 129, 511, 512, 513, 1000, 1024, 1088, 2047, 2048, 2049,
		3000, 4095, 4096, 4097, 8192, 16384, 32768, 65535, 65536, 100000, 131072, 131073, 262144}
	n := 0
	for iter := 0; iter < 200000; iter++ {
		batch := 1 + rng.IntN(8)
		if rng.IntN(4) == 0 {
			batch = 1 + rng.IntN(300)
		}
		kvHeads := 1 + rng.IntN(64)
		if rng.IntN(2) == 0 {
			kvHeads = []int{1, 2, 4, 8, 12, 32}[rng.IntN(6)]
		}
		headDim := []int{64, 128}[rng.IntN(2)]
		elem := []int{2, 4}[rng.IntN(2)]
		blockSize := []int{8, 16, 32, 64}[rng.IntN(4)]
		g := gpuSize{sms: 1 + rng.IntN(200), groupedPerSM: rng.IntN(9), splitPerSM: rng.IntN(9)}
		if rng.IntN(2) == 0 {
			g.sms = []int{1, 2, 16, 66, 78, 108, 114, 132, 144, 200}[rng.IntN(10)]
		}
		longest := ctxs[rng.IntN(len(ctxs))]
		if rng.IntN(3) == 0 {
			longest = 1 + rng.IntN(140000)
		}
		lens := make([]int32, batch)
		for i := range lens {
			switch rng.IntN(3) {
			case 0:
				lens[i] = int32(longest)
			case 1:
				lens[i] = int32(1 + rng.IntN(longest))
			default:
				lens[i] = int32(max(1, longest-rng.IntN(5)))
			}
		}
		longest = longestContext(lens)
		numHeads := kvHeads * []int{1, 2, 4, 8}[rng.IntN(4)]
		desc := fmt.Sprintf("batch %d longest %d kv %d heads %d d %d elem %d bs %d %+v",
			batch, longest, kvHeads, numHeads, headDim, elem, blockSize, g)

		graphIn, eager := propertyPlans(lens, numHeads, kvHeads, headDim, elem, blockSize, g)
		if msg := checkPlan(eager, longest, blockSize); msg != "" {
			t.Fatalf("eager: %s: %s: %+v", msg, desc, eager)
		}
		if msg := checkPlan(GraphPlan(graphIn), longest, blockSize); msg != "" {
			t.Fatalf("graph (ragged): %s: %s: %+v", msg, desc, GraphPlan(graphIn))
		}
		caps := make([]int32, batch)
		for i := range caps {
			caps[i] = int32(longest)
		}
		capIn, _ := propertyPlans(caps, numHeads, kvHeads, headDim, elem, blockSize, g)
		if gp := GraphPlan(capIn); checkPlan(gp, longest, blockSize) != "" {
			t.Fatalf("graph (cap): %s: %s: %+v", checkPlan(gp, longest, blockSize), desc, gp)
		}
		if gp := gpuGraphPlan(capIn, g, 1+rng.IntN(batch)); checkPlan(gp, longest, blockSize) != "" {
			t.Fatalf("graph with the tail rule (cap): %s: %s: %+v", checkPlan(gp, longest, blockSize), desc, gp)
		}
		n++
	}
	t.Logf("%d shapes checked", n)
}

// TestGraphPlanPowerOfTwo: GraphPlan's bits.Len step only ever shortens to a power of two tiles,
// never lengthens, and after it the partition is a power of two tiles whenever it changed Plan's.
func TestGraphPlanPowerOfTwo(t *testing.T) {
	for _, sms := range []int{1, 16, 132, 200} {
		for _, perSM := range []int{1, 2, 3, 4, 8} {
			for _, kvh := range []int{1, 2, 4, 8, 32} {
				for _, batch := range []int{1, 2, 3, 4, 8, 16, 64} {
					for cap := 64; cap <= 16384; cap += 64 * (1 + cap/1024) {
						lens := make([]int32, batch)
						for i := range lens {
							lens[i] = int32(cap)
						}
						g := gpuSize{sms: sms, groupedPerSM: perSM, splitPerSM: perSM}
						in, _ := propertyPlans(lens, 4*kvh, kvh, 64, 2, 16, g)
						plan, got := tileAligned(Plan(in), lens), GraphPlan(in)
						if got.Kernel != plan.Kernel {
							t.Fatalf("kernel changed: %+v -> %+v", plan, got)
						}
						if got.Kernel != SplitK || got == plan {
							continue
						}
						tiles := got.PartitionTokens / cudaTileTokens
						oneLevelPlan := plan.NumPartitions > maxOneLevelPartitions
						if !oneLevelPlan && (got.PartitionTokens > plan.PartitionTokens || tiles&(tiles-1) != 0) {
							t.Fatalf("sms %d perSM %d kv %d batch %d cap %d: Plan %+v GraphPlan %+v",
								sms, perSM, kvh, batch, cap, plan, got)
						}
					}
				}
			}
		}
	}
}
