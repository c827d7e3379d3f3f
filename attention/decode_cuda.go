//go:build cuda

package attention

import (
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/gollm/gollm/internal/cuda"
)

// The decode kernels on one device: CUDAKernels loads them and executes the dispatcher's decisions
// (Decide, dispatch.go); it decides nothing itself.

// CUDADecodeArgs describes one decode-attention call on device memory; the layouts are the CPU Cache's.
type CUDADecodeArgs struct {
	// Out and Q are [Batch][NumHeads][HeadDim] of DType; the G = NumHeads/NumKVHeads query heads of KV
	// head h are heads h·G … h·G+G−1.
	Out, Q cuda.DevicePtr
	// KCache and VCache are [num_blocks][BlockSize][NumKVHeads][HeadDim] of DType, or of e4m3 codes with
	// KVFP8.
	KCache, VCache cuda.DevicePtr
	// KVFP8: the pages hold OCP FP8 e4m3 codes, one byte an element, a K code c standing for float(c) ·
	// KScale and a V code for float(c) · VScale (the CPU Cache's FP8 arithmetic; finite positive scales).
	// Q and Out stay of DType. Such a call takes no RoPE and runs the narrow mma tile (head_dim 64 and
	// 128; larger groups in chunks of 8 heads) or the FMA kernels (DecodeCall.KVFP8).
	KVFP8          bool
	KScale, VScale float32
	// BlockTables is int32 [Batch][MaxBlocks]; only the first ⌈ContextLens[s]/BlockSize⌉ of row s are read
	// (with a Window, only those from the page of the newest query's first key on: the entries before it
	// may be anything, −1 for pages given back).
	BlockTables cuda.DevicePtr
	// ContextLens is int32 [Batch] on the device; HostContextLens the same values on the host (Plan and
	// the grid size need them). Batch = len(HostContextLens); every length must be at least 1.
	ContextLens     cuda.DevicePtr
	HostContextLens []int32
	MaxBlocks       int
	NumHeads        int
	NumKVHeads      int
	HeadDim         int // 64, 128, or 256 (16-bit dtypes)
	BlockSize       int // a power of two from 8 to 64
	DType           cuda.DataType
	// Scale multiplies q·k before the softmax (usually 1/√HeadDim).
	Scale float32
	// Window, when positive, is a sliding window: sequence s's query, at position ContextLens[s] − 1,
	// attends to its last Window positions only (Batch.Window).
	Window int
	// Dependent launches the kernels with programmatic dependent launch (cuda.LaunchPDL): they may start
	// before the kernel queued before them has finished, and wait for it themselves. Compute capability
	// 9.0 only (the waits are in the sm_90 code of the fat binary).
	Dependent bool
	// RoPE, when set, has the kernels do the step's rotary embedding and K/V cache write themselves: Q is
	// then not read (the queries come unrotated from RoPE.QKV), each sequence's newest K/V row is taken
	// from RoPE.QKV (not read back from the cache) and stored into the caches for later steps. Not with
	// the persistent grouped kernel (the call then runs the classic one; FoldsRoPE says when to ask).
	RoPE *CUDARoPE
}

// CUDARoPE is what a decode call needs to do the step's rotary embedding and K/V write itself, the work
// of a RoPE kernel between the Q/K/V product and attention (the model's RoPEWriteKV): query heads and
// the newest key rotated by the position (HF LLaMA's rotate-half; angle InvFreq[i]·position in float32,
// evaluated in double; cos and sin times AttentionScaling), the rotated key and the value stored in the
// caches at the sequence's slot.
type CUDARoPE struct {
	// QKV is float32 [Batch][QKVCols]: NumHeads query heads, then NumKVHeads key heads, then NumKVHeads
	// value heads of HeadDim each, unrotated (the Q/K/V product's output).
	QKV     cuda.DevicePtr
	QKVCols int
	// Positions and Slots are int32 [Batch]: the position of each sequence's newest token (its context
	// length − 1 in a decode step) and its cache slot, block id · BlockSize + offset (negative: a padding
	// row, nothing stored).
	Positions, Slots cuda.DevicePtr
	// InvFreq is float32 [HeadDim/2].
	InvFreq cuda.DevicePtr
	// Bias, when set, is float32 [QKVCols], the Q/K/V product's bias, which QKV does not include yet: it is
	// added to each row before the rotation (and so into the stored key and value).
	Bias             cuda.DevicePtr
	AttentionScaling float32
}

// launch queues a decode kernel, with programmatic dependent launch when a asks for it.
func launch[P any](a *CUDADecodeArgs, f *cuda.Function, grid, block cuda.Dim3, shared int, s *cuda.Stream, p *P) error {
	if a.Dependent {
		return cuda.LaunchPDL(f, grid, block, shared, s, p)
	}
	return cuda.Launch(f, grid, block, shared, s, p)
}

// decodeParams mirrors struct DecodeParams in decode.cuh, field for field.
type decodeParams struct {
	Out, Q, KCache, VCache, BlockTables, ContextLens cuda.DevicePtr
	PartM, PartL, PartAcc, Counters                  cuda.DevicePtr
	RoPEQKV, Positions, Slots, InvFreq, RoPEBias     cuda.DevicePtr
	ScaleLog2                                        float32
	NumHeads, NumKVHeads, MaxBlocks, Log2BlockSize   int32
	PartitionTokens, NumPartitions, Group, Flags     int32
	Batch, MergeChunk, MergeChunks                   int32
	RoPEScaling                                      float32
	QKVCols                                          int32
	Window                                           int32
	KScale, VScale                                   float32
}

// The DECODE_FLAG_* switches of decode.cuh.
const (
	flagHeadsFast     = 1
	flagFusedMerge    = 4
	flagEvictFirst    = 8
	flagEarlyPrologue = 128
	flagRoPE          = 256
)

// cudaKernel is one loaded entry point and what it needs at launch.
type cudaKernel struct {
	fn      *cuda.Function
	threads int
	shared  int  // dynamic shared memory bytes
	perSM   int  // resident programs per SM (occupancy), for the dispatcher
	tma     bool // prefill_sm90.cu's prefix kernel: its parameter leads with the caches' tensor maps
}

// CUDAKernels are the decode-attention kernels loaded on one device.
type CUDAKernels struct {
	// Tuning is read at each launch; change it only between calls.
	Tuning CUDATuning

	dev     *cuda.Device
	mod     *cuda.Module
	numSMs  int
	l2Bytes int
	// peakBW is the memory's peak bandwidth by the driver (cuda.Info.PeakMemBandwidth; 0 if unknown).
	peakBW  float64
	kernels map[string]*cudaKernel
	// counters are the fused split-k merge's arrival counters (splitKCounterBytes), zero between calls.
	counters cuda.DevicePtr
	// maps are the caches' tensor maps of the Hopper prefix kernel.
	maps kvTensorMaps
	// fork is the shared-prefix call's side stream (DecodeShared).
	fork sharedFork
}

// dtypeOf maps a device dtype to the dispatcher's (0 for one the kernels do not cover).
func dtypeOf(t cuda.DataType) DType {
	switch t {
	case cuda.BFloat16:
		return BF16
	case cuda.Float16:
		return FP16
	case cuda.Float32:
		return FP32
	}
	return 0
}

// LoadCUDAKernels loads the embedded fat binary on dev and prepares every decode kernel (shared memory
// limits raised, occupancy read). Close releases them.
func LoadCUDAKernels(dev *cuda.Device) (*CUDAKernels, error) {
	mod, err := dev.LoadModule(decodeFatbin)
	if err != nil {
		return nil, fmt.Errorf("attention: load decode kernels: %w", err)
	}
	k := &CUDAKernels{dev: dev, mod: mod, numSMs: dev.Info().NumSMs, l2Bytes: dev.Info().L2Bytes, peakBW: dev.Info().PeakMemBandwidth,
		kernels: map[string]*cudaKernel{}}
	if err := k.load(); err != nil {
		return nil, errors.Join(err, k.Close())
	}
	return k, nil
}

// Close frees the split-k counters and unloads the kernels; the device must have finished every call
// queued with them.
func (k *CUDAKernels) Close() error {
	errs := []error{k.fork.close()}
	if k.counters != 0 {
		errs = append(errs, k.dev.Free(k.counters))
		k.counters = 0
	}
	if k.mod != nil {
		errs = append(errs, k.mod.Unload())
		k.mod = nil
	}
	k.kernels = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("attention: close decode kernels: %w", err)
	}
	return nil
}

// load allocates and zeroes the split-k counters and prepares every kernel of k.mod (decodeKernels and
// the reduce kernels).
func (k *CUDAKernels) load() error {
	dev, mod := k.dev, k.mod
	var err error
	if k.counters, err = dev.Alloc(splitKCounterBytes); err != nil {
		return fmt.Errorf("attention: split-k counters: %w", err)
	}
	if err := dev.Fill32(k.counters, 0, splitKCounterBytes/4, nil); err != nil {
		return fmt.Errorf("attention: split-k counters: %w", err)
	}
	if err := dev.Synchronize(); err != nil {
		return fmt.Errorf("attention: split-k counters: %w", err)
	}
	for _, kern := range decodeKernels() {
		if err := k.prepare(kern.Name, kern.Threads); err != nil {
			return err
		}
	}
	for _, dt := range []DType{BF16, FP16, FP32} {
		for _, d := range cudaHeadDims {
			if d == wideHeadDim && dt == FP32 {
				continue
			}
			name := reduceKernelName(dt, d)
			fn, err := mod.Function(name)
			if err != nil {
				return fmt.Errorf("attention: %w", err)
			}
			k.kernels[name] = &cudaKernel{fn: fn, threads: d}
		}
	}
	return k.loadShared()
}

// prepare looks up a decode kernel and its shared-memory size (the __device__ int <name>_smem that the
// .cu file computes from the same constants as the kernel), raises its limit and reads its occupancy.
func (k *CUDAKernels) prepare(name string, threads int) error {
	fn, err := k.mod.Function(name)
	if err != nil {
		return fmt.Errorf("attention: %w", err)
	}
	shared, err := k.mod.Int32(name + "_smem")
	if err != nil {
		return fmt.Errorf("attention: shared memory size of %s: %w", name, err)
	}
	kern := &cudaKernel{fn: fn, threads: threads, shared: int(shared)}
	if err := fn.SetMaxDynamicShared(kern.shared); err != nil {
		return fmt.Errorf("attention: %w", err)
	}
	if kern.perSM, err = fn.Occupancy(threads, kern.shared); err != nil {
		return fmt.Errorf("attention: %w", err)
	}
	k.kernels[name] = kern
	return nil
}

// Device returns the device the kernels are loaded on.
func (k *CUDAKernels) Device() *cuda.Device { return k.dev }

// Facts returns what the dispatcher knows of the device: its size and the kernels' occupancy.
func (k *CUDAKernels) Facts() DecodeDevice {
	return DecodeDevice{SMs: k.numSMs, L2Bytes: k.l2Bytes, PeakBandwidth: k.peakBW, ProgramsPerSM: k.programsPerSM}
}

// programsPerSM is a loaded kernel's occupancy (0 for one not loaded).
func (k *CUDAKernels) programsPerSM(d DecodeKernel) int {
	if kern := k.kernels[d.Name]; kern != nil {
		return kern.perSM
	}
	return 0
}

// Call returns a's shape as the dispatcher sees it, with the kernels' tuning.
func (a *CUDADecodeArgs) Call(t CUDATuning) DecodeCall {
	c := DecodeCall{ContextLens: a.HostContextLens, MaxBlocks: a.MaxBlocks, NumHeads: a.NumHeads, NumKVHeads: a.NumKVHeads,
		HeadDim: a.HeadDim, BlockSize: a.BlockSize, DType: dtypeOf(a.DType), KVFP8: a.KVFP8, Window: a.Window, Dependent: a.Dependent,
		Tuning: t}
	if r := a.RoPE; r != nil {
		c.RoPE = &DecodeRoPE{QKVCols: r.QKVCols, NilPointer: r.QKV == 0 || r.Positions == 0 || r.Slots == 0 || r.InvFreq == 0}
	}
	return c
}

// decide is Decide for a's call under tuning t on this device, path path, forced to force when set.
func (k *CUDAKernels) decide(a *CUDADecodeArgs, path CUDAPath, force *ForcedPlan, t CUDATuning) (DecodeDecision, error) {
	c := a.Call(t)
	c.Path, c.Force = path, force
	return Decide(c, k.Facts())
}

// Plan returns the plan Decode follows for a (Decide's).
func (k *CUDAKernels) Plan(a *CUDADecodeArgs) (DecodePlan, error) {
	d, err := k.decide(a, PathAuto, nil, k.Tuning)
	return d.Plan, err
}

// GraphPlan returns the plan of a call captured into a CUDA graph whose a.HostContextLens hold the
// graph's context cap for each of its rows (its batch bucket) and that replays batches of minBatch
// sequences and more (Decide's, for a GraphCall).
func (k *CUDAKernels) GraphPlan(a *CUDADecodeArgs, minBatch int) (DecodePlan, error) {
	c := a.Call(k.Tuning)
	c.Graph = &GraphCall{MinBatch: minBatch}
	d, err := Decide(c, k.Facts())
	return d.Plan, err
}

// Decode runs decode attention on stream s as Decide chooses for this call on this device, and returns
// the plan it followed. workspace must hold SplitKWorkspaceBytes for the plan's partitions when it is
// split-k (SplitKWorkspaceBound sizes it for every call up to a shape): else ErrWorkspaceTooSmall.
func (k *CUDAKernels) Decode(s *cuda.Stream, a *CUDADecodeArgs, workspace cuda.DevicePtr, workspaceBytes int64) (DecodePlan, error) {
	d, err := k.decide(a, PathAuto, nil, k.Tuning)
	if err != nil {
		return DecodePlan{}, err
	}
	return d.Plan, k.Run(s, a, d, workspace, workspaceBytes)
}

// DecodeGrouped queues the grouped kernel: one program per (sequence, KV head) over the whole context or,
// where Decide says so, the persistent grouped kernel (as many programs as run at once, each looping over
// items).
func (k *CUDAKernels) DecodeGrouped(s *cuda.Stream, a *CUDADecodeArgs, path CUDAPath) error {
	return k.decodeGrouped(s, a, path, k.Tuning)
}

func (k *CUDAKernels) decodeGrouped(s *cuda.Stream, a *CUDADecodeArgs, path CUDAPath, t CUDATuning) error {
	d, err := k.decide(a, path, &ForcedPlan{Kernel: Grouped}, t)
	if err != nil {
		return err
	}
	return k.Run(s, a, d, 0, 0)
}

// DecodeSplitK queues the split-k kernel with partitions of partitionTokens tokens (a positive multiple of
// BlockSize), writing partial results to workspace, and merges them into Out: by default in the split-k
// programs themselves (the last program of each chunk of partitions to finish merges it), or with a
// second, reduce kernel (CUDATuning.SplitKReduceKernel).
//
// The fused merge counts the finished programs of each (sequence, KV head) in counters that the
// CUDAKernels owns (zeroed when loaded, left zero by every call): split-k calls of one CUDAKernels must
// not run at the same time on different streams (load one CUDAKernels per stream for that, or set
// CUDATuning.SplitKReduceKernel).
func (k *CUDAKernels) DecodeSplitK(s *cuda.Stream, a *CUDADecodeArgs, partitionTokens int, workspace cuda.DevicePtr, workspaceBytes int64, path CUDAPath) error {
	return k.decodeSplitK(s, a, partitionTokens, workspace, workspaceBytes, path, k.Tuning)
}

func (k *CUDAKernels) decodeSplitK(s *cuda.Stream, a *CUDADecodeArgs, partitionTokens int, workspace cuda.DevicePtr, workspaceBytes int64, path CUDAPath, t CUDATuning) error {
	d, err := k.decide(a, path, &ForcedPlan{Kernel: SplitK, PartitionTokens: partitionTokens}, t)
	if err != nil {
		return err
	}
	return k.Run(s, a, d, workspace, workspaceBytes)
}

// FoldsRoPE reports whether a call like a should carry CUDADecodeArgs.RoPE (DecodeDecision.FoldsRoPE).
// a.HostContextLens are the lengths the call is planned with.
func (k *CUDAKernels) FoldsRoPE(a *CUDADecodeArgs) bool {
	d, err := k.decide(a, PathAuto, nil, k.Tuning)
	return err == nil && d.FoldsRoPE
}

// checkScales refuses FP8 pages' scales that are not finite and positive.
func (a *CUDADecodeArgs) checkScales() error {
	if a.KVFP8 && !(a.KScale > 0 && a.VScale > 0 && a.KScale <= math.MaxFloat32 && a.VScale <= math.MaxFloat32) {
		return fmt.Errorf("attention: FP8 KV scales %v, %v: want finite and positive", a.KScale, a.VScale)
	}
	return nil
}

// Run queues the call a as decision d (Decide's for a's call) says, on stream s. A split-k decision
// writes its partials to workspace, which must be 16-byte aligned and hold SplitKWorkspaceBytes of its
// partitions (else ErrWorkspaceTooSmall).
func (k *CUDAKernels) Run(s *cuda.Stream, a *CUDADecodeArgs, d DecodeDecision, workspace cuda.DevicePtr, workspaceBytes int64) error {
	kern := k.kernels[d.Kernel.Name]
	if kern == nil {
		return fmt.Errorf("attention: kernel %s not loaded", d.Kernel.Name)
	}
	if d.Kernel.KVFP8 != a.KVFP8 {
		return fmt.Errorf("attention: kernel %s for a call with FP8 KV %v", d.Kernel.Name, a.KVFP8)
	}
	if err := a.checkScales(); err != nil {
		return err
	}
	p := k.params(a, d)
	grid := cuda.Dim3{X: d.Grid[0], Y: d.Grid[1], Z: d.Grid[2]}
	if d.Plan.Kernel == Grouped {
		if err := launch(a, kern.fn, grid, cuda.Dim3{X: kern.threads}, kern.shared, s, &p); err != nil {
			if d.Kernel.Persistent {
				return fmt.Errorf("attention: grouped decode (persistent): %w", err)
			}
			return fmt.Errorf("attention: grouped decode: %w", err)
		}
		return nil
	}
	batch, parts := len(a.HostContextLens), d.Plan.NumPartitions
	need := SplitKWorkspaceBytes(batch, a.NumHeads, a.HeadDim, parts)
	if workspace%16 != 0 {
		return fmt.Errorf("attention: split-k workspace %#x is not 16-byte aligned", uintptr(workspace))
	}
	if need > workspaceBytes {
		return fmt.Errorf("%w: %d partitions need %d bytes, have %d", ErrWorkspaceTooSmall, parts, need, workspaceBytes)
	}
	rows := int64(batch) * int64(a.NumHeads) * int64(parts)
	p.Counters = k.counters
	// acc first: the kernels read and write it in 16-byte pieces, so it must start 16-byte aligned
	// whatever rows is (an odd count put it 8 bytes off when m and l came first).
	p.PartAcc = workspace
	p.PartM = workspace.Add(4 * rows * int64(a.HeadDim))
	p.PartL = p.PartM.Add(4 * rows)
	if err := launch(a, kern.fn, grid, cuda.Dim3{X: kern.threads}, kern.shared, s, &p); err != nil {
		return fmt.Errorf("attention: split-k decode: %w", err)
	}
	if d.FusedMerge {
		return nil
	}
	red := k.kernels[d.ReduceKernel]
	if err := launch(a, red.fn, cuda.Dim3{X: batch, Y: a.NumHeads}, cuda.Dim3{X: red.threads}, 0, s, &p); err != nil {
		return fmt.Errorf("attention: split-k reduce: %w", err)
	}
	return nil
}

// params are the kernel parameters of a's call under decision d (the workspace's are Run's).
func (k *CUDAKernels) params(a *CUDADecodeArgs, d DecodeDecision) decodeParams {
	flags := d.diag.flags()
	if d.HeadsFast {
		flags |= flagHeadsFast
	}
	if d.EarlyPrologue {
		flags |= flagEarlyPrologue
	}
	if d.EvictFirst {
		flags |= flagEvictFirst
	}
	if d.FusedMerge {
		flags |= flagFusedMerge
	}
	var rope CUDARoPE
	if d.RoPE && a.RoPE != nil {
		flags |= flagRoPE
		rope = *a.RoPE
	}
	return decodeParams{
		RoPEQKV: rope.QKV, Positions: rope.Positions, Slots: rope.Slots, InvFreq: rope.InvFreq, RoPEBias: rope.Bias,
		RoPEScaling: rope.AttentionScaling, QKVCols: int32(rope.QKVCols),
		Flags: flags,
		Out:   a.Out, Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables, ContextLens: a.ContextLens,
		ScaleLog2:       float32(float64(a.Scale) * math.Log2E),
		NumHeads:        int32(a.NumHeads),
		NumKVHeads:      int32(a.NumKVHeads),
		MaxBlocks:       int32(a.MaxBlocks),
		Log2BlockSize:   int32(bits.TrailingZeros(uint(a.BlockSize))),
		Group:           int32(a.NumHeads / a.NumKVHeads),
		PartitionTokens: int32(d.Plan.PartitionTokens),
		NumPartitions:   int32(d.Plan.NumPartitions),
		Batch:           int32(len(a.HostContextLens)),
		MergeChunk:      int32(d.MergeChunk),
		MergeChunks:     int32(d.MergeChunks),
		Window:          int32(max(0, a.Window)),
		KScale:          a.KScale,
		VScale:          a.VScale,
	}
}

// KernelInfo describes the kernel a call would run, for benchmarks and reports.
type KernelInfo struct {
	Name                        string
	Threads, SharedBytes, PerSM int
	Registers, LocalBytes       int
}

// Describe returns the kernel of kind ("DecodeGrouped" or "DecodeSplitK") that a call would run on path,
// with its resources: for DecodeGrouped the persistent grouped kernel where the call would run it.
func (k *CUDAKernels) Describe(kind string, a *CUDADecodeArgs, path CUDAPath) (KernelInfo, error) {
	c := a.Call(k.Tuning)
	group, err := c.check()
	if err != nil {
		return KernelInfo{}, err
	}
	grouped, split, err := c.tile(path, group)
	if err != nil {
		return KernelInfo{}, err
	}
	dk := split
	if kind == "DecodeGrouped" {
		dk = grouped
		if twin, programs := c.persistent(grouped, k.Facts()); programs > 0 {
			dk = twin
		}
	}
	kern := k.kernels[dk.Name]
	if kern == nil {
		return KernelInfo{}, fmt.Errorf("attention: kernel %s not loaded", dk.Name)
	}
	attr, err := kern.fn.Attributes()
	if err != nil {
		return KernelInfo{}, err
	}
	return KernelInfo{Name: kern.fn.Name(), Threads: kern.threads, SharedBytes: kern.shared, PerSM: kern.perSM,
		Registers: attr.Registers, LocalBytes: attr.LocalBytes}, nil
}
