package model

import (
	"fmt"
	"strings"
	"testing"
)

// TestPlanFP8KV: with an FP8 KV cache (stepFacts.kvFP8) only the RoPE kernel writes the pages, so every
// RoPE op runs (no Q/K/V product's RoPE epilogue, no rotation in decode attention), and decode attention
// runs its _e4m3 kernels; over bf16 pages the same steps fuse the rotation somewhere (the
// case the rule changes). Decode steps of 1, 8 and 32 rows, eager and graphs, and a prefill step.
func TestPlanFP8KV(t *testing.T) {
	for _, m := range []planModel{planLlama3_8B, planLlama32_1B, planQwen3_8B, planGemma3_12B} {
		for _, rows := range []int{1, 8, 32, 300} {
			for _, graph := range []bool{false, true} {
				if graph && rows > 64 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%d/graph=%v", m.name, rows, graph), func(t *testing.T) {
					lens := make([]int32, rows)
					for i := range lens {
						lens[i] = 2000
					}
					st := stepShape{decode: rows <= 64, graph: graph, contextLens: lens, contextCap: 2048, stride: 128}
					ops, _ := recordedStep(m, rows, false)
					fusedBF16 := 0
					for _, kvFP8 := range []bool{false, true} {
						f := planFacts("h200", m)
						f.kvFP8 = kvFP8
						plans := planStep(ops, 0, &f, &st)
						for i, op := range ops {
							p := plans[i]
							if p.err != nil {
								t.Fatalf("FP8 KV %v: op %d (%v): %v", kvFP8, i, op.kind, p.err)
							}
							switch {
							case op.kind == opRoPE && p.skip:
								if kvFP8 {
									t.Errorf("op %d: RoPE skipped over FP8 pages", i)
								}
								fusedBF16++
							case op.kind == opMatMul && p.mm.mode == gemvRoPE && kvFP8:
								t.Errorf("op %d: the product's RoPE epilogue over FP8 pages", i)
							case op.kind == opAttention && p.decode && kvFP8:
								if p.attn.RoPE || !p.attn.Kernel.KVFP8 || !strings.Contains(p.attn.Kernel.Name, "_e4m3_") {
									t.Errorf("op %d: decode attention %+v over FP8 pages", i, p.attn.Kernel)
								}
							case op.kind == opAttention && p.decode && p.attn.Kernel.KVFP8:
								t.Errorf("op %d: an FP8 kernel over bf16 pages", i)
							}
						}
					}
					if rows <= 64 && m.dim != 256 && fusedBF16 == 0 {
						t.Errorf("over bf16 pages no RoPE fused: the case does not exercise the rule")
					}
				})
			}
		}
	}
}
