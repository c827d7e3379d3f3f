package model

import "testing"

// TestPlanGemm checks the skinny GEMM's launch shapes on an H100 (132 SMs) for the decode products of
// Llama-3-8B, Llama-3.2-1B and Qwen2.5-7B's gate/up (the shapes BenchmarkCUDAGemm's sweep found best or within a few % of it)
// and the edges: a tiny product, k too short to split.
func TestPlanGemm(t *testing.T) {
	for _, c := range []struct {
		name      string
		n, chunks int
		want      gemmShape
	}{
		{"8b-gateup", 28672, 64, gemmShape{4, 1}},
		{"8b-lmhead", 128256, 64, gemmShape{4, 1}},
		{"8b-qkv", 6144, 64, gemmShape{1, 1}},
		{"8b-o", 4096, 64, gemmShape{1, 2}},
		{"8b-down", 4096, 224, gemmShape{1, 2}},
		{"1b-gateup", 16384, 32, gemmShape{1, 1}},
		{"1b-qkv", 3072, 32, gemmShape{1, 3}},
		{"1b-o", 2048, 32, gemmShape{1, 4}},
		{"1b-lmhead", 128256, 32, gemmShape{4, 1}},
		{"tiny", 40, 4, gemmShape{1, 1}},
		{"short-k", 2048, 12, gemmShape{1, 1}},
		// 313 tiles: 4 or 3 warpgroups would leave SMs idle, 2 a second wave of 25 blocks.
		{"mid-rows", 20000, 64, gemmShape{1, 1}},
		// Qwen2.5-7B's gate/up, 592 tiles: 148 blocks of 4 would pass one wave by 16, 198 of 3 by 66.
		{"q7b-gateup", 37888, 56, gemmShape{2, 1}},
	} {
		if got := planGemm(c.n, c.chunks, 132); got != c.want {
			t.Errorf("%s: planGemm(%d, %d, 132) = %+v, want %+v", c.name, c.n, c.chunks, got, c.want)
		}
	}
}

// TestPlanSwiGLU checks the gate/up product's shape: k whole, warpgroups rounded up to an even count.
func TestPlanSwiGLU(t *testing.T) {
	for _, c := range []struct{ in, want gemmShape }{
		{gemmShape{1, 1}, gemmShape{2, 1}}, {gemmShape{1, 4}, gemmShape{2, 1}}, {gemmShape{2, 1}, gemmShape{2, 1}},
		{gemmShape{3, 1}, gemmShape{4, 1}}, {gemmShape{4, 2}, gemmShape{4, 1}},
	} {
		if got := planSwiGLU(c.in); got != c.want {
			t.Errorf("planSwiGLU(%+v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// TestGemmStages checks the ring's depth: as deep as shared memory allows up to 8 slots (or the cap),
// none when two slots do not fit.
func TestGemmStages(t *testing.T) {
	const h100 = 232448 // bytes of shared memory a block may ask for
	for _, c := range []struct {
		wg, nt, max, share, want int
	}{
		{4, 4, 0, h100, 5},  // slots of (256 + 64) rows × 128 bytes
		{1, 4, 0, h100, 8},  // capped at 8
		{1, 1, 3, h100, 3},  // the tuning's cap
		{4, 4, 0, 60000, 0}, // not even two slots
	} {
		if got := gemmStages(c.wg, c.nt, c.max, c.share); got != c.want {
			t.Errorf("gemmStages(%d, %d, %d, %d) = %d, want %d", c.wg, c.nt, c.max, c.share, got, c.want)
		}
	}
	// Every launch shape fits the H100: the ring with its barriers and alignment, and a k split's partial
	// tiles in the ring.
	for wg := 1; wg <= gemmMaxGroups; wg++ {
		for nt := 1; nt <= 4; nt++ {
			s := gemmStages(wg, nt, 0, h100)
			if slot := gemmSlot(wg, nt); s < 2 || 1024+s*(slot+16) > h100 || s*slot < (128*wg+32)*16*(2*nt+1) {
				t.Errorf("gemmStages(%d, %d) = %d slots of %d bytes", wg, nt, s, slot)
			}
		}
	}
}

// TestPlanFP8Gemm: Llama-3-8B's FP8 products at 16 rows on the H200's 132 SMs take the shapes
// BenchmarkCUDAFP8GemmShapes found fastest (q/k/v k split in two, O and down in four, gate/up whole);
// the split stops at the cluster's 8 blocks and where a split would walk fewer than gemmMinSteps
// chunks.
func TestPlanFP8Gemm(t *testing.T) {
	for _, tc := range []struct {
		name           string
		n, chunks, sms int
		want           gemmShape
	}{
		{"qkv", 6144, 32, 132, gemmShape{1, 2}},
		{"o", 4096, 32, 132, gemmShape{1, 4}},
		{"gateup", 28672, 32, 132, gemmShape{1, 1}},
		{"down", 4096, 112, 132, gemmShape{1, 4}},
		{"one tile, long k", 64, 1024, 132, gemmShape{1, 8}},
		{"one tile, short k", 64, 15, 132, gemmShape{1, 1}},
		{"one tile, k for two", 64, 20, 132, gemmShape{1, 2}},
		{"one tile, k for four", 64, 32, 132, gemmShape{1, 4}},
	} {
		if got := planFP8Gemm(tc.n, tc.chunks, tc.sms); got != tc.want {
			t.Errorf("%s: planFP8Gemm(%d, %d, %d) = %+v, want %+v", tc.name, tc.n, tc.chunks, tc.sms, got, tc.want)
		}
	}
}

// TestPlanGemv checks the one-token-tile launch shapes on an H200 (132 SMs, 16 warps a block) for the
// decode products of Llama-3-8B and Llama-3.2-1B: every split at most gemvMaxKS, the O product's rule
// (Plan 1) shrunk into one wave, a short k, a tiny product, and MaxKS's override.
func TestPlanGemv(t *testing.T) {
	for _, c := range []struct {
		name           string
		tiles, kBlocks int
		tune           gemvTuning
		want           gemvShape
	}{
		{"8b-gateup", 28672 / 16, 64, gemvTuning{}, gemvShape{1, 8}},
		{"8b-lmhead", 128256 / 16, 64, gemvTuning{}, gemvShape{1, 8}},
		{"8b-qkv", 6144 / 16, 64, gemvTuning{}, gemvShape{1, 8}},
		{"8b-o", 4096 / 16, 64, gemvTuning{Plan: 1}, gemvShape{1, 8}},
		{"8b-down", 4096 / 16, 224, gemvTuning{}, gemvShape{1, 8}},
		// 1024 tiles × 8 warps pass one wave and stay within four: shrunk into one.
		{"1b-gateup", 16384 / 16, 32, gemvTuning{}, gemvShape{1, 2}},
		{"short-k", 100, 12, gemvTuning{}, gemvShape{1, 2}},
		{"tiny", 3, 1, gemvTuning{}, gemvShape{1, 1}},
		{"8b-gateup MaxKS 16", 28672 / 16, 64, gemvTuning{MaxKS: 16}, gemvShape{1, 16}},
		// 384 tiles × 16 warps pass one wave of 132 × 24 warps: back to 8.
		{"8b-qkv MaxKS 16", 6144 / 16, 64, gemvTuning{MaxKS: 16}, gemvShape{1, 8}},
		{"forced", 1792, 64, gemvTuning{RB: 2, KS: 4}, gemvShape{2, 4}},
	} {
		if got := planGemv(c.tiles, c.kBlocks, 132, 16, c.tune); got != c.want {
			t.Errorf("%s: planGemv(%d, %d, 132, 16, %+v) = %+v, want %+v", c.name, c.tiles, c.kBlocks, c.tune, got, c.want)
		}
	}
}
