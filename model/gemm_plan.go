package model

// The launch shapes of the skinny product (kernels/gemv.cu, launched by gemv_cuda.go) and the skinny GEMM
// (kernels/gemm_sm90.cu, launched by gemm_cuda.go): pure functions of the product's shape and the
// device's size, here without the cuda build tag so that CI tests them. Which kernel serves a product is
// planMatMul's (step_plan.go).

// gemmChunk is the k elements of one ring slot (in must be a multiple of it); gemmPitch a tile row's
// bytes; gemmMaxCluster the largest k split (the portable cluster size); gemmMaxGroups the most consumer
// warpgroups a block (64 weight rows each; a tile copy has at most 256 rows).
const (
	gemmChunk      = 64
	gemmPitch      = 2 * gemmChunk
	gemmMaxCluster = 8
	gemmMaxGroups  = 4
)

// fp8GemmChunk is the k elements (e4m3 codes) of one ring slot of the skinny GEMM's FP8 kernel: a tile
// row of gemmPitch bytes.
const fp8GemmChunk = gemmPitch

// gemmSlot is a ring slot's bytes for wg consumer warpgroups and nt token tiles.
func gemmSlot(wg, nt int) int { return (64*wg + 16*nt) * gemmPitch }

// gemmStages is the ring's slots (at most max, 8 when max is 0) for wg consumer warpgroups and nt token
// tiles within maxShare bytes of shared memory (a slot also takes two 8-byte barriers; 1024 bytes go to
// aligning the ring), or 0 when two do not fit or the partial tiles of a k split ((128·wg+32) threads ×
// (2·nt+1) float4s) would not fit in them. That room also holds a block's output tile on its way out
// (16·nt tokens × (64·wg + 4) floats; with SwiGLU the act tile of 16-bit values, less).
func gemmStages(wg, nt, max, maxShare int) int {
	if max <= 0 {
		max = 8
	}
	slot := gemmSlot(wg, nt)
	s := min(max, (maxShare-1024)/(slot+16))
	if s < 2 || s*slot < (128*wg+32)*16*(2*nt+1) {
		return 0
	}
	return s
}

// gemmShape is the launch shape of one product: wg consumer warpgroups a block (64·wg weight rows), the k
// range split over a cluster of ks blocks.
type gemmShape struct{ wg, ks int }

// planGemm shapes a product of n rows and chunks k-chunks on sms SMs, from BenchmarkCUDAGemm's sweep on
// the H100 (docs/bench/gemm-h100.md): a product of at least two blocks of 64 rows an SM runs whole k with
// the most warpgroups a block that still gives 4/5 of the SMs a block, and not so many that its blocks
// pass one wave by less than a second (a block a SM: the few past the first wave would run alone, as
// long as the first; narrower blocks cut that tail, Qwen2.5-7B's gate/up product); a smaller one runs
// blocks of one warpgroup with k split so that the blocks about fill the SMs (each split walking at
// least gemmMinSteps chunks).
func planGemm(n, chunks, sms int) gemmShape {
	tiles := (n + 63) / 64
	if tiles >= 2*sms {
		wg := gemmMaxGroups
		for wg > 1 && tiles/wg < sms*4/5 {
			wg--
		}
		for wg > 1 && (tiles+wg-1)/wg > sms && (tiles+wg-1)/wg < 2*sms {
			wg--
		}
		return gemmShape{wg: wg, ks: 1}
	}
	ks := max(1, min(gemmMaxCluster, (sms+tiles/2)/tiles))
	for ks > 1 && chunks/ks < gemmMinSteps {
		ks--
	}
	return gemmShape{wg: 1, ks: ks}
}

// planSwiGLU shapes a gate/up product with the SwiGLU epilogue from its plain plan: k whole (the
// epilogue needs whole sums) and an even number of warpgroups a block. Any count serves the epilogue; the
// even ones are the shapes measured: blocks of one at Llama-3.2-1B's size (256 of them, not one wave at
// 64 rows) made its batch-64 step slower on the H100 (docs/bench/e2e-h100.md).
func planSwiGLU(plan gemmShape) gemmShape {
	return gemmShape{wg: min(gemmMaxGroups, (plan.wg+1)/2*2), ks: 1}
}

// planFP8Gemm shapes an FP8 product of n rows and chunks k-chunks (of fp8GemmChunk codes) on sms SMs, at
// up to fp8GemmMaxRows token rows: blocks of one warpgroup (64 weight rows; small blocks let several
// share an SM), k split in two, four or eight until the blocks outnumber the SMs (each split walking at
// least gemmMinSteps chunks). The fastest shapes of BenchmarkCUDAFP8GemmShapes's sweep for Llama-3-8B's
// products at 16 rows on the H200, or within 7% of them (docs/bench/fp8-h200.md).
func planFP8Gemm(n, chunks, sms int) gemmShape {
	tiles := (n + 63) / 64
	ks := 1
	for ks < gemmMaxCluster && tiles*ks < sms && chunks/(2*ks) >= gemmMinSteps {
		ks *= 2
	}
	return gemmShape{wg: 1, ks: ks}
}

// fp8GemmStages is the ring's slots of an FP8 product's blocks: four, so that a few blocks share an SM
// (BenchmarkCUDAFP8GemmShapes).
const fp8GemmStages = 4

// gemmMinSteps is the fewest k chunks a block of a split product walks.
const gemmMinSteps = 8

// gemmBlocks is how many blocks (along the output rows) a plain out-row product of launch shape plan has
// (one partial maximum a token and block with the argmax epilogue).
func gemmBlocks(out int, plan gemmShape) int {
	return (out + 64*plan.wg - 1) / (64 * plan.wg)
}

// gemvTileIndex maps a token count to the kernel variant: 0 for ≤ 8 tokens, 1 for ≤ 16, 2 for ≤ 32, 3
// for ≤ 64.
func gemvTileIndex(rows int) int {
	switch {
	case rows <= 8:
		return 0
	case rows <= 16:
		return 1
	case rows <= 32:
		return 2
	}
	return 3
}

// gemvShape is the launch shape of one product: rb row tiles per block, ks warps per tile along k.
type gemvShape struct{ rb, ks int }

// gemvWaveWarps is how many of the kernel's warps one SM holds at once (80 registers a thread for one
// token tile: 25 warps; a little less for the larger tiles).
const gemvWaveWarps = 24

// gemvMaxKS is the largest k split planGemv gives a row tile: splits of 16 (which gate/up and the LM head
// of the 8B models got) ran their decode steps slightly slower on the H200 and gate/up alone slower
// (docs/bench/gemm-h200.md).
const gemvMaxKS = 8

// planGemv shapes a launch over tiles row tiles and kBlocks blocks of 64 along k on sms SMs, at most
// maxWarps warps a block: one row tile a block (rb = 1), split along k over ks warps, ks a power of two
// up to gemvMaxKS (t.MaxKS when positive) that leaves each warp at least 4 k-blocks. When that grid is
// between one and four waves of the GPU, ks shrinks until it fits in one (a second, partial wave costs
// more than the shorter k-loops win); beyond four waves the tail is small. BenchmarkCUDAGemv's sweep
// found it near the best shape at one to eight tokens for every decode product of Llama-3.2-1B and
// Llama-3-8B (docs/bench/e2e-h100.md).
func planGemv(tiles, kBlocks, sms, maxWarps int, t gemvTuning) gemvShape {
	if t.RB > 0 && t.KS > 0 && t.RB*t.KS <= maxWarps {
		return gemvShape{rb: t.RB, ks: min(t.KS, max(1, kBlocks))}
	}
	perWarp := 4
	if t.Plan > 0 {
		perWarp = 2
	}
	maxKS := gemvMaxKS
	if t.MaxKS > 0 {
		maxKS = t.MaxKS
	}
	ks := 1
	for ks < maxKS && ks*2 <= maxWarps && ks*2*perWarp <= kBlocks {
		ks *= 2
	}
	wave := sms * gemvWaveWarps
	if t.Plan < 2 && tiles*ks > wave && tiles*ks < 4*wave {
		for ks > 1 && tiles*ks > wave {
			ks /= 2
		}
	}
	return gemvShape{rb: 1, ks: ks}
}
