//go:build cuda

package attention

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
)

// The launcher of prefill.cu, the GPU twin of Attend's prefill path: causal attention of any query rows
// (prefill chunks, and decode rows too) over the paged cache. Its kernels are compiled into the model's
// fat binary (../model/kernels), not attention.fatbin, so the caller hands LoadCUDAPrefill the module
// that holds them.

// PrefillKernel names one of the prefill attention kernels. The zero value, PrefillAuto, is the fastest
// one loaded for the call's shape (CUDAPrefill.Kernel).
type PrefillKernel int

const (
	// PrefillAuto picks CUDAPrefill.Kernel's choice.
	PrefillAuto PrefillKernel = iota
	// PrefillFMA is prefill.cu's FMA kernel: every dtype and head size, the reference on the GPU.
	PrefillFMA
	// PrefillMMA is prefill.cu's tensor-core kernel (mma.sync): 16-bit dtypes, head sizes 64, 128, 256,
	// over 16-bit or FP8 pages.
	PrefillMMA
	// PrefillSM90 is prefill_sm90.cu's Hopper kernel (wgmma): 16-bit dtypes, head sizes 64, 128 and 256,
	// over 16-bit or FP8 pages, on sm_90 where the driver compiles its PTX.
	PrefillSM90
)

// String is the kernel's name in test and benchmark names.
func (k PrefillKernel) String() string {
	switch k {
	case PrefillFMA:
		return "fma"
	case PrefillMMA:
		return "mma"
	case PrefillSM90:
		return "sm90"
	}
	return "auto"
}

// Vectors is the query vectors per work item the kernel's items are cut for (PrefillItems).
func (k PrefillKernel) Vectors() int {
	if k == PrefillSM90 {
		return PrefillSM90Vectors
	}
	return prefillVectors
}

// prefillHeadDims are the head sizes prefill.cu is instantiated for.
var prefillHeadDims = []int{8, 16, 32, 64, 128, 256}

// prefillParams mirrors struct PrefillParams in prefill.cu, field for field.
type prefillParams struct {
	Out, Q, KCache, VCache, BlockTables, Positions, Items cuda.DevicePtr
	Scale                                                 float32
	NumHeads, NumKVHeads, MaxBlocks, BlockSize            int32
	Group, HeadsPerItem                                   int32
	Window                                                int32
	KScale, VScale                                        float32
}

// prefillSM90Params mirrors PhArgs<PrefillParams> in prefill_sm90.cu: the caches' tensor maps at offsets 0
// and 128, then the call's parameters (the kernel's parameter is 384 bytes, 64-byte aligned).
type prefillSM90Params struct {
	KMap, VMap cuda.TensorMap
	P          prefillParams
	_          [32]byte
}

var _ [384]byte = [unsafe.Sizeof(prefillSM90Params{})]byte{}

// prefillMMAHeadDims are the head sizes of the tensor-core kernels (PrefillAttentionMMA_<dtype>_d<D> and,
// over FP8 pages, PrefillAttentionMMA_<dtype>_e4m3_d<D>; 16-bit dtypes), which Attend uses where they exist.
var prefillMMAHeadDims = []int{64, 128, 256}

// prefillSM90HeadDims are the head sizes of the Hopper kernels (PrefillAttentionSM90_<dtype>_d<D> and,
// over FP8 pages, PrefillAttentionSM90_<dtype>_e4m3_d<D>).
var prefillSM90HeadDims = []int{64, 128, 256}

// prefillSM90Threads is the Hopper kernel's block: a producer and two consumer warpgroups.
const prefillSM90Threads = 384

// CUDAPrefill holds the prefill attention kernels loaded from a module.
type CUDAPrefill struct {
	kernels map[string]prefillFn // by "<dtype>_d<head_dim>", and "<dtype>_e4m3_d<head_dim>" over FP8 pages
	mma     map[string]prefillFn // the tensor-core kernels, keyed as kernels
	sm90    map[string]prefillFn // the Hopper kernels (LoadSM90), keyed as kernels
	dev     *cuda.Device         // the Hopper kernels' (their caches' tensor maps)
	maps    kvTensorMaps
}

// prefillFn is a loaded prefill kernel and its dynamic shared memory.
type prefillFn struct {
	fn     *cuda.Function
	shared int
}

// loadPrefillFn looks up kernel name in mod with its shared memory (the __device__ int <name>_smem that
// the .cu file computes from its layout) and raises its limit to it; ok is false, with no error, when
// the device allows less (sharedOptin).
func loadPrefillFn(mod *cuda.Module, name string, sharedOptin int) (_ prefillFn, ok bool, err error) {
	fn, err := mod.Function(name)
	if err != nil {
		return prefillFn{}, false, fmt.Errorf("attention: prefill: %w", err)
	}
	shared, err := mod.Int32(name + "_smem")
	if err != nil {
		return prefillFn{}, false, fmt.Errorf("attention: prefill: shared memory of %s: %w", name, err)
	}
	if int(shared) > sharedOptin {
		return prefillFn{}, false, nil
	}
	if err := fn.SetMaxDynamicShared(int(shared)); err != nil {
		return prefillFn{}, false, fmt.Errorf("attention: prefill: %w", err)
	}
	return prefillFn{fn: fn, shared: int(shared)}, true, nil
}

// LoadCUDAPrefill looks up the PrefillAttention_<dtype>_d<head_dim> kernels in mod (the model's fat binary)
// and raises their shared-memory limits to what they need. A head size whose kernel needs more shared
// memory than the device allows (sharedOptin, cuda.Info.SharedPerBlockOptin) is left out: Attend
// reports it as ErrUnsupported.
func LoadCUDAPrefill(mod *cuda.Module, sharedOptin int) (*CUDAPrefill, error) {
	p := &CUDAPrefill{kernels: map[string]prefillFn{}, mma: map[string]prefillFn{}, sm90: map[string]prefillFn{}}
	load := func(into map[string]prefillFn, prefix, key string) error {
		k, ok, err := loadPrefillFn(mod, prefix+key, sharedOptin)
		if ok {
			into[key] = k
		}
		return err
	}
	for _, tn := range []string{"bf16", "f16"} {
		for _, kv := range []string{"", "_e4m3"} {
			for _, d := range prefillMMAHeadDims {
				if err := load(p.mma, "PrefillAttentionMMA_", fmt.Sprintf("%s%s_d%d", tn, kv, d)); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, dt := range []cuda.DataType{cuda.Float32, cuda.BFloat16, cuda.Float16} {
		tn, _ := prefillTypeName(dt)
		for _, kv := range []string{"", "_e4m3"} {
			for _, d := range prefillHeadDims {
				if err := load(p.kernels, "PrefillAttention_", fmt.Sprintf("%s%s_d%d", tn, kv, d)); err != nil {
					return nil, err
				}
			}
		}
	}
	return p, nil
}

// LoadSM90 adds the Hopper kernels (PrefillAttentionSM90_<dtype>[_e4m3]_d<head_dim>) from mod, the
// module of prefill_sm90.cu's PTX (model/kernels.PrefillSM90PTX), which only an sm_90 GPU loads. Kernel
// then prefers them where they serve.
func (p *CUDAPrefill) LoadSM90(mod *cuda.Module, sharedOptin int) error {
	found := map[string]prefillFn{}
	for _, tn := range []string{"bf16", "f16"} {
		for _, kv := range []string{"", "_e4m3"} {
			for _, d := range prefillSM90HeadDims {
				key := fmt.Sprintf("%s%s_d%d", tn, kv, d)
				k, ok, err := loadPrefillFn(mod, "PrefillAttentionSM90_"+key, sharedOptin)
				if err != nil {
					return err
				}
				if ok {
					found[key] = k
				}
			}
		}
	}
	p.sm90, p.dev = found, mod.Device()
	return nil
}

// Kernel is the kernel a call of this shape (pages of blockSize tokens) runs under PrefillAuto: the Hopper
// kernel where it is loaded for it, else the tensor-core kernel, else the FMA kernel. Its Vectors are what
// the call's work items must be cut for.
func (p *CUDAPrefill) Kernel(headDim, blockSize int, dtype cuda.DataType, kvFP8 bool) PrefillKernel {
	ks := p.Kernels(headDim, blockSize, dtype, kvFP8)
	if len(ks) == 0 {
		return PrefillFMA
	}
	return ks[0]
}

// Kernels lists the kernels loaded for a call of this shape, fastest first (tests run each); none when
// Attend has no kernel for it.
func (p *CUDAPrefill) Kernels(headDim, blockSize int, dtype cuda.DataType, kvFP8 bool) []PrefillKernel {
	tn, ok := prefillTypeName(dtype)
	if !ok {
		return nil
	}
	kv := ""
	if kvFP8 {
		kv = "_e4m3"
	}
	var ks []PrefillKernel
	if _, ok := p.sm90[fmt.Sprintf("%s%s_d%d", tn, kv, headDim)]; ok && sm90Pages(blockSize) {
		ks = append(ks, PrefillSM90)
	}
	if _, ok := p.mma[fmt.Sprintf("%s%s_d%d", tn, kv, headDim)]; ok {
		ks = append(ks, PrefillMMA)
	}
	if _, ok := p.kernels[fmt.Sprintf("%s%s_d%d", tn, kv, headDim)]; ok {
		ks = append(ks, PrefillFMA)
	}
	return ks
}

// prefillTypeName is the dtype's suffix in prefill.cu's entry points.
func prefillTypeName(t cuda.DataType) (string, bool) {
	switch t {
	case cuda.Float32:
		return "f32", true
	case cuda.BFloat16:
		return "bf16", true
	case cuda.Float16:
		return "f16", true
	}
	return "", false
}

// CUDAPrefillArgs describes one prefill-attention call on device memory; the cache layout is the CPU
// Cache's.
type CUDAPrefillArgs struct {
	// Out and Q are [rows][NumHeads·HeadDim] of DType (Q rotated); the G = NumHeads/NumKVHeads query heads
	// of KV head h are heads h·G … h·G+G−1.
	Out, Q cuda.DevicePtr
	// KCache and VCache are [num_blocks][BlockSize][NumKVHeads][HeadDim] of DType, or of e4m3 codes with
	// KVFP8, holding every key the rows attend to (this step's included).
	KCache, VCache cuda.DevicePtr
	// KVFP8: the pages hold OCP FP8 e4m3 codes, a K code c read as float32(c) · KScale and a V code as
	// float32(c) · VScale (one float32 product: the CPU Cache's values exactly); Q and Out stay of DType.
	// Such a call runs PrefillAttentionSM90_<dtype>_e4m3_d<D> on Hopper or PrefillAttentionMMA_<dtype>_e4m3_d<D>
	// (16-bit dtypes, head sizes 64, 128, 256: the tile's codes converted to DType, exactly), or the FMA
	// kernel PrefillAttention_<dtype>_e4m3_d<D>.
	KVFP8          bool
	KScale, VScale float32
	// BlockTables is int32 [sequences][MaxBlocks]; Positions int32 [rows], each row's position in its
	// sequence (a row attends to keys 0 … its position).
	BlockTables, Positions cuda.DevicePtr
	// Items is int32 [NumItems][4] as PrefillItems lays them out for the same group.
	Items                                    cuda.DevicePtr
	NumItems                                 int
	MaxBlocks, NumHeads, NumKVHeads, HeadDim int
	BlockSize                                int
	DType                                    cuda.DataType
	// Scale multiplies q·k before the softmax (usually 1/√HeadDim).
	Scale float32
	// Window, when positive, is a sliding window: the row at position p attends to keys [p−Window+1, p]
	// only; the pages before its first row's window are never read (Batch.Window).
	Window int
	// Kernel forces one kernel (tests compare them); PrefillAuto runs Kernel's choice. Items must be cut
	// for its Vectors.
	Kernel PrefillKernel
}

// Attend queues the prefill kernel on stream s: grid (NumItems, NumKVHeads); a.Kernel, or under
// PrefillAuto the Hopper kernel (prefillSM90Threads) where it is loaded for the shape, else the tensor-core kernel
// for 16-bit dtypes at head sizes 64, 128 and 256 over 16-bit or FP8 pages, else the FMA kernel (128
// threads each).
func (p *CUDAPrefill) Attend(s *cuda.Stream, a *CUDAPrefillArgs) error {
	tn, ok := prefillTypeName(a.DType)
	if !ok {
		return fmt.Errorf("%w: prefill dtype %d", ErrUnsupported, a.DType)
	}
	kv := ""
	if a.KVFP8 {
		kv = "_e4m3"
		if !(a.KScale > 0 && a.VScale > 0 && a.KScale <= math.MaxFloat32 && a.VScale <= math.MaxFloat32) {
			return fmt.Errorf("attention: prefill: FP8 KV scales %v, %v: want finite and positive", a.KScale, a.VScale)
		}
	}
	if _, ok := p.kernels[fmt.Sprintf("%s%s_d%d", tn, kv, a.HeadDim)]; !ok {
		return fmt.Errorf("%w: prefill head_dim %d (%v)", ErrUnsupported, a.HeadDim, prefillHeadDims)
	}
	if !(a.Scale > 0 && a.Scale <= math.MaxFloat32) {
		return fmt.Errorf("attention: prefill: scale %v: want finite and positive", a.Scale)
	}
	if a.NumKVHeads <= 0 || a.NumHeads%a.NumKVHeads != 0 || a.BlockSize <= 0 {
		return fmt.Errorf("attention: prefill: %d query heads for %d KV heads, block size %d", a.NumHeads,
			a.NumKVHeads, a.BlockSize)
	}
	kernel := a.Kernel
	if kernel == PrefillAuto {
		kernel = p.Kernel(a.HeadDim, a.BlockSize, a.DType, a.KVFP8)
	}
	var k prefillFn
	threads := 128
	switch kernel {
	case PrefillSM90:
		k, threads = p.sm90[fmt.Sprintf("%s%s_d%d", tn, kv, a.HeadDim)], prefillSM90Threads
	case PrefillMMA:
		k = p.mma[fmt.Sprintf("%s%s_d%d", tn, kv, a.HeadDim)]
	case PrefillFMA:
		k = p.kernels[fmt.Sprintf("%s%s_d%d", tn, kv, a.HeadDim)]
	}
	fn, shared := k.fn, k.shared
	if fn != nil && kernel == PrefillSM90 && !sm90Pages(a.BlockSize) { // Kernel does not choose it then
		return fmt.Errorf("%w: prefill kernel sm90 with pages of %d tokens at head_dim %d", ErrUnsupported, a.BlockSize, a.HeadDim)
	}
	if fn == nil {
		return fmt.Errorf("%w: prefill kernel %v for %s%s head_dim %d", ErrUnsupported, kernel, tn, kv, a.HeadDim)
	}
	if a.NumItems == 0 {
		return nil
	}
	group := a.NumHeads / a.NumKVHeads
	params := prefillParams{
		Out: a.Out, Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables,
		Positions: a.Positions, Items: a.Items,
		Scale:    a.Scale,
		NumHeads: int32(a.NumHeads), NumKVHeads: int32(a.NumKVHeads), MaxBlocks: int32(a.MaxBlocks),
		BlockSize: int32(a.BlockSize), Group: int32(group), HeadsPerItem: int32(PrefillHeadsPerItem(group)),
		Window: int32(max(0, a.Window)),
		KScale: a.KScale, VScale: a.VScale,
	}
	grid := cuda.Dim3{X: a.NumItems, Y: a.NumKVHeads}
	var err error
	if kernel == PrefillSM90 {
		sp := prefillSM90Params{P: params}
		if sp.KMap, sp.VMap, err = p.maps.pair(p.dev, a.DType, a.KVFP8, a.KCache, a.VCache, a.HeadDim, a.NumKVHeads, a.BlockSize); err == nil {
			err = cuda.Launch(fn, grid, cuda.Dim3{X: threads}, shared, s, &sp)
		}
	} else {
		err = cuda.Launch(fn, grid, cuda.Dim3{X: threads}, shared, s, &params)
	}
	if err != nil {
		return fmt.Errorf("attention: prefill: %w", err)
	}
	return nil
}
