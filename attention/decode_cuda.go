//go:build cuda

package attention

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/gollm/gollm/internal/cuda"
)

// decodeFatbin holds the kernels of grouped.cu and splitk.cu (see gen_cuda.go).
//
//go:embed attention.fatbin
var decodeFatbin []byte

// ErrUnsupported is returned for a decode call the GPU kernels do not cover (head size, page size,
// dtype).
var ErrUnsupported = errors.New("attention: unsupported by the CUDA decode kernels")

// ErrWorkspaceTooSmall is returned when a split-k call's workspace cannot hold its partial results; size
// it with SplitKWorkspaceBytes.
var ErrWorkspaceTooSmall = errors.New("attention: split-k workspace too small")

// CUDAPath selects the arithmetic of the decode kernels.
type CUDAPath int

const (
	// PathAuto picks MMA for bf16/fp16 and FMA for fp32.
	PathAuto CUDAPath = iota
	// PathMMA computes Q·Kᵀ and P·V with tensor-core mma.sync (bf16/fp16 only; groups up to 64 heads).
	PathMMA
	// PathFMA computes them with fp32 FMAs (any dtype; the only path for fp32, which stays IEEE).
	PathFMA
)

func (p CUDAPath) String() string {
	switch p {
	case PathAuto:
		return "auto"
	case PathMMA:
		return "mma"
	case PathFMA:
		return "fma"
	}
	return fmt.Sprintf("CUDAPath(%d)", int(p))
}

// CUDADecodeArgs describes one decode-attention call on device memory; the layouts are the CPU Cache's.
type CUDADecodeArgs struct {
	// Out and Q are [Batch][NumHeads][HeadDim] of DType; the G = NumHeads/NumKVHeads query heads of KV
	// head h are heads h·G … h·G+G−1.
	Out, Q cuda.DevicePtr
	// KCache and VCache are [num_blocks][BlockSize][NumKVHeads][HeadDim] of DType.
	KCache, VCache cuda.DevicePtr
	// BlockTables is int32 [Batch][MaxBlocks]; only the first ⌈ContextLens[s]/BlockSize⌉ of row s are read.
	BlockTables cuda.DevicePtr
	// ContextLens is int32 [Batch] on the device; HostContextLens the same values on the host (Plan and
	// the grid size need them). Batch = len(HostContextLens); every length must be at least 1.
	ContextLens     cuda.DevicePtr
	HostContextLens []int32
	MaxBlocks       int
	NumHeads        int
	NumKVHeads      int
	HeadDim         int // 64 or 128
	BlockSize       int // a power of two from 8 to 64
	DType           cuda.DataType
	// Scale multiplies q·k before the softmax (usually 1/√HeadDim).
	Scale float32
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
	InvFreq          cuda.DevicePtr
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
	RoPEQKV, Positions, Slots, InvFreq               cuda.DevicePtr
	ScaleLog2                                        float32
	NumHeads, NumKVHeads, MaxBlocks, Log2BlockSize   int32
	PartitionTokens, NumPartitions, Group, Flags     int32
	Batch, MergeChunk, MergeChunks                   int32
	RoPEScaling                                      float32
	QKVCols                                          int32
}

// The DECODE_FLAG_* switches of decode.cuh.
const (
	flagHeadsFast  = 1
	flagFusedMerge = 4
	flagEvictFirst = 8
	// flagEarlyPrologue is set under dependent launch unless CUDATuning.LatePrologue.
	flagEarlyPrologue = 128
	// flagRoPE is set when the call carries CUDADecodeArgs.RoPE.
	flagRoPE = 256
)

// The DECODE_FLAG_DIAG_* bits of decode.cuh, for CUDATuning.Diagnose.
const (
	DiagnoseEntry   = 16 // programs return right after their PDL wait
	DiagnoseLoop    = 32 // programs return after their tile loop (no partial, no merge)
	DiagnoseNoMerge = 64 // split-k programs store their partial and skip the merge
)

// splitKCounterBytes is the size of the fused merge's arrival counters (decode.cuh, splitk_finish), which
// CUDAKernels allocates and zeroes when it loads and which every split-k call leaves zero.
const splitKCounterBytes = 64 << 10

// CUDATuning holds switches of the decode kernels that benchmarks compare; the zero value is the
// default, the fastest measured (docs/bench/attention-h100.md).
type CUDATuning struct {
	// SequenceMajor orders the grid (sequence, KV head) instead of (KV head, sequence): by default the
	// KV head varies fastest, so that programs running together read all KV heads of the same pages
	// (a page row of all heads is contiguous), 0.3-1% faster on the H100.
	SequenceMajor bool
	// SplitKReduceKernel merges split-k partitions with a second kernel, grid (sequence, query head),
	// instead of in the split-k programs themselves (the fused merge: the last program of each chunk of
	// partitions to finish merges them, the last chunk merger writes the output).
	SplitKReduceKernel bool
	// MergeChunk is how many partitions one program merges at the first level of the fused merge; 0
	// picks it from the partition count (mergeChunk).
	MergeChunk int
	// NoEvictFirst gives the K/V copies L2's evict_normal policy on every call. By default they carry
	// evict_first (the stream is read once, so that what other kernels left in L2 stays there: after
	// triton.testing.do_bench's flush (zeros over 256 MiB) its dirty lines are then not written back
	// during the call), except on streams of largeStreamL2s L2 sizes or more on memory slower than
	// largeStreamMaxBandwidth (largeStream: the H100's, not the H200's) and in grids of fewer programs
	// than 90% of the SMs, which carry evict_normal (setL2Policy).
	NoEvictFirst bool
	// NoNarrow keeps groups of up to 8 heads on the mma kernels' 16-row head tile
	// (mma_tile). By default they run the narrow kernels (the _n8 entry points: mma_tile_n8, tokens as the
	// mma's m and the heads as its n), which take half the mmas and half the accumulators.
	NoNarrow bool
	// NoPersistent keeps the grouped kernel at one program per (sequence, KV head) even when there are
	// more of those than the GPU runs at once; by default the mma path then runs the persistent grouped
	// kernel (one program per slot, looping over them with its pipeline full across them).
	NoPersistent bool

	// LatePrologue keeps the mma programs' PDL wait first under programmatic dependent launch
	// (CUDADecodeArgs.Dependent). By default they read their block ids and context length and queue
	// their first K/V tiles older than the sequence's newest position before it, overlapping the end of
	// the kernel before (the Q/K/V product, whose epilogue writes the newest position's K/V): −0.05 ms a
	// Llama-3.2-1B decode step at batch 1 on the H100, −0.06 ms at Llama-3-8B (BenchmarkCUDADecode).
	LatePrologue bool
	// EvictFirstLarge keeps evict_first on streams of largeStreamL2s L2 sizes or more where largeStream
	// would give them evict_normal (benchmarks' switch); a grid of few programs still drops it.
	EvictFirstLarge bool
	// Diagnose, for BenchmarkCUDADecode's diagnostics only, cuts the mma programs short (Diagnose*
	// bits): the output is wrong, the time is the step's without that part.
	Diagnose int

	// persistPrograms, when positive, forces the persistent kernel with that many programs (tests).
	persistPrograms int
}

// cudaKernel is one loaded entry point and what it needs at launch.
type cudaKernel struct {
	fn      *cuda.Function
	threads int
	shared  int // dynamic shared memory bytes
	perSM   int // resident programs per SM (occupancy), for Plan
	rowsPer int // query heads one program serves (16·MT for mma, GC for FMA)
	// persist is the persistent twin of a grouped mma kernel of one head tile (m1, n8: the kernel that
	// walks several (sequence, KV head) items per program with the same tile), linked at load; nil for
	// every other kernel.
	persist *cudaKernel
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
}

var (
	cudaHeadDims  = []int{64, 128}
	cudaMmaTiles  = []int{1, 2, 4}
	cudaFmaGroups = []int{1, 2, 4, 8}
)

// cudaNarrowRows is the most query heads the narrow mma kernels (MT = 0 in decode.cuh: mma_tile_n8)
// serve: groups of up to 8 heads take them at every head_dim (narrowTile). Round 24: the H100's grid
// (head_dim 128) 0.4-0.75% faster in geometric mean; on an H200 the grid 1.4% (0.8-1.1% after an L2
// flush) and the head_dim 64 shapes of the batch sweep (TinyLlama, Llama-3.2-1B) 1.2-1.9%, Llama-3.2-1B's
// step at batch 1 0.5%.
const cudaNarrowRows = 8

// narrowTile reports whether a group of group heads takes the narrow mma kernels.
func narrowTile(group int) bool { return group <= cudaNarrowRows }

func dtypeName(t cuda.DataType) (string, int, bool) {
	switch t {
	case cuda.BFloat16:
		return "bf16", 2, true
	case cuda.Float16:
		return "fp16", 2, true
	case cuda.Float32:
		return "fp32", 4, true
	}
	return "", 0, false
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
	var errs []error
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

// load allocates and zeroes the split-k counters and prepares every kernel of k.mod.
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
	for _, kind := range []string{"DecodeGrouped", "DecodeSplitK"} {
		for _, dt := range []cuda.DataType{cuda.BFloat16, cuda.Float16, cuda.Float32} {
			tn, _, _ := dtypeName(dt)
			for _, d := range cudaHeadDims {
				if dt != cuda.Float32 {
					for _, mt := range cudaMmaTiles {
						name := fmt.Sprintf("%s_mma_%s_d%d_m%d", kind, tn, d, mt)
						if err := k.prepare(name, 4*mt*32, 16*mt); err != nil {
							return err
						}
					}
					if err := k.prepare(fmt.Sprintf("%s_mma_%s_d%d_n8", kind, tn, d), 4*32, cudaNarrowRows); err != nil {
						return err
					}
				}
				for _, gc := range cudaFmaGroups {
					name := fmt.Sprintf("%s_fma_%s_d%d_g%d", kind, tn, d, gc)
					if err := k.prepare(name, 4*32, gc); err != nil {
						return err
					}
				}
				if kind == "DecodeGrouped" && dt != cuda.Float32 {
					name := fmt.Sprintf("DecodeGroupedPersistent_mma_%s_d%d", tn, d)
					if err := k.prepare(name, 4*32, 16); err != nil {
						return err
					}
					if err := k.prepare(name+"_n8", 4*32, cudaNarrowRows); err != nil {
						return err
					}
					grouped := fmt.Sprintf("DecodeGrouped_mma_%s_d%d_", tn, d)
					k.kernels[grouped+"m1"].persist = k.kernels[name]
					k.kernels[grouped+"n8"].persist = k.kernels[name+"_n8"]
				}
				if kind == "DecodeSplitK" {
					name := fmt.Sprintf("DecodeSplitKReduce_%s_d%d", tn, d)
					fn, err := mod.Function(name)
					if err != nil {
						return fmt.Errorf("attention: %w", err)
					}
					k.kernels[name] = &cudaKernel{fn: fn, threads: d}
				}
			}
		}
	}
	return nil
}

// prepare looks up a decode kernel and its shared-memory size (the __device__ int <name>_smem that the
// .cu file computes from the same constants as the kernel), raises its limit and reads its occupancy.
func (k *CUDAKernels) prepare(name string, threads, rows int) error {
	fn, err := k.mod.Function(name)
	if err != nil {
		return fmt.Errorf("attention: %w", err)
	}
	ptr, size, err := k.mod.Global(name + "_smem")
	if err != nil || size != 4 {
		return fmt.Errorf("attention: shared memory size of %s (%d bytes): %w", name, size, err)
	}
	var shared [1]int32
	if err := k.dev.CopyFromDevice(cuda.Bytes(shared[:]), ptr); err != nil {
		return fmt.Errorf("attention: %s: %w", name, err)
	}
	kern := &cudaKernel{fn: fn, threads: threads, shared: int(shared[0]), rowsPer: rows}
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

// maxGridYZ is the largest y or z dimension of a CUDA grid: the decode grids put sequences on y and
// split-k partitions on z, the reduce grid query heads on y.
const maxGridYZ = 65535

// maxDecodeTokens bounds a block table's tokens (MaxBlocks · BlockSize), so that the kernels' 32-bit
// token arithmetic (a context plus a partition length, less one) cannot overflow.
const maxDecodeTokens = 1 << 30

// check validates a call and returns its dtype name and G.
func (a *CUDADecodeArgs) check() (string, int, error) {
	tn, _, ok := dtypeName(a.DType)
	switch {
	case !ok:
		return "", 0, fmt.Errorf("%w: dtype %d", ErrUnsupported, a.DType)
	case a.HeadDim != 64 && a.HeadDim != 128:
		return "", 0, fmt.Errorf("%w: head_dim %d (64 or 128)", ErrUnsupported, a.HeadDim)
	case a.BlockSize < 8 || a.BlockSize > 64 || a.BlockSize&(a.BlockSize-1) != 0:
		return "", 0, fmt.Errorf("%w: block size %d (a power of two from 8 to 64)", ErrUnsupported, a.BlockSize)
	case a.NumKVHeads <= 0 || a.NumHeads <= 0 || a.NumHeads%a.NumKVHeads != 0:
		return "", 0, fmt.Errorf("attention: %d query heads for %d KV heads", a.NumHeads, a.NumKVHeads)
	case len(a.HostContextLens) == 0:
		return "", 0, fmt.Errorf("attention: empty decode batch")
	case len(a.HostContextLens) > maxGridYZ || a.NumHeads > maxGridYZ:
		return "", 0, fmt.Errorf("%w: %d sequences of %d query heads (at most %d of each: a grid dimension)",
			ErrUnsupported, len(a.HostContextLens), a.NumHeads, maxGridYZ)
	case a.MaxBlocks <= 0 || int64(a.MaxBlocks)*int64(a.BlockSize) > maxDecodeTokens:
		return "", 0, fmt.Errorf("%w: block tables of %d blocks of %d tokens (at most %d tokens a sequence: the kernels count tokens in 32 bits)",
			ErrUnsupported, a.MaxBlocks, a.BlockSize, maxDecodeTokens)
	case a.RoPE != nil && a.RoPE.QKVCols < (a.NumHeads+2*a.NumKVHeads)*a.HeadDim:
		return "", 0, fmt.Errorf("attention: RoPE: %d Q/K/V columns, want at least %d", a.RoPE.QKVCols,
			(a.NumHeads+2*a.NumKVHeads)*a.HeadDim)
	case a.RoPE != nil && (a.RoPE.QKV == 0 || a.RoPE.Positions == 0 || a.RoPE.Slots == 0 || a.RoPE.InvFreq == 0):
		return "", 0, errors.New("attention: RoPE: a nil device pointer")
	}
	for s, n := range a.HostContextLens {
		if n < 1 || int(n) > a.MaxBlocks*a.BlockSize {
			return "", 0, fmt.Errorf("attention: sequence %d: context %d outside [1, %d·%d]", s, n, a.MaxBlocks, a.BlockSize)
		}
	}
	return tn, a.NumHeads / a.NumKVHeads, nil
}

// pick returns the kernel of kind ("DecodeGrouped" or "DecodeSplitK") for the call's shape and path
// under the tuning t (NoNarrow: the 16-row tile for groups the narrow one serves).
func (k *CUDAKernels) pick(kind string, a *CUDADecodeArgs, path CUDAPath, t CUDATuning) (*cudaKernel, error) {
	tn, group, err := a.check()
	if err != nil {
		return nil, err
	}
	if path == PathAuto {
		path = PathMMA
		if a.DType == cuda.Float32 || group > 64 {
			path = PathFMA
		}
	}
	var name string
	switch path {
	case PathMMA:
		if a.DType == cuda.Float32 {
			return nil, fmt.Errorf("%w: the mma path has no fp32 (it would be TF32)", ErrUnsupported)
		}
		if narrowTile(group) && !t.NoNarrow {
			name = fmt.Sprintf("%s_mma_%s_d%d_n8", kind, tn, a.HeadDim)
			break
		}
		mt := 0
		for _, m := range cudaMmaTiles {
			if 16*m >= group {
				mt = m
				break
			}
		}
		if mt == 0 {
			return nil, fmt.Errorf("%w: group of %d heads on the mma path (at most 64)", ErrUnsupported, group)
		}
		name = fmt.Sprintf("%s_mma_%s_d%d_m%d", kind, tn, a.HeadDim, mt)
	case PathFMA:
		gc := cudaFmaGroups[len(cudaFmaGroups)-1]
		for _, g := range cudaFmaGroups {
			if g >= group {
				gc = g
				break
			}
		}
		name = fmt.Sprintf("%s_fma_%s_d%d_g%d", kind, tn, a.HeadDim, gc)
	default:
		return nil, fmt.Errorf("attention: unknown path %v", path)
	}
	kern, ok := k.kernels[name]
	if !ok {
		return nil, fmt.Errorf("attention: kernel %s not loaded", name)
	}
	return kern, nil
}

func (k *CUDAKernels) params(a *CUDADecodeArgs, t CUDATuning) decodeParams {
	var flags int32
	if !t.SequenceMajor {
		flags |= flagHeadsFast
	}
	flags |= int32(t.Diagnose) & (DiagnoseEntry | DiagnoseLoop | DiagnoseNoMerge)
	if a.Dependent && !t.LatePrologue {
		flags |= flagEarlyPrologue
	}
	var rope CUDARoPE
	if a.RoPE != nil {
		flags |= flagRoPE
		rope = *a.RoPE
	}
	return decodeParams{
		RoPEQKV: rope.QKV, Positions: rope.Positions, Slots: rope.Slots, InvFreq: rope.InvFreq,
		RoPEScaling: rope.AttentionScaling, QKVCols: int32(rope.QKVCols),
		Flags: flags,
		Out:   a.Out, Q: a.Q, KCache: a.KCache, VCache: a.VCache, BlockTables: a.BlockTables, ContextLens: a.ContextLens,
		ScaleLog2:     float32(float64(a.Scale) * math.Log2E),
		NumHeads:      int32(a.NumHeads),
		NumKVHeads:    int32(a.NumKVHeads),
		MaxBlocks:     int32(a.MaxBlocks),
		Log2BlockSize: int32(bits.TrailingZeros(uint(a.BlockSize))),
		Group:         int32(a.NumHeads / a.NumKVHeads),
		NumPartitions: 1,
		Batch:         int32(len(a.HostContextLens)),
	}
}

// grid returns the (KV head × head chunks, sequence, partition) size of a program grid, or (sequence,
// KV head × head chunks, partition) with SequenceMajor.
func (k *CUDAKernels) grid(kern *cudaKernel, a *CUDADecodeArgs, partitions int, t CUDATuning) cuda.Dim3 {
	group := a.NumHeads / a.NumKVHeads
	chunks := (group + kern.rowsPer - 1) / kern.rowsPer
	if t.SequenceMajor {
		return cuda.Dim3{X: len(a.HostContextLens), Y: a.NumKVHeads * chunks, Z: partitions}
	}
	return cuda.Dim3{X: a.NumKVHeads * chunks, Y: len(a.HostContextLens), Z: partitions}
}

// planInput is Plan's input for a call on this device (gpuPlanInput): its SM count, and as programs per
// SM the occupancy of the split-k kernel the call would run, since the programs Plan counts against the
// slots are split-k's (on the H100 the head_dim-64 split-k kernel runs 3 an SM where the grouped one runs
// 4; until round 21 Plan was given the grouped kernel's 4, and its one-wave partitions of Llama-3.2-1B
// shapes made second waves).
func (k *CUDAKernels) planInput(a *CUDADecodeArgs, g gpuSize) PlanInput {
	_, size, _ := dtypeName(a.DType)
	return gpuPlanInput(a.HostContextLens, a.NumHeads, a.NumKVHeads, a.HeadDim, size, a.BlockSize, g)
}

// gpuSize is the device's size for a's call: its SMs, the occupancy of the grouped and split-k kernels
// the call would run, and its memory's bandwidth relative to the H100's.
func (k *CUDAKernels) gpuSize(a *CUDADecodeArgs) (gpuSize, error) {
	split, err := k.pick("DecodeSplitK", a, PathAuto, k.Tuning)
	if err != nil {
		return gpuSize{}, err
	}
	grouped, err := k.pick("DecodeGrouped", a, PathAuto, k.Tuning)
	if err != nil {
		return gpuSize{}, err
	}
	return gpuSize{sms: k.numSMs, groupedPerSM: grouped.perSM, splitPerSM: split.perSM,
		bw: bandwidthScale(k.peakBW)}, nil
}

// Plan returns the plan Decode follows for a: gpuPlan on planInput(a) (Plan, split-k partitions rounded
// up to whole 64-token tiles, and at most tailParts partitions where the rows would leave the grouped
// kernel a short second wave).
func (k *CUDAKernels) Plan(a *CUDADecodeArgs) (DecodePlan, error) {
	g, err := k.gpuSize(a)
	if err != nil {
		return DecodePlan{}, err
	}
	return gpuPlan(k.planInput(a, g), g), nil
}

// GraphPlan returns the plan of a call captured into a CUDA graph whose a.HostContextLens hold the
// graph's context cap for each of its rows (its batch bucket) and that replays batches of minBatch
// sequences and more: gpuGraphPlan (GraphPlan, with the tail rule where every batch it serves is near
// or past one wave) on planInput(a).
func (k *CUDAKernels) GraphPlan(a *CUDADecodeArgs, minBatch int) (DecodePlan, error) {
	g, err := k.gpuSize(a)
	if err != nil {
		return DecodePlan{}, err
	}
	return gpuGraphPlan(k.planInput(a, g), g, minBatch), nil
}

// Decode runs decode attention on stream s with the kernel and partitioning that Plan chooses for this
// call on this device (partitions rounded up to whole 64-token tiles), and returns the plan it followed. workspace must hold SplitKWorkspaceBytes for the
// plan's partitions when Plan picks split-k (SplitKWorkspaceBound sizes it for every call up to a shape).
func (k *CUDAKernels) Decode(s *cuda.Stream, a *CUDADecodeArgs, workspace cuda.DevicePtr, workspaceBytes int64) (DecodePlan, error) {
	plan, err := k.Plan(a)
	if err != nil {
		return DecodePlan{}, err
	}
	if plan.Kernel == SplitK {
		err = k.DecodeSplitK(s, a, plan.PartitionTokens, workspace, workspaceBytes, PathAuto)
	} else {
		err = k.DecodeGrouped(s, a, PathAuto)
	}
	return plan, err
}

// DecodeGrouped queues the grouped kernel: one program per (sequence, KV head) over the whole context or,
// on the mma path with more (sequence, KV head) items than the GPU runs at once and short contexts
// (persistMaxTokens), the persistent grouped kernel: as many programs as run at once, each looping over
// items (CUDATuning.NoPersistent turns it off).
func (k *CUDAKernels) DecodeGrouped(s *cuda.Stream, a *CUDADecodeArgs, path CUDAPath) error {
	return k.decodeGrouped(s, a, path, k.Tuning)
}

func (k *CUDAKernels) decodeGrouped(s *cuda.Stream, a *CUDADecodeArgs, path CUDAPath, t CUDATuning) error {
	kern, err := k.pick("DecodeGrouped", a, path, t)
	if err != nil {
		return err
	}
	p := k.params(a, t)
	if pk, programs := k.persistent(kern, a, t); pk != nil {
		k.setL2Policy(&p, a, t, programs)
		if err := launch(a, pk.fn, cuda.Dim3{X: programs}, cuda.Dim3{X: pk.threads}, pk.shared, s, &p); err != nil {
			return fmt.Errorf("attention: grouped decode (persistent): %w", err)
		}
		return nil
	}
	grid := k.grid(kern, a, 1, t)
	k.setL2Policy(&p, a, t, grid.X*grid.Y*grid.Z)
	if err := launch(a, kern.fn, grid, cuda.Dim3{X: kern.threads}, kern.shared, s, &p); err != nil {
		return fmt.Errorf("attention: grouped decode: %w", err)
	}
	return nil
}

// setL2Policy gives p's K/V copies the L2 policy evict_first (else evict_normal) unless t says
// otherwise, the call's stream is a largeStream (gpuplan.go), or its grid has fewer programs than 90% of
// the SMs: a few long programs, each streaming at its own latency-bound rate, ran slower with it on the
// H100 (GQA 16 × 4096 on the grouped kernel, 32 programs: 67.8 µs without it, 80.1 µs with it), while
// with more programs than that it was 1-5% faster.
func (k *CUDAKernels) setL2Policy(p *decodeParams, a *CUDADecodeArgs, t CUDATuning, programs int) {
	_, size, _ := dtypeName(a.DType)
	first := !t.NoEvictFirst && 10*programs >= 9*k.numSMs &&
		(t.EvictFirstLarge || !largeStream(a.HostContextLens, a.NumKVHeads, a.HeadDim, size, k.l2Bytes, k.peakBW))
	if first {
		p.Flags |= flagEvictFirst
	} else {
		p.Flags &^= flagEvictFirst
	}
}

// FoldsRoPE reports whether a call like a should carry CUDADecodeArgs.RoPE: not when it may run the
// persistent grouped kernel (contexts of at most persistMaxTokens and more (sequence, KV head) items than
// program slots: a batch of 256 short sequences), which has no RoPE path, so that the call would fall back
// to the classic grouped kernel and its per-item program starts. There a separate rotation kernel costs
// less (Llama-3-8B throughput, 512 prompts of 128 + 128 tokens on the H100: 13,654 output tokens/s with
// the fold against 13,985 without). a.HostContextLens are the lengths the call is planned with.
func (k *CUDAKernels) FoldsRoPE(a *CUDADecodeArgs) bool {
	kern, err := k.pick("DecodeGrouped", a, PathAuto, k.Tuning)
	if err != nil {
		return false
	}
	b := *a
	b.RoPE = nil
	pk, _ := k.persistent(kern, &b, k.Tuning)
	return pk == nil
}

// persistent returns the persistent grouped kernel and its program count when a grouped call with kernel
// kern should run it: kern has a persistent twin (the mma path with one head tile: m1 for G ≤ 16, the
// narrow n8 for G ≤ 8), more items (sequence, KV head) than resident programs, contexts of at most
// persistMaxTokens, no RoPE, and t allowing it.
func (k *CUDAKernels) persistent(kern *cudaKernel, a *CUDADecodeArgs, t CUDATuning) (*cudaKernel, int) {
	pk := kern.persist
	if t.NoPersistent || t.SequenceMajor || a.RoPE != nil || pk == nil || pk.perSM < 1 {
		return nil, 0
	}
	items := len(a.HostContextLens) * a.NumKVHeads
	slots := k.numSMs * pk.perSM
	if t.persistPrograms > 0 {
		return pk, min(items, t.persistPrograms)
	}
	longest := longestContext(a.HostContextLens)
	if items <= slots || longest > persistMaxTokens {
		return nil, 0
	}
	return pk, slots
}

// persistMaxTokens is the longest context for which the persistent grouped kernel runs: on the H100 it
// was faster where items are short (batch 256 × 256 tokens: MHA 138.9 against 141.7 µs, GQA 28.8 against
// 32.3 µs), even at 512 tokens and 0.4-2% slower from 1024 tokens up (LLaMA-3-8B 256 × 1024: 363.6 against
// 361.1 µs; MHA 32 × 2048, where items are 1.45 times the slots and a program walks two: 148.3 against
// 145.5 µs), where a program start is a small share of an item.
const persistMaxTokens = 512

// SplitKWorkspaceBytes is the workspace a split-k call of batch sequences with numHeads query heads of
// headDim and numPartitions partitions needs: (acc, m, l) in float32 per (sequence, head, partition). The
// workspace must be 16-byte aligned (device allocations are).
func SplitKWorkspaceBytes(batch, numHeads, headDim, numPartitions int) int64 {
	return 4 * int64(batch) * int64(numHeads) * int64(numPartitions) * int64(headDim+2)
}

// SplitKWorkspaceBound is a workspace size that serves every call Decode (CUDAKernels.Plan) or a graph
// step planned by CUDAKernels.GraphPlan can make with up to maxBatch sequences of at most maxContext tokens: their
// partitions are whole 64-token tiles, at most 64 per context (maxPlannedPartitions).
func SplitKWorkspaceBound(maxBatch, numHeads, headDim, maxContext int) int64 {
	return SplitKWorkspaceBytes(maxBatch, numHeads, headDim, maxPlannedPartitions(maxContext))
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

// mergeChunk is the fused merge's first-level chunk for parts partitions: all of them (one level) up to
// 16, else about √parts, so that neither level merges more than about √parts partials.
func mergeChunk(parts int, t CUDATuning) int {
	if t.MergeChunk > 0 {
		return min(t.MergeChunk, parts)
	}
	if parts <= maxOneLevelPartitions {
		return parts
	}
	c := int(math.Ceil(math.Sqrt(float64(parts))))
	return c
}

func (k *CUDAKernels) decodeSplitK(s *cuda.Stream, a *CUDADecodeArgs, partitionTokens int, workspace cuda.DevicePtr, workspaceBytes int64, path CUDAPath, t CUDATuning) error {
	kern, err := k.pick("DecodeSplitK", a, path, t)
	if err != nil {
		return err
	}
	if partitionTokens <= 0 || partitionTokens%a.BlockSize != 0 || partitionTokens > a.MaxBlocks*a.BlockSize {
		// The bound keeps the kernels' ctx + partition_tokens within int32 (check bounds the table).
		return fmt.Errorf("attention: split-k partition of %d tokens is not a positive multiple of the block size %d of at most the block table's %d tokens",
			partitionTokens, a.BlockSize, a.MaxBlocks*a.BlockSize)
	}
	maxCtx := longestContext(a.HostContextLens)
	parts := ceilDiv(maxCtx, partitionTokens)
	if parts > maxGridYZ {
		return fmt.Errorf("%w: %d split-k partitions (at most %d: a grid dimension)", ErrUnsupported, parts, maxGridYZ)
	}
	batch := len(a.HostContextLens)
	need := SplitKWorkspaceBytes(batch, a.NumHeads, a.HeadDim, parts)
	if workspace%16 != 0 {
		return fmt.Errorf("attention: split-k workspace %#x is not 16-byte aligned", uintptr(workspace))
	}
	if need > workspaceBytes {
		return fmt.Errorf("%w: %d partitions need %d bytes, have %d", ErrWorkspaceTooSmall, parts, need, workspaceBytes)
	}
	p := k.params(a, t)
	rows := int64(batch) * int64(a.NumHeads) * int64(parts)
	p.Counters = k.counters
	// acc first: the kernels read and write it in 16-byte pieces, so it must start 16-byte aligned
	// whatever rows is (an odd count put it 8 bytes off when m and l came first).
	p.PartAcc = workspace
	p.PartM = workspace.Add(4 * rows * int64(a.HeadDim))
	p.PartL = p.PartM.Add(4 * rows)
	p.PartitionTokens = int32(partitionTokens)
	p.NumPartitions = int32(parts)
	grid := k.grid(kern, a, parts, t)
	k.setL2Policy(&p, a, t, grid.X*grid.Y*grid.Z)
	fused := !t.SplitKReduceKernel
	if fused {
		chunk := mergeChunk(parts, t)
		chunks := ceilDiv(parts, chunk)
		ny := grid.X // program rows per sequence: KV heads × head chunks
		if t.SequenceMajor {
			ny = grid.Y
		}
		if batch*ny*(1+chunks) > splitKCounterBytes/4 {
			fused = false // more counters than there are: merge with the reduce kernel
		} else {
			p.Flags |= flagFusedMerge
			p.MergeChunk, p.MergeChunks = int32(chunk), int32(chunks)
		}
	}
	if err := launch(a, kern.fn, grid, cuda.Dim3{X: kern.threads}, kern.shared, s, &p); err != nil {
		return fmt.Errorf("attention: split-k decode: %w", err)
	}
	if fused {
		return nil
	}
	tn, _, _ := dtypeName(a.DType)
	red := k.kernels[fmt.Sprintf("DecodeSplitKReduce_%s_d%d", tn, a.HeadDim)]
	if err := launch(a, red.fn, cuda.Dim3{X: batch, Y: a.NumHeads}, cuda.Dim3{X: red.threads}, 0, s, &p); err != nil {
		return fmt.Errorf("attention: split-k reduce: %w", err)
	}
	return nil
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
	kern, err := k.pick(kind, a, path, k.Tuning)
	if err != nil {
		return KernelInfo{}, err
	}
	if kind == "DecodeGrouped" {
		if pk, _ := k.persistent(kern, a, k.Tuning); pk != nil {
			kern = pk
		}
	}
	attr, err := kern.fn.Attributes()
	if err != nil {
		return KernelInfo{}, err
	}
	return KernelInfo{Name: kern.fn.Name(), Threads: kern.threads, SharedBytes: kern.shared, PerSM: kern.perSM,
		Registers: attr.Registers, LocalBytes: attr.LocalBytes}, nil
}
