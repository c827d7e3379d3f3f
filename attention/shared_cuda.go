//go:build cuda

package attention

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/gollm/gollm/internal/cuda"
)

// CUDASharedArgs is the shared-prefix part of a decode call (DecodeShared): the layout DecideShared
// chose, and its arrays in device memory, uploaded by the caller (SharedLayout's fields, int32).
type CUDASharedArgs struct {
	Layout *SharedLayout
	Plan   SharedPlan
	// VirtualSeqs, SeqSlot, VirtualLens and SuffixLens hold the layout's arrays of the same names.
	VirtualSeqs, SeqSlot, VirtualLens, SuffixLens cuda.DevicePtr
	// VirtualTables and SuffixTables hold SharedLayout.VirtualTables and SuffixTables, rows of the call's
	// MaxBlocks.
	VirtualTables, SuffixTables cuda.DevicePtr
}

// sharedParams mirrors struct SharedParams in shared.cu, field for field.
type sharedParams struct {
	Out, Q, VQ                                     cuda.DevicePtr
	VirtualSeqs, SeqSlot, VirtualLens, SuffixLens  cuda.DevicePtr
	PreM, PreL, PreAcc, SufM, SufL, SufAcc         cuda.DevicePtr
	NumHeads, NumKVHeads, Group, Members, RowBytes int32
	PrefixPartitionTokens, PrefixPartitions        int32
	SuffixPartitionTokens, SuffixPartitions        int32
}

// sharedPrefixSM90Params mirrors PhArgs<DecodeParams> in prefill_sm90.cu: the caches' tensor maps at
// offsets 0 and 128, then the prefix pass's parameters (448 bytes, 64-byte aligned).
type sharedPrefixSM90Params struct {
	KMap, VMap cuda.TensorMap
	P          decodeParams
}

var _ [448]byte = [unsafe.Sizeof(sharedPrefixSM90Params{})]byte{}

// sharedGatherKernel, sharedMergeKernelName and sharedPrefixKernelName are shared.cu's entry points.
const sharedGatherKernel = "SharedGather"

func sharedMergeKernelName(dt DType, d int) string {
	return fmt.Sprintf("SharedMerge_%s_d%d", dt.name(), d)
}

func sharedPrefixKernelName(v SharedPrefixVariant, dt DType, d int) string {
	name, _ := v.kernel()
	return fmt.Sprintf("%s_%s_d%d", name, dt.name(), d)
}

// sharedPrefixE4M3Name is shared.cu's prefix kernel over FP8 pages (W32's program, its stages of
// codes): SharedPrefix_<dtype>_e4m3_d<D>.
func sharedPrefixE4M3Name(dt DType, d int) string {
	name, _ := SharedPrefixW32.kernel()
	return fmt.Sprintf("%s_%s_e4m3_d%d", name, dt.name(), d)
}

// sharedPrefixSM90Name is prefill_sm90.cu's Hopper prefix kernel (SharedPrefixSM90_<dtype>_d<D>), in
// that file's type names; "" for a dtype it has none of (float32).
func sharedPrefixSM90Name(dt DType, d int) string {
	tn, ok := map[DType]string{BF16: "bf16", FP16: "f16"}[dt]
	if !ok {
		return ""
	}
	return fmt.Sprintf("SharedPrefixSM90_%s_d%d", tn, d)
}

// LoadSM90 adds the Hopper prefix kernels (SharedPrefixSM90_<dtype>_d<64|128|256>) from mod, the module of
// prefill_sm90.cu's PTX (model/kernels.PrefillSM90PTX), which only an sm_90 GPU loads; DecodeShared then
// runs them for the prefix pass. A head size whose kernel needs more shared memory than the device allows
// is left out.
func (k *CUDAKernels) LoadSM90(mod *cuda.Module) error {
	optin := k.dev.Info().SharedPerBlockOptin
	for _, dt := range []DType{BF16, FP16} {
		for _, d := range prefillSM90HeadDims {
			name := sharedPrefixSM90Name(dt, d)
			pf, ok, err := loadPrefillFn(mod, name, optin)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			fn, shared := pf.fn, pf.shared
			kern := &cudaKernel{fn: fn, threads: prefillSM90Threads, shared: shared, tma: true}
			if kern.perSM, err = fn.Occupancy(kern.threads, shared); err != nil {
				return fmt.Errorf("attention: %w", err)
			}
			k.kernels[name] = kern
		}
	}
	return nil
}

// loadShared looks up shared.cu's kernels.
func (k *CUDAKernels) loadShared() error {
	names := []string{sharedGatherKernel}
	for _, dt := range []DType{BF16, FP16, FP32} {
		for _, d := range cudaHeadDims {
			if d == wideHeadDim && dt == FP32 {
				continue
			}
			names = append(names, sharedMergeKernelName(dt, d))
		}
	}
	for _, name := range names {
		fn, err := k.mod.Function(name)
		if err != nil {
			return fmt.Errorf("attention: %w", err)
		}
		k.kernels[name] = &cudaKernel{fn: fn}
	}
	for _, dt := range []DType{BF16, FP16} {
		for _, d := range cudaHeadDims {
			if !sharedPrefixKernel(dt, d) {
				continue
			}
			// R16, whose shared memory the device may not have (a program of more than 99 KiB on
			// sm_86/sm_89), is left out there; DecodeShared then runs SharedPrefixW32, which every device has.
			for v := range numSharedPrefixVariants {
				_, threads := v.kernel()
				if err := k.prepare(sharedPrefixKernelName(v, dt, d), threads); err != nil && v == SharedPrefixW32 {
					return err
				}
			}
			_, threads := SharedPrefixW32.kernel()
			if err := k.prepare(sharedPrefixE4M3Name(dt, d), threads); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecideShared is DecideShared's decision for a's call, whose sequences share pages as groups say (decode
// indices), on this device.
func (k *CUDAKernels) DecideShared(a *CUDADecodeArgs, groups []SharedGroup) SharedDecision {
	return DecideShared(a.Call(k.Tuning), groups, k.Facts())
}

// DecodeShared queues the shared-prefix algorithm for call a on stream s (see shared.cu): the queries'
// gather, the prefix pass (shared.cu's prefix kernel where sharedPrefixKernel covers the call, else the
// split-k partition kernel, over the virtual sequences), the suffix pass
// (the same kernel over every sequence's pages from the end of its shared prefix) and the merge, which
// writes a.Out. sh holds the layout and plan (DecideShared's, or DecideSharedGraph's padded layout and
// its key's plan) and their device arrays; workspace must be
// 16-byte aligned and hold SharedWorkspaceBytes. a must not carry RoPE or a window; over FP8 pages the
// prefix pass runs shared.cu's FP8 prefix kernel (W32's program) and the suffix pass the FP8 split-k
// kernels. The kernels are launched without programmatic dependent launch (each waits for the one
// before it).
//
// With a plan of fixed partition counts (a SharedGraphKey's, on a layout padded to it: SharedLayout.Pad)
// the launches depend on the layout's sizes alone, never on its lengths or groups, which the kernels
// read from sh's device arrays: a CUDA graph captured for one layout replays any other of the same key
// whose arrays are written over the same buffers.
func (k *CUDAKernels) DecodeShared(s *cuda.Stream, a *CUDADecodeArgs, sh *CUDASharedArgs, workspace cuda.DevicePtr, workspaceBytes int64) error {
	return k.decodeShared(s, a, sh, workspace, workspaceBytes, k.Tuning)
}

// decodeShared is DecodeShared with the switches of tuning (tests pass theirs, leaving k.Tuning alone).
func (k *CUDAKernels) decodeShared(s *cuda.Stream, a *CUDADecodeArgs, sh *CUDASharedArgs, workspace cuda.DevicePtr, workspaceBytes int64, tuning CUDATuning) error {
	l := sh.Layout
	dt := dtypeOf(a.DType)
	switch {
	case a.RoPE != nil || a.Window > 0:
		return fmt.Errorf("attention: shared-prefix decode with RoPE or a window")
	case a.KVFP8 && !sharedPrefixKernel(dt, a.HeadDim): // DecideShared never plans it
		return fmt.Errorf("%w: shared-prefix decode over FP8 pages of head_dim %d in %v", ErrUnsupported, a.HeadDim, a.DType)
	case l == nil || l.Virtual() == 0 || l.Batch != len(a.HostContextLens):
		return fmt.Errorf("attention: shared-prefix decode: a layout of no group or of another batch")
	case dt == 0:
		return fmt.Errorf("%w: dtype %v", ErrUnsupported, a.DType)
	case workspace%16 != 0:
		return fmt.Errorf("attention: shared-prefix workspace %#x is not 16-byte aligned", uintptr(workspace))
	}
	if err := a.checkScales(); err != nil {
		return err
	}
	merge := k.kernels[sharedMergeKernelName(dt, a.HeadDim)]
	if merge == nil {
		return fmt.Errorf("%w: head_dim %d in %v", ErrUnsupported, a.HeadDim, a.DType)
	}
	t := tuning
	// The prefix pass keeps its pages in L2 (no evict_first): a group of more members than a virtual
	// sequence holds reads each page once per virtual sequence, by programs the grid runs side by side,
	// and the later reads should find it there.
	prefixKernel := k.kernels[sharedPrefixKernelName(t.SharedPrefix, dt, a.HeadDim)]
	if sm90 := k.kernels[sharedPrefixSM90Name(dt, a.HeadDim)]; sm90 != nil && !t.NoSM90Prefix && sm90Pages(a.BlockSize) && a.Scale > 0 {
		prefixKernel = sm90
	}
	if prefixKernel == nil {
		prefixKernel = k.kernels[sharedPrefixKernelName(SharedPrefixW32, dt, a.HeadDim)]
	}
	if a.KVFP8 {
		if prefixKernel = k.kernels[sharedPrefixE4M3Name(dt, a.HeadDim)]; prefixKernel == nil {
			return fmt.Errorf("attention: kernel %s not loaded", sharedPrefixE4M3Name(dt, a.HeadDim))
		}
	}
	// Every grid and scalar below is the launch's (planSharedLaunch): with a plan of fixed partitions,
	// the same for every layout of the same sizes, so that a graph of one replays another.
	sl, err := planSharedLaunch(a.Call(t), l, sh.Plan, k.Facts(), prefixKernel != nil)
	if err != nil {
		return err
	}
	if sl.workspace > workspaceBytes {
		return fmt.Errorf("%w: the shared-prefix call needs %d bytes, have %d", ErrWorkspaceTooSmall, sl.workspace, workspaceBytes)
	}
	vq := workspace
	pre := workspace.Add(sl.qBytes)
	suf := pre.Add(sl.preBytes)

	prefix := *a
	prefix.Q, prefix.Out, prefix.Dependent = vq, 0, false
	prefix.BlockTables, prefix.ContextLens, prefix.HostContextLens = sh.VirtualTables, sh.VirtualLens, sl.prefixLens
	prefix.NumHeads = sl.virtualHeads
	suffix := *a
	suffix.Dependent = false
	suffix.BlockTables, suffix.ContextLens, suffix.HostContextLens = sh.SuffixTables, sh.SuffixLens, sl.suffixLens
	sc := &sl.scalars
	p := sharedParams{
		Out: a.Out, Q: a.Q, VQ: vq,
		VirtualSeqs: sh.VirtualSeqs, SeqSlot: sh.SeqSlot, VirtualLens: sh.VirtualLens, SuffixLens: sh.SuffixLens,
		PreAcc: pre, PreM: pre.Add(4 * sc.preRows * int64(a.HeadDim)), SufAcc: suf, SufM: suf.Add(4 * sc.sufRows * int64(a.HeadDim)),
		NumHeads: int32(sc.numHeads), NumKVHeads: int32(sc.numKVHeads), Group: int32(sc.group), Members: int32(sc.members),
		RowBytes:              int32(sc.rowBytes),
		PrefixPartitionTokens: int32(sc.prefixPartitionTokens), PrefixPartitions: int32(sc.prefixPartitions),
		SuffixPartitionTokens: int32(sc.suffixPartitionTokens), SuffixPartitions: int32(sc.suffixPartitions),
	}
	p.PreL, p.SufL = p.PreM.Add(4*sc.preRows), p.SufM.Add(4*sc.sufRows)

	gather := k.kernels[sharedGatherKernel]
	if err := cuda.Launch(gather.fn, dim3(sl.gather), cuda.Dim3{X: int(p.RowBytes) / 16}, 0, s, &p); err != nil {
		return fmt.Errorf("attention: shared-prefix gather: %w", err)
	}
	if prefixKernel != nil {
		err = k.runPrefix(s, &prefix, prefixKernel, sc, dim3(sl.prefixGrid), p.PreAcc, p.PreM, p.PreL)
	} else {
		err = k.runPartitions(s, &prefix, sl.prefix, p.PreAcc, p.PreM, p.PreL)
	}
	if err != nil {
		return fmt.Errorf("attention: shared-prefix pass: %w", err)
	}
	if err := k.runPartitions(s, &suffix, sl.suffix, p.SufAcc, p.SufM, p.SufL); err != nil {
		return fmt.Errorf("attention: shared-prefix suffix pass: %w", err)
	}
	if err := cuda.Launch(merge.fn, dim3(sl.merge), cuda.Dim3{X: a.HeadDim}, 0, s, &p); err != nil {
		return fmt.Errorf("attention: shared-prefix merge: %w", err)
	}
	return nil
}

// dim3 is a grid of planSharedLaunch's as the driver takes it.
func dim3(g [3]int) cuda.Dim3 { return cuda.Dim3{X: g[0], Y: g[1], Z: g[2]} }

// runPrefix queues shared.cu's prefix kernel kern over grid for the virtual call a (its queries the
// gathered ones, its sequences the virtual sequences, its query heads their rows per KV head times the
// KV heads), partitioned as sc says, its partials to (acc, m, l) in the split-k layout; a program
// serves sharedPrefixRows rows (planSharedLaunch's grid).
func (k *CUDAKernels) runPrefix(s *cuda.Stream, a *CUDADecodeArgs, kern *cudaKernel, sc *sharedScalars, grid cuda.Dim3, acc, m, l cuda.DevicePtr) error {
	p := decodeParams{
		Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables, ContextLens: a.ContextLens,
		PartM: m, PartL: l, PartAcc: acc,
		ScaleLog2:  float32(float64(a.Scale) * math.Log2E),
		NumHeads:   int32(sc.prefixRows * sc.numKVHeads),
		NumKVHeads: int32(sc.numKVHeads),
		MaxBlocks:  int32(a.MaxBlocks), Log2BlockSize: int32(bits.TrailingZeros(uint(a.BlockSize))),
		PartitionTokens: int32(sc.prefixPartitionTokens), NumPartitions: int32(sc.prefixPartitions),
		Group: int32(sc.prefixRows), Batch: int32(sc.prefixBatch),
		KScale: a.KScale, VScale: a.VScale,
	}
	if !kern.tma {
		return cuda.Launch(kern.fn, grid, cuda.Dim3{X: kern.threads}, kern.shared, s, &p)
	}
	sp := sharedPrefixSM90Params{P: p}
	var err error
	if sp.KMap, sp.VMap, err = k.maps.pair(k.dev, a.DType, a.KCache, a.VCache, a.HeadDim, a.NumKVHeads, a.BlockSize); err != nil {
		return err
	}
	return cuda.Launch(kern.fn, grid, cuda.Dim3{X: kern.threads}, kern.shared, s, &sp)
}

// runPartitions queues the split-k partition kernel of decision d (split-k, reduce-kernel merge) for
// call a, its partials to (acc, m, l), without the merge.
func (k *CUDAKernels) runPartitions(s *cuda.Stream, a *CUDADecodeArgs, d DecodeDecision, acc, m, l cuda.DevicePtr) error {
	kern := k.kernels[d.Kernel.Name]
	if kern == nil {
		return fmt.Errorf("attention: kernel %s not loaded", d.Kernel.Name)
	}
	if d.Plan.Kernel != SplitK || d.FusedMerge {
		return fmt.Errorf("attention: %s: not a split-k decision with a separate merge", d.Kernel.Name)
	}
	p := k.params(a, d)
	p.PartAcc, p.PartM, p.PartL = acc, m, l
	return launch(a, kern.fn, cuda.Dim3{X: d.Grid[0], Y: d.Grid[1], Z: d.Grid[2]}, cuda.Dim3{X: kern.threads}, kern.shared, s, &p)
}
