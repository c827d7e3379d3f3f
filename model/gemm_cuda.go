//go:build cuda

package model

import (
	"fmt"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/model/kernels"
)

// The skinny GEMM of kernels/gemm_sm90.cu: MatMul for steps of more token rows than the skinny product
// serves (gemvTuning.MaxTokens) up to gemvMaxTokens, with 16-bit weights, on compute capability 9.0. The
// Hopper copy engine streams tiles of the weights and activations (tensor maps) into a ring in shared
// memory; the warps that multiply never load from global memory.

// gemmParams mirrors GemmParams in kernels/gemm_sm90.cu field for field (the tensor maps at offsets 0 and
// 128; the kernel's parameter is 320 bytes, 64-byte aligned). SX, SW and Bias serve FP8 weights only.
type gemmParams struct {
	WMap, XMap   cuda.TensorMap
	Y, Act       cuda.DevicePtr
	M, N, K      int32
	Accumulate   int32
	Stages       int32
	Flags        int32
	SX, SW, Bias cuda.DevicePtr
}

var _ [320]byte = [unsafe.Sizeof(gemmParams{})]byte{} // the kernel's parameter size

// gemmParams.Flags' bits for the SwiGLU and argmax epilogues.
const (
	gemmSwiGLU = 16
	gemmArgmax = 32
)

// gemmKernels are the kernel's entry points for one compute dtype, by 16-token tiles (1 … 4).
type gemmKernels struct {
	mod      *cuda.Module
	byTiles  [4]*cuda.Function
	maxShare int // the shared memory a block may have
	// swiglu: the driver encodes the SwiGLU epilogue's weight map (swigluMap), whose strides do not nest
	// as cuTensorMapEncodeTiled's documentation describes them; without it gate/up products stay on
	// cuBLAS and the SwiGLU kernel.
	swiglu bool
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
	probe, err := dev.Alloc(4096)
	if err != nil {
		mod.Unload()
		return nil, err
	}
	_, err = swigluMap(dev, cuda.BFloat16, probe, 32, 64, 1)
	k.swiglu = err == nil
	dev.Free(probe)
	return k, nil
}

// swigluMap encodes the tensor map of a gate/up product's weights w (out rows of in, gate rows then up
// rows) for the SwiGLU epilogue's blocks of wg warpgroups: dimensions (k, 8 rows, gate or up half, group
// of 8 gate rows), so that one box of 64·wg rows interleaves each group's 8 gate rows with their 8 up rows
// (kernels/gemm_sm90.cu). The intermediate size out/2 must be a multiple of 8.
func swigluMap(dev *cuda.Device, dt cuda.DataType, w cuda.DevicePtr, out, in, wg int) (cuda.TensorMap, error) {
	inter := out / 2
	if !swigluFits(out) {
		return cuda.TensorMap{}, fmt.Errorf("cuda backend: skinny GEMM: SwiGLU of an intermediate size %d (a multiple of 8 is needed)", inter)
	}
	return dev.EncodeTiled(dt, w, []int64{int64(in), 8, 2, int64(inter / 8)},
		[]int64{2 * int64(in), 2 * int64(in) * int64(inter), 16 * int64(in)}, []int{gemmChunk, 8, 2, 4 * wg})
}

// gemmArgmaxBlocks is how many blocks the argmax epilogue's launch of an out × in product has: one
// partial maximum per token and block (launchGemm with argmax).
func (b *cudaBackend) gemmArgmaxBlocks(out, in int) int {
	f := b.facts()
	return gemmBlocks(out, f.gemmPlan(out, in))
}

// launchGemm queues y[rows][out] = x · wᵀ (y += x · wᵀ when accumulate), or, when act is not nil, the
// gate/up product with its SwiGLU: act[rows][out/2] = silu(gate) · up in the compute dtype (y untouched;
// swigluFits(out)), or, with argmax, each token's largest entry of each block's rows (the first on ties;
// NaN never wins) into b.argValues and its row into b.argIndices, [rows][gemmBlocks] (y untouched).
func (b *cudaBackend) launchGemm(y, x *cudaTensor, w *cudaWeight, out, in, rows int, accumulate bool, act *cudaTensor,
	argmax bool) error {
	nt := (rows + 15) / 16
	fn := b.gemm.byTiles[nt-1]
	f := b.facts()
	plan, flags := f.gemmPlan(out, in), b.tune.GemmFlags
	yPtr, actPtr := y.ptr, cuda.DevicePtr(0)
	switch {
	case act != nil: // k whole
		if !f.gemmForced() {
			plan = planSwiGLU(plan)
		}
		plan.ks, flags, actPtr = 1, flags|gemmSwiGLU, act.ptr
	case argmax: // k whole (fused asks for it only where the plan has it so)
		plan.ks, flags, accumulate = 1, flags|gemmArgmax, false
		yPtr, actPtr = b.argValues, b.argIndices
	}
	stages := gemmStages(plan.wg, nt, b.tune.GemmStages, b.gemm.maxShare)
	if stages == 0 {
		return fmt.Errorf("cuda backend: skinny GEMM: %d warpgroups × %d token tiles do not fit %d bytes of shared memory",
			plan.wg, nt, b.gemm.maxShare)
	}
	var wmap cuda.TensorMap
	var err error
	if act != nil {
		wmap, err = swigluMap(b.dev, b.dtype, w.ptr, out, in, plan.wg)
	} else {
		wmap, err = b.dev.EncodeTiled(b.dtype, w.ptr, []int64{int64(in), int64(out)}, []int64{2 * int64(in)}, []int{gemmChunk, 64 * plan.wg})
	}
	if err != nil {
		return err
	}
	xmap, err := b.dev.EncodeTiled(b.dtype, x.ptr, []int64{int64(in), int64(rows)}, []int64{2 * int64(in)}, []int{gemmChunk, 16 * nt})
	if err != nil {
		return err
	}
	p := gemmParams{WMap: wmap, XMap: xmap, Y: yPtr, Act: actPtr, M: int32(rows), N: int32(out), K: int32(in),
		Stages: int32(stages), Flags: int32(flags)}
	if accumulate {
		p.Accumulate = 1
	}
	// A SwiGLU block's 64·wg rows are 32·wg gate rows and their up rows: out/2 gate rows take as many
	// blocks as out plain rows.
	grid := cuda.Dim3{X: gemmBlocks(out, plan), Y: plan.ks}
	return cuda.LaunchCluster(fn, grid, cuda.Dim3{X: 128*plan.wg + 32}, cuda.Dim3{X: 1, Y: plan.ks},
		1024+stages*(gemmSlot(plan.wg, nt)+16), b.stream, b.usePDL(), &p)
}
