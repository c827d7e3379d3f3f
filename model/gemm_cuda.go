//go:build cuda

package model

import (
	"fmt"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/model/kernels"
)

// The skinny GEMM of kernels/gemm_sm90.cu: MatMul for steps of more token rows than the skinny product
// serves (gemvTuning.MaxTokens) up to gemvMaxTokens, with 16-bit weights, on compute capability 9.0. The
// Hopper copy engine streams tiles of the weights and activations (tensor maps) into a ring in shared
// memory; the warps that multiply never load from global memory.

// gemmParams mirrors GemmParams in kernels/gemm_sm90.cu field for field (the tensor maps at offsets 0 and
// 128; the kernel's parameter is 320 bytes, 64-byte aligned).
type gemmParams struct {
	WMap, XMap cuda.TensorMap
	Y          cuda.DevicePtr
	M, N, K    int32
	Accumulate int32
	Stages     int32
	Flags      int32
	_          [8]int32
}

// gemmChunk is the k elements of one ring slot (in must be a multiple of it); gemmPitch a tile row's
// bytes; gemmMaxCluster the largest k split (the portable cluster size); gemmMaxGroups the most consumer
// warpgroups a block (64 weight rows each; a tile copy has at most 256 rows).
const (
	gemmChunk      = 64
	gemmPitch      = 2 * gemmChunk
	gemmMaxCluster = 8
	gemmMaxGroups  = 4
)

// gemmKernels are the kernel's entry points for one compute dtype, by 16-token tiles (1 … 4).
type gemmKernels struct {
	mod      *cuda.Module
	byTiles  [4]*cuda.Function
	maxShare int // the shared memory a block may have
}

// loadGemmKernels loads the kernels for dtype name tn (nil for float32, and below compute capability 9.0,
// where MatMul keeps cuBLAS).
func loadGemmKernels(dev *cuda.Device, tn string) (*gemmKernels, error) {
	info := dev.Info()
	if tn != "bf16" && tn != "f16" || info.Major != 9 || info.Minor != 0 {
		return nil, nil
	}
	mod, err := dev.LoadModule(kernels.GemmSM90PTX)
	if err != nil {
		return nil, fmt.Errorf("skinny GEMM: %w", err)
	}
	k := &gemmKernels{mod: mod, maxShare: info.SharedPerBlockOptin}
	for i := range k.byTiles {
		f, err := mod.Function(fmt.Sprintf("GemmBulk_%s_nt%d", tn, i+1))
		if err == nil {
			err = f.SetMaxDynamicShared(k.maxShare)
		}
		if err != nil {
			mod.Unload()
			return nil, err
		}
		k.byTiles[i] = f
	}
	return k, nil
}

// gemmSlot is a ring slot's bytes for wg consumer warpgroups and nt token tiles.
func gemmSlot(wg, nt int) int { return (64*wg + 16*nt) * gemmPitch }

// gemmStages is the ring's slots (at most max, 8 when max is 0) for wg consumer warpgroups and nt token
// tiles within maxShare bytes of shared memory (a slot also takes two 8-byte barriers; 1024 bytes go to
// aligning the ring), or 0 when two do not fit or the partial tiles of a k split ((128·wg+32) threads ×
// (2·nt+1) float4s) would not fit in them.
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
// the most warpgroups a block that still gives 4/5 of the SMs a block; a smaller one runs blocks of one
// warpgroup with k split so that the blocks about fill the SMs (each split walking at least gemmMinSteps
// chunks).
func planGemm(n, chunks, sms int, t gemvTuning) gemmShape {
	if t.GemmWarps > 0 && t.GemmKS > 0 {
		return gemmShape{wg: t.GemmWarps, ks: min(t.GemmKS, chunks)}
	}
	tiles := (n + 63) / 64
	if tiles >= 2*sms {
		wg := gemmMaxGroups
		for wg > 1 && tiles/wg < sms*4/5 {
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

// gemmMinSteps is the fewest k chunks a block of a split product walks.
const gemmMinSteps = 8

// gemmServes reports whether the skinny GEMM computes a product of rows token rows over in columns: more
// rows than the skinny product serves, at most gemvMaxTokens, in a multiple of gemmChunk, 16-bit weights
// on compute capability 9.0, and the GEMM switched on.
func (b *cudaBackend) gemmServes(rows, in int) bool {
	return b.gemm != nil && b.tune.Gemm && rows > min(b.tune.MaxTokens, gemvMaxTokens) && rows <= gemvMaxTokens &&
		in%gemmChunk == 0
}

// gemmTakes reports whether the skinny GEMM computes the product of rows rows, out × in weights (gemmServes,
// and out at least gemvTuning.GemmMinOut).
func (b *cudaBackend) gemmTakes(rows, out, in int) bool {
	return b.gemmServes(rows, in) && out >= b.tune.GemmMinOut
}

// launchGemm queues y[rows][out] = x · wᵀ (y += x · wᵀ when accumulate).
func (b *cudaBackend) launchGemm(y, x *cudaTensor, w *cudaWeight, out, in, rows int, accumulate bool) error {
	nt := (rows + 15) / 16
	fn := b.gemm.byTiles[nt-1]
	plan := planGemm(out, in/gemmChunk, b.dev.Info().NumSMs, b.tune)
	stages := gemmStages(plan.wg, nt, b.tune.GemmStages, b.gemm.maxShare)
	if stages == 0 {
		return fmt.Errorf("cuda backend: skinny GEMM: %d warpgroups × %d token tiles do not fit %d bytes of shared memory",
			plan.wg, nt, b.gemm.maxShare)
	}
	wmap, err := b.dev.EncodeTiled2D(b.dtype, w.ptr, int64(in), int64(out), 2*int64(in), gemmChunk, 64*plan.wg)
	if err != nil {
		return err
	}
	xmap, err := b.dev.EncodeTiled2D(b.dtype, x.ptr, int64(in), int64(rows), 2*int64(in), gemmChunk, 16*nt)
	if err != nil {
		return err
	}
	p := gemmParams{WMap: wmap, XMap: xmap, Y: y.ptr, M: int32(rows), N: int32(out), K: int32(in), Stages: int32(stages),
		Flags: int32(b.tune.GemmFlags)}
	if accumulate {
		p.Accumulate = 1
	}
	grid := cuda.Dim3{X: (out + 64*plan.wg - 1) / (64 * plan.wg), Y: plan.ks}
	return cuda.LaunchCluster(fn, grid, cuda.Dim3{X: 128*plan.wg + 32}, cuda.Dim3{X: 1, Y: plan.ks},
		1024+stages*(gemmSlot(plan.wg, nt)+16), b.stream, b.pdlNow(), &p)
}
