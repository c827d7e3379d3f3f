//go:build cuda

package attention

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
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

// sharedPrefixSM90Params mirrors PhArgs<PhPrefixParams> in prefill_sm90.cu: the caches' tensor maps at
// offsets 0 and 128, then the prefix pass's parameters, with the call's own queries in P.Q and what takes
// a row of a virtual sequence to its query (the kernel gathers them: SharedLayout.VirtualSeqs, G and the
// call's query heads), 512 bytes, 64-byte aligned.
type sharedPrefixSM90Params struct {
	KMap, VMap     cuda.TensorMap
	P              decodeParams
	VirtualSeqs    cuda.DevicePtr
	QGroup, QHeads int32
	_              [48]byte
}

var _ [512]byte = [unsafe.Sizeof(sharedPrefixSM90Params{})]byte{}
var _ [448]byte = [unsafe.Offsetof(sharedPrefixSM90Params{}.VirtualSeqs)]byte{}

// sharedGatherKernel, sharedMergeKernelName and sharedPrefixKernelName are shared.cu's entry points.
const sharedGatherKernel = "SharedGather"

func sharedMergeKernelName(dt DType, d int) string {
	return fmt.Sprintf("SharedMerge_%s_d%d", dt.name(), d)
}

// sharedPrefixKernelName is shared.cu's prefix kernel of variant v for queries of dt at head_dim d:
// SharedPrefix[R16]_<dtype>_d<D>, or over FP8 pages (kvFP8; W32's program alone has that form)
// SharedPrefix_<dtype>_e4m3_d<D>.
func sharedPrefixKernelName(v SharedPrefixVariant, dt DType, d int, kvFP8 bool) string {
	name, _ := v.kernel()
	if kvFP8 {
		return fmt.Sprintf("%s_%s_e4m3_d%d", name, dt.name(), d)
	}
	return fmt.Sprintf("%s_%s_d%d", name, dt.name(), d)
}

// LoadSM90 adds the Hopper prefix kernels (SharedPrefixSM90_<dtype>[_e4m3]_d<64|128|256>) from mod, the
// module of prefill_sm90.cu's PTX (model/kernels.PrefillSM90PTX), which only an sm_90 GPU loads;
// DecodeShared then runs them for the prefix pass. A head size whose kernel needs more shared memory than
// the device allows is left out.
func (k *CUDAKernels) LoadSM90(mod *cuda.Module) error {
	optin := k.dev.Info().SharedPerBlockOptin
	for _, dt := range []DType{BF16, FP16} {
		for _, kvFP8 := range []bool{false, true} {
			for _, d := range prefillSM90HeadDims {
				name := sharedPrefixSM90Name(dt, d, kvFP8)
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
				if err := k.prepare(sharedPrefixKernelName(v, dt, d, false), threads); err != nil && v == SharedPrefixW32 {
					return err
				}
			}
			_, threads := SharedPrefixW32.kernel()
			if err := k.prepare(sharedPrefixKernelName(SharedPrefixW32, dt, d, true), threads); err != nil {
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
// gather (none before the Hopper prefix kernel, which gathers them as it loads them), the prefix pass
// (that kernel where it runs, else shared.cu's prefix kernel where sharedPrefixKernel covers the call,
// else the split-k partition kernel, over the virtual sequences), the suffix pass
// (the same kernel over every sequence's pages from the end of its shared prefix) and the merge, which
// writes a.Out. sh holds the layout and plan (DecideShared's, or DecideSharedGraph's padded layout and
// its key's plan) and their device arrays; workspace must be
// 16-byte aligned and hold SharedWorkspaceBytes. a must not carry RoPE or a window; over FP8 pages the
// prefix pass runs the Hopper kernel's FP8 form where it is loaded, else shared.cu's FP8 prefix kernel
// (W32's program), and the suffix pass the FP8 split-k kernels. The kernels are launched without
// programmatic dependent launch (each waits for the one before it).
//
// The suffix pass depends on neither the gather nor the prefix pass, so it runs beside them on a
// stream of k's own, forked from s and joined back before the merge (CUDATuning.SharedSerial keeps it
// on s): the prefix pass fills the GPU's SMs one program each for as long as it runs, and the suffix
// pass's many short programs take what it leaves instead of a launch of their own after it. The fork
// is an event pair, which a CUDA graph captures as two branches.
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
	st, err := k.sharedStages(a, sh, workspace, workspaceBytes, tuning)
	if err != nil {
		return err
	}
	if tuning.SharedSerial {
		for _, run := range st {
			if err := run(s); err != nil {
				return err
			}
		}
		return nil
	}
	return k.forkShared(s, st)
}

// forkShared queues stages st on s with the suffix pass on k's side stream: forked from s before the
// gather, joined before the merge.
func (k *CUDAKernels) forkShared(s *cuda.Stream, st [numSharedStages]sharedStage) error {
	k.fork.mu.Lock()
	defer k.fork.mu.Unlock()
	if k.fork.side == nil {
		var err error
		if k.fork.side, err = k.dev.NewStream(); err != nil {
			return fmt.Errorf("attention: shared-prefix side stream: %w", err)
		}
		if k.fork.begin, err = k.dev.NewSyncEvent(); err == nil {
			k.fork.end, err = k.dev.NewSyncEvent()
		}
		if err != nil {
			return fmt.Errorf("attention: shared-prefix fork events: %w", err)
		}
	}
	side := k.fork.side
	if err := k.fork.begin.Record(s); err != nil {
		return fmt.Errorf("attention: shared-prefix fork: %w", err)
	}
	if err := side.Wait(k.fork.begin); err != nil {
		return fmt.Errorf("attention: shared-prefix fork: %w", err)
	}
	if err := st[sharedSuffixStage](side); err != nil {
		return err
	}
	if err := k.fork.end.Record(side); err != nil {
		return fmt.Errorf("attention: shared-prefix join: %w", err)
	}
	for _, i := range []int{sharedGatherStage, sharedPrefixStage} {
		if err := st[i](s); err != nil {
			return err
		}
	}
	if err := s.Wait(k.fork.end); err != nil {
		return fmt.Errorf("attention: shared-prefix join: %w", err)
	}
	return st[sharedMergeStage](s)
}

// sharedFork is the side stream and the event pair of DecodeShared's suffix pass, made at its first
// forked call; mu keeps two host goroutines' calls from interleaving their records and waits.
type sharedFork struct {
	mu         sync.Mutex
	side       *cuda.Stream
	begin, end *cuda.Event
}

// close releases the side stream and events (once every call queued with them is done).
func (f *sharedFork) close() error {
	var errs []error
	for _, e := range []*cuda.Event{f.begin, f.end} {
		if e != nil {
			errs = append(errs, e.Destroy())
		}
	}
	if f.side != nil {
		errs = append(errs, f.side.Destroy())
	}
	*f = sharedFork{}
	return errors.Join(errs...)
}

// A shared-prefix call's launches, in stream order (sharedStages).
const (
	sharedGatherStage = iota
	sharedPrefixStage
	sharedSuffixStage
	sharedMergeStage
	numSharedStages
)

// sharedStage queues one launch of a shared-prefix call on a stream.
type sharedStage func(s *cuda.Stream) error

// sharedStages checks a shared-prefix call (decodeShared's arguments) and returns its launches: the
// gather (a no-op before the Hopper prefix kernel), the prefix pass, the suffix pass and the merge (the
// sharedGatherStage... indices). The merge needs both passes done, the prefix pass the gather; the
// suffix pass needs neither.
func (k *CUDAKernels) sharedStages(a *CUDADecodeArgs, sh *CUDASharedArgs, workspace cuda.DevicePtr, workspaceBytes int64, tuning CUDATuning) (st [numSharedStages]sharedStage, _ error) {
	l := sh.Layout
	dt := dtypeOf(a.DType)
	switch {
	case a.RoPE != nil || a.Window > 0:
		return st, fmt.Errorf("attention: shared-prefix decode with RoPE or a window")
	case a.KVFP8 && !sharedPrefixKernel(dt, a.HeadDim): // DecideShared never plans it
		return st, fmt.Errorf("%w: shared-prefix decode over FP8 pages of head_dim %d in %v", ErrUnsupported, a.HeadDim, a.DType)
	case l == nil || l.Virtual() == 0 || l.Batch != len(a.HostContextLens):
		return st, fmt.Errorf("attention: shared-prefix decode: a layout of no group or of another batch")
	case dt == 0:
		return st, fmt.Errorf("%w: dtype %v", ErrUnsupported, a.DType)
	case workspace%16 != 0:
		return st, fmt.Errorf("attention: shared-prefix workspace %#x is not 16-byte aligned", uintptr(workspace))
	}
	if err := a.checkScales(); err != nil {
		return st, err
	}
	merge := k.kernels[sharedMergeKernelName(dt, a.HeadDim)]
	if merge == nil {
		return st, fmt.Errorf("%w: head_dim %d in %v", ErrUnsupported, a.HeadDim, a.DType)
	}
	t := tuning
	c := a.Call(t)
	prefixKernel, err := k.sharedPrefixFor(a, c, dt)
	if err != nil {
		return st, err
	}
	// Every grid and scalar below is the launch's (planSharedLaunch): with a plan of fixed partitions,
	// the same for every layout of the same sizes, so that a graph of one replays another.
	sl, err := planSharedLaunch(c, l, sh.Plan, k.Facts(), prefixKernel != nil)
	if err != nil {
		return st, err
	}
	if sl.workspace > workspaceBytes {
		return st, fmt.Errorf("%w: the shared-prefix call needs %d bytes, have %d", ErrWorkspaceTooSmall, sl.workspace, workspaceBytes)
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
	p := &sharedParams{
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
	st[sharedGatherStage] = func(s *cuda.Stream) error {
		if err := cuda.Launch(gather.fn, dim3(sl.gather), cuda.Dim3{X: sl.gatherThreads}, 0, s, p); err != nil {
			return fmt.Errorf("attention: shared-prefix gather: %w", err)
		}
		return nil
	}
	if prefixKernel != nil && prefixKernel.tma {
		// The Hopper kernel gathers its rows from the call's queries as it loads them: no gather launch
		// ahead of the prefix pass.
		st[sharedGatherStage] = func(*cuda.Stream) error { return nil }
		prefix.Q = a.Q
	}
	st[sharedPrefixStage] = func(s *cuda.Stream) error {
		var err error
		if prefixKernel != nil {
			err = k.runPrefix(s, &prefix, prefixKernel, sc, dim3(sl.prefixGrid), p.PreAcc, p.PreM, p.PreL, sh.VirtualSeqs)
		} else {
			err = k.runPartitions(s, &prefix, sl.prefix, p.PreAcc, p.PreM, p.PreL)
		}
		if err != nil {
			return fmt.Errorf("attention: shared-prefix pass: %w", err)
		}
		return nil
	}
	st[sharedSuffixStage] = func(s *cuda.Stream) error {
		if err := k.runPartitions(s, &suffix, sl.suffix, p.SufAcc, p.SufM, p.SufL); err != nil {
			return fmt.Errorf("attention: shared-prefix suffix pass: %w", err)
		}
		return nil
	}
	st[sharedMergeStage] = func(s *cuda.Stream) error {
		if err := cuda.Launch(merge.fn, dim3(sl.merge), cuda.Dim3{X: sharedMergeThreads}, 0, s, p); err != nil {
			return fmt.Errorf("attention: shared-prefix merge: %w", err)
		}
		return nil
	}
	return st, nil
}

// sharedPrefixFor is the prefix kernel of call a (c: its DecodeCall under the call's tuning; queries of
// dt), the one place that names it: the Hopper kernel (over FP8 pages its FP8 form) where
// DecodeCall.sharedPrefixSM90 says it runs and the scale is positive; else over FP8 pages the FP8 kernel
// of the variant the dispatcher plans for (DecodeCall.sharedPrefixVariant: W32), an error where it is
// not loaded; else the tuning's SharedPrefix, else W32's, which every device has; nil where no prefix
// kernel covers the call (sharedPrefixKernel: the split-k partition kernel runs the pass). The prefix
// pass keeps its pages in L2 (no evict_first): a group of more members than a virtual sequence holds
// reads each page once per virtual sequence, by programs the grid runs side by side, and the later reads
// should find it there.
func (k *CUDAKernels) sharedPrefixFor(a *CUDADecodeArgs, c DecodeCall, dt DType) (*cudaKernel, error) {
	if c.sharedPrefixSM90(k.Facts()) && a.Scale > 0 {
		return k.kernels[sharedPrefixSM90Name(dt, a.HeadDim, a.KVFP8)], nil
	}
	if a.KVFP8 {
		name := sharedPrefixKernelName(c.sharedPrefixVariant(), dt, a.HeadDim, true)
		if kern := k.kernels[name]; kern != nil {
			return kern, nil
		}
		return nil, fmt.Errorf("attention: kernel %s not loaded", name)
	}
	if kern := k.kernels[sharedPrefixKernelName(c.sharedPrefixVariant(), dt, a.HeadDim, false)]; kern != nil {
		return kern, nil
	}
	return k.kernels[sharedPrefixKernelName(SharedPrefixW32, dt, a.HeadDim, false)], nil
}

// dim3 is a grid of planSharedLaunch's as the driver takes it.
func dim3(g [3]int) cuda.Dim3 { return cuda.Dim3{X: g[0], Y: g[1], Z: g[2]} }

// runPrefix queues prefix kernel kern over grid for the virtual call a (its sequences the virtual
// sequences, its query heads their rows per KV head times the KV heads; its queries the gathered ones,
// or for the Hopper kernel, which gathers them itself through vseqs, SharedLayout.VirtualSeqs, the
// call's own), partitioned as sc says, its partials to (acc, m, l) in the split-k layout; a program
// serves sharedPrefixRows rows (planSharedLaunch's grid).
func (k *CUDAKernels) runPrefix(s *cuda.Stream, a *CUDADecodeArgs, kern *cudaKernel, sc *sharedScalars, grid cuda.Dim3, acc, m, l, vseqs cuda.DevicePtr) error {
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
	sp := sharedPrefixSM90Params{P: p, VirtualSeqs: vseqs, QGroup: int32(sc.group), QHeads: int32(sc.numHeads)}
	var err error
	if sp.KMap, sp.VMap, err = k.maps.pair(k.dev, a.DType, a.KVFP8, a.KCache, a.VCache, a.HeadDim, a.NumKVHeads, a.BlockSize); err != nil {
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
