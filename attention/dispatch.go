package attention

import (
	"errors"
	"fmt"
	"math"
)

// The GPU decode dispatcher. Decide is its one entry point: from a call's shape (DecodeCall) and the
// device's facts (DecodeDevice) it returns everything the call runs with (DecodeDecision): the kernel
// (grouped, split-k or the persistent grouped kernel) and its head tile, the split-k partitions and
// their merge, the grid, the L2 policy of the K/V copies, and whether the call can also do the step's
// rotary embedding. It is pure, so that it builds and is tested without CUDA (dispatch_test.go);
// CUDAKernels (decode_cuda.go) only executes its decisions. The partition rules are in gpuplan.go. The
// measurements behind every rule are in docs/bench/attention-h100.md and docs/bench/attention-h200.md.

// The dispatcher's constants.
const (
	// cudaTileTokens is the mma kernels' token tile (the FMA kernels' 32 divides it; a multiple of every
	// page size): a partition that is not whole tiles ends in a tile of padding.
	cudaTileTokens = 64
	// fullWaveNum/fullWaveDen: work of 9/10 of a wave's slots counts as a full wave (fillsWave): the few
	// idle slots cost less than what a split or a policy would add to fill them.
	fullWaveNum, fullWaveDen = 9, 10
	// minSplitTokens is the shortest split-k partition of a call that fills the GPU: shorter ones add a
	// program's fixed costs (first tile, partial, merge) without streaming faster.
	minSplitTokens = 512
	// maxSplitPartitions bounds a context's partitions: each adds a partial to merge, and past it the
	// merge costs more than the parallelism wins.
	maxSplitPartitions = 64
	// maxOneLevelPartitions is the most partitions the fused merge takes in one level (mergeChunk); past
	// it, it merges in two of about √partitions each.
	maxOneLevelPartitions = 16
	// tailWaves: rows past one wave of grouped programs by less than 0.4 of a wave run as a second wave of
	// a few programs alone, as long as the first (tailRows).
	tailWaves = 1.4
	// tailParts is the most partitions tailBound gives a tail call: its overflow's programs are then a
	// half to a quarter as long as a whole context's.
	tailParts = 4
	// longSplitTokens is the context from which fillsGPU counts the bytes a row's program has in flight,
	// and from which a tail past 1.4 waves is worth a split's merge.
	longSplitTokens = 2048
	// fullRowTokenBytes is a token's K and V of one head_dim-128 head in 16 bits: one such program an SM
	// keeps the memory busy (fillsGPU).
	fullRowTokenBytes = 2 * 128 * 2
	// h100PeakBandwidth is the H100 SXM's peak memory bandwidth (bytes/s, by its driver: 5120 bits at 2619
	// MHz, double data rate), the memory the rules were first measured on (bandwidthScale's unit).
	h100PeakBandwidth = 2 * 2619e6 * 5120 / 8
	// largeStreamL2s is the stream, in L2 sizes, from which the K/V copies give up evict_first on slower
	// memory (largeStream): the lines it keeps in L2 are then too few to matter.
	largeStreamL2s = 16
	// largeStreamMaxBandwidth is the peak bandwidth (bytes/s) from which large streams keep evict_first:
	// on the faster memory evict_normal was the slower (between the H100's 3.35e12 and the H200's 4.81e12).
	largeStreamMaxBandwidth = 4e12
	// persistMaxTokens is the longest context for which the persistent grouped kernel runs: past it a
	// program's start is a small share of its item's time and the classic kernel is as fast.
	persistMaxTokens = 512
	// cudaNarrowRows is the most query heads the narrow mma kernels (the _n8 entry points: tokens as the
	// mma's m, heads as its n) serve: half the mmas and accumulators of the 16-row head tile.
	cudaNarrowRows = 8
	// splitKCounterBytes is the fused merge's arrival counters (decode.cuh, splitk_finish) that
	// CUDAKernels owns; a call that needs more merges with the reduce kernel.
	splitKCounterBytes = 64 << 10
	// maxGridYZ is the largest y or z dimension of a CUDA grid (sequences, partitions, query heads).
	maxGridYZ = 65535
	// maxDecodeTokens bounds a block table's tokens, so that the kernels' 32-bit token arithmetic (a
	// context plus a partition, less one) cannot overflow.
	maxDecodeTokens = 1 << 30
)

// fillsWave reports whether work programs (or their bytes in flight) fill slots at least as well as a
// full wave does (fullWaveNum/fullWaveDen of them).
func fillsWave(work, slots float64) bool { return fullWaveDen*work >= fullWaveNum*slots }

// ErrUnsupported is returned for a decode call the GPU kernels do not cover (head size, page size,
// dtype).
var ErrUnsupported = errors.New("attention: unsupported by the CUDA decode kernels")

// ErrWorkspaceTooSmall is returned when a split-k call's workspace cannot hold its partial results; size
// it with SplitKWorkspaceBytes.
var ErrWorkspaceTooSmall = errors.New("attention: split-k workspace too small")

// DType is the element type of a GPU decode call's queries, K/V pages and output.
type DType int

const (
	// BF16 is bfloat16.
	BF16 DType = iota + 1
	// FP16 is IEEE half precision.
	FP16
	// FP32 is IEEE single precision (the FMA kernels only).
	FP32
)

// name is the dtype's part of the kernels' entry-point names.
func (t DType) name() string {
	switch t {
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	case FP32:
		return "fp32"
	}
	return ""
}

// Size is an element's bytes (0 for an unknown dtype).
func (t DType) Size() int {
	switch t {
	case BF16, FP16:
		return 2
	case FP32:
		return 4
	}
	return 0
}

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

// CUDATuning holds switches of the decode kernels that benchmarks compare; the zero value is the
// default, the fastest measured (docs/bench/attention-h100.md).
type CUDATuning struct {
	// SequenceMajor orders the grid (sequence, KV head) instead of (KV head, sequence): by default the
	// KV head varies fastest, so that programs running together read all KV heads of the same pages (a
	// page row of all heads is contiguous).
	SequenceMajor bool
	// SplitKReduceKernel merges split-k partitions with a second kernel, grid (sequence, query head),
	// instead of in the split-k programs themselves (the fused merge: the last program of each chunk of
	// partitions to finish merges them, the last chunk merger writes the output).
	SplitKReduceKernel bool
	// MergeChunk is how many partitions one program merges at the first level of the fused merge; 0
	// picks it from the partition count (mergeChunk).
	MergeChunk int
	// NoEvictFirst gives the K/V copies L2's evict_normal policy on every call. By default they carry
	// evict_first (the stream is read once, so that what other kernels left in L2 stays there), except
	// where evictFirst says otherwise.
	NoEvictFirst bool
	// NoNarrow keeps groups of up to 8 heads on the mma kernels' 16-row head tile (mma_tile) instead of
	// the narrow kernels (the _n8 entry points).
	NoNarrow bool
	// NoPersistent keeps the grouped kernel at one program per (sequence, KV head) even where persistent
	// would run the persistent grouped kernel.
	NoPersistent bool
	// LatePrologue keeps the mma programs' PDL wait first under programmatic dependent launch
	// (CUDADecodeArgs.Dependent). By default they read their block ids and context length and queue
	// their first K/V tiles older than the sequence's newest position before it, overlapping the end of
	// the kernel before.
	LatePrologue bool
	// EvictFirstLarge keeps evict_first on streams of largeStreamL2s L2 sizes or more where largeStream
	// would give them evict_normal (benchmarks' switch); a grid of few programs still drops it.
	EvictFirstLarge bool
	// SharedPrefix picks the prefix kernel of the shared-prefix path (DecodeShared) where shared.cu has
	// one for the call; the zero value is the default.
	SharedPrefix SharedPrefixVariant
	// NoSM90Prefix keeps the prefix pass on SharedPrefix's kernel (over FP8 pages W32's, the one with
	// an FP8 form) where the Hopper one is loaded (CUDAKernels.LoadSM90): its benchmark's before/after.
	NoSM90Prefix bool
	// SharedSerial runs a shared-prefix call's suffix pass after its prefix pass on the call's stream
	// instead of beside it (DecodeShared): its benchmark's before.
	SharedSerial bool

	// persistPrograms, when positive, forces the persistent kernel with that many programs (tests).
	persistPrograms int
	// diag cuts the programs short in builds with the gollmdiag tag (diag_on.go); nothing otherwise.
	diag decodeDiag
}

// DecodeKernel is one entry point of the decode kernels (grouped.cu, splitk.cu).
type DecodeKernel struct {
	// Name is the entry point, e.g. DecodeGrouped_mma_bf16_d128_n8.
	Name string
	// Kernel is the algorithm: Grouped (the persistent grouped kernel too) or SplitK.
	Kernel Kernel
	// Persistent marks the persistent grouped kernel: a program per slot, looping over (sequence, KV
	// head) items.
	Persistent bool
	// Path is the arithmetic (PathMMA or PathFMA).
	Path  CUDAPath
	DType DType
	// KVFP8: the kernel reads FP8 e4m3 pages (DecodeCall.KVFP8; the FMA kernels, and the narrow mma
	// tile's at head_dim 64 and 128).
	KVFP8   bool
	HeadDim int
	// Rows is how many query heads one program serves (its head tile); Threads its block size.
	Rows, Threads int
}

var (
	cudaHeadDims  = []int{64, 128, 256}
	cudaMmaTiles  = []int{1, 2, 4}
	cudaFmaGroups = []int{1, 2, 4, 8}
)

// cudaFP8Group is the one head chunk of the FMA kernels over FP8 pages (the _e4m3_d<D>_g8 entry
// points, 16-bit dtypes only): smaller groups leave heads of the chunk unused, larger ones take several
// chunks. One size keeps the fat binary small.
const cudaFP8Group = 8

// fp8MMA reports whether FP8 pages of head_dim d have mma kernels: the narrow tile at head_dim 64 and
// 128, which serves a group of more than 8 heads in chunks of 8, a program a chunk (the grid's head
// chunks, as the FMA kernels'); head_dim 256 takes the FMA kernels.
func fp8MMA(d int, t CUDATuning) bool {
	return d != wideHeadDim && !t.NoNarrow
}

// wideHeadDim is the head size whose kernels differ (Gemma 3's 256): 16-bit dtypes only, the mma path
// only on the narrow tile, with two warp slices (a 32-token tile: three stages of K and V in 96 KiB of
// shared memory), no persistent twin, and no RoPE path (a block of 64 or 128 threads is smaller than a
// head). Groups of more than 8 heads take the FMA kernels.
const wideHeadDim = 256

// mmaKernel is the mma entry point of alg with a head tile of mt·16 rows (mt 0: the narrow 8-row tile).
func mmaKernel(alg Kernel, dt DType, d, mt int) DecodeKernel {
	return mmaKernelKV(alg, dt, d, mt, false)
}

// mmaKernelKV is mmaKernel over FP8 e4m3 pages with kvFP8 (the _e4m3 entry points: the narrow tile at
// head_dim 64 and 128 alone, fp8MMA).
func mmaKernelKV(alg Kernel, dt DType, d, mt int, kvFP8 bool) DecodeKernel {
	k := DecodeKernel{Kernel: alg, Path: PathMMA, DType: dt, HeadDim: d, Rows: cudaNarrowRows, Threads: 4 * 32}
	if d == wideHeadDim {
		k.Threads = 2 * 32 // two warp slices
	}
	suffix := "n8"
	if mt > 0 {
		k.Rows, k.Threads, suffix = 16*mt, 4*mt*32, fmt.Sprintf("m%d", mt)
	}
	kv := ""
	if kvFP8 {
		kv = "_e4m3"
	}
	k.Name, k.KVFP8 = fmt.Sprintf("%s_mma_%s%s_d%d_%s", kindName(alg), dt.name(), kv, d, suffix), kvFP8
	return k
}

// fp8NarrowKernel is the narrow tile's entry point of alg over FP8 e4m3 pages: mmaKernelKV's for groups
// of up to cudaNarrowRows heads, or with chunked its twin for larger ones (_n8c: a program a chunk of
// cudaNarrowRows heads, the grid's head chunks).
func fp8NarrowKernel(alg Kernel, dt DType, d int, chunked bool) DecodeKernel {
	k := mmaKernelKV(alg, dt, d, 0, true)
	if chunked {
		k.Name += "c"
	}
	return k
}

// fmaKernel is the FMA entry point of alg for groups of up to gc heads, over FP8 e4m3 pages with kvFP8
// (the _e4m3 entry points).
func fmaKernel(alg Kernel, dt DType, d, gc int, kvFP8 bool) DecodeKernel {
	kv := ""
	if kvFP8 {
		kv = "_e4m3"
	}
	return DecodeKernel{Name: fmt.Sprintf("%s_fma_%s%s_d%d_g%d", kindName(alg), dt.name(), kv, d, gc), Kernel: alg, Path: PathFMA,
		DType: dt, KVFP8: kvFP8, HeadDim: d, Rows: gc, Threads: 4 * 32}
}

// narrowTile reports whether a group of group heads takes the narrow mma kernels.
func narrowTile(group int) bool { return group <= cudaNarrowRows }

// persistentTwin is the persistent grouped kernel of a grouped mma kernel's head tile: the 16-row tile
// (m1) and the narrow one (n8) have one; ok is false for every other kernel.
func persistentTwin(k DecodeKernel) (twin DecodeKernel, ok bool) {
	if k.Kernel != Grouped || k.Persistent || k.Path != PathMMA || k.Rows > 16 || k.HeadDim == wideHeadDim || k.KVFP8 {
		return DecodeKernel{}, false
	}
	name := fmt.Sprintf("DecodeGroupedPersistent_mma_%s_d%d", k.DType.name(), k.HeadDim)
	if k.Rows == cudaNarrowRows {
		name += "_n8"
	}
	return DecodeKernel{Name: name, Kernel: Grouped, Persistent: true, Path: PathMMA, DType: k.DType, HeadDim: k.HeadDim,
		Rows: k.Rows, Threads: 4 * 32}, true
}

func kindName(alg Kernel) string {
	if alg == SplitK {
		return "DecodeSplitK"
	}
	return "DecodeGrouped"
}

// reduceKernelName is the split-k reduce kernel's entry point (block of head_dim threads).
func reduceKernelName(dt DType, d int) string {
	return fmt.Sprintf("DecodeSplitKReduce_%s_d%d", dt.name(), d)
}

// decodeKernels lists every entry point CUDAKernels loads, but the reduce kernels: adding a kernel is
// adding it here and choosing it in tile.
func decodeKernels() []DecodeKernel {
	var ks []DecodeKernel
	for _, alg := range []Kernel{Grouped, SplitK} {
		for _, dt := range []DType{BF16, FP16, FP32} {
			for _, d := range cudaHeadDims {
				if d == wideHeadDim && dt == FP32 {
					continue
				}
				if dt != FP32 {
					tiles := append(cudaMmaTiles, 0)
					if d == wideHeadDim {
						tiles = []int{0}
					}
					for _, mt := range tiles {
						k := mmaKernel(alg, dt, d, mt)
						ks = append(ks, k)
						if twin, ok := persistentTwin(k); ok {
							ks = append(ks, twin)
						}
					}
				}
				for _, gc := range cudaFmaGroups {
					ks = append(ks, fmaKernel(alg, dt, d, gc, false))
				}
				if dt != FP32 {
					ks = append(ks, fmaKernel(alg, dt, d, cudaFP8Group, true))
					if d != wideHeadDim {
						ks = append(ks, fp8NarrowKernel(alg, dt, d, false), fp8NarrowKernel(alg, dt, d, true))
					}
				}
			}
		}
	}
	return ks
}

// DecodeDevice is what the dispatcher knows of a GPU.
type DecodeDevice struct {
	// SMs, L2Bytes and PeakBandwidth (bytes/s; 0 if unknown) are the device's.
	SMs, L2Bytes  int
	PeakBandwidth float64
	// ProgramsPerSM is a kernel's occupancy: how many of its programs one SM runs at once.
	ProgramsPerSM func(DecodeKernel) int
}

// DecodeCall is one decode-attention call as the dispatcher sees it: its shape, not its memory.
type DecodeCall struct {
	// ContextLens are the sequences' context lengths (a graph's call: its context cap for every row of
	// its batch bucket); MaxBlocks is the block tables' row length.
	ContextLens                              []int32
	MaxBlocks                                int
	NumHeads, NumKVHeads, HeadDim, BlockSize int
	DType                                    DType
	// KVFP8: the pages hold FP8 e4m3 codes, one byte an element (CUDADecodeArgs.KVFP8), while the queries
	// and the output are of DType (bf16 or fp16). Such a call runs the FMA kernels (their _e4m3_g8 entry
	// points), never the mma, persistent or shared-prefix ones, and does no RoPE (the RoPE kernel
	// quantizes the newest row into the pages); its plan counts one byte an element.
	KVFP8 bool
	// Window, when positive, is the layer's sliding window (CUDADecodeArgs.Window): the call reads the
	// pages from its newest query's first key on, and is planned on those tokens (ReadLens).
	Window int
	// RoPE, when set, has the call do the step's rotary embedding (CUDADecodeArgs.RoPE).
	RoPE *DecodeRoPE
	// Dependent: launched with programmatic dependent launch (CUDADecodeArgs.Dependent).
	Dependent bool
	// Path is the arithmetic; PathAuto lets the dispatcher choose.
	Path CUDAPath
	// Graph, when set, plans a call captured into a CUDA graph (GraphPlan) instead of one run once.
	Graph *GraphCall
	// LosesGraph tells DecideShared that taking the shared-prefix path costs the caller its CUDA graph
	// (the step then runs op by op): charged as sharedEagerSeconds for the call.
	LosesGraph bool
	// Force, when set, runs that algorithm instead of the planned one (benchmarks, tests).
	Force *ForcedPlan
	// WorkspaceBytes, when positive, is the split-k workspace the caller has: a planned split that needs
	// more runs grouped. Zero leaves the check to the launch (ErrWorkspaceTooSmall).
	WorkspaceBytes int64
	// Tuning is the kernels' switches.
	Tuning CUDATuning
}

// DecodeRoPE is what the dispatcher needs of a call's rotary embedding (CUDARoPE).
type DecodeRoPE struct {
	// QKVCols is the width of the Q/K/V rows; NilPointer reports a device pointer of CUDARoPE unset.
	QKVCols    int
	NilPointer bool
}

// GraphCall is what a captured call adds to its shape: the smallest batch the graph replays, and an
// experiment's override of its plan.
type GraphCall struct {
	// MinBatch is the smallest batch the graph serves (the bucket below it plus one).
	MinBatch int
	// PartitionTokens, for experiments, overrides the plan: > 0 split-k partitions of that many tokens,
	// < 0 the grouped kernel.
	PartitionTokens int
}

// ForcedPlan names the algorithm a call must run: Grouped, or SplitK with partitions of
// PartitionTokens tokens (a positive multiple of the page size).
type ForcedPlan struct {
	Kernel          Kernel
	PartitionTokens int
}

// DecodeDecision is everything a decode call runs with.
type DecodeDecision struct {
	// Plan is the algorithm and its partitions.
	Plan DecodePlan
	// Kernel is the entry point that runs (the persistent grouped kernel where it does).
	Kernel DecodeKernel
	// Grid is the program grid: (KV head × head chunks, sequence, partition), (sequence, KV head × head
	// chunks, partition) with CUDATuning.SequenceMajor, or (programs, 1, 1) for the persistent kernel.
	Grid [3]int
	// HeadsFast: the KV head varies fastest in the grid (not CUDATuning.SequenceMajor).
	HeadsFast bool
	// EvictFirst gives the K/V copies L2's evict_first policy (evictFirst).
	EvictFirst bool
	// EarlyPrologue: a dependent launch's programs queue their first tiles before the PDL wait.
	EarlyPrologue bool
	// RoPE: the call does the step's rotary embedding and K/V write.
	RoPE bool
	// FusedMerge: the split-k programs merge their partitions themselves, MergeChunk partitions a
	// program at the first level, in MergeChunks chunks; else the reduce kernel (ReduceKernel) does.
	FusedMerge              bool
	MergeChunk, MergeChunks int
	ReduceKernel            string
	// FoldsRoPE reports whether a call of this shape should carry the step's rotary embedding: not when
	// it may run the persistent grouped kernel, which has no RoPE path (the call would fall back to the
	// classic kernel and its per-item program starts, where a separate rotation kernel costs less).
	FoldsRoPE bool
	// diag is the gollmdiag build's cuts (diag_on.go).
	diag decodeDiag
}

// Decide is the GPU dispatcher's decision for call c on device dev, or the reason the kernels cannot run
// it (ErrUnsupported, or an invalid call).
func Decide(c DecodeCall, dev DecodeDevice) (DecodeDecision, error) {
	group, err := c.check()
	if err != nil {
		return DecodeDecision{}, err
	}
	// Everything below plans on the tokens each sequence reads: its context, or from its window's page on.
	c.ContextLens = c.ReadLens()
	t := c.Tuning
	grouped, split, err := c.tile(c.Path, group)
	if err != nil {
		return DecodeDecision{}, err
	}
	// The planner counts slots of the kernels PathAuto runs (the occupancies of the call's own path
	// differ only where a benchmark forces another).
	autoGrouped, autoSplit, _ := c.tile(PathAuto, group)
	plan, err := c.plan(dev, autoGrouped, autoSplit)
	if err != nil {
		return DecodeDecision{}, err
	}
	d := DecodeDecision{Plan: plan, HeadsFast: !t.SequenceMajor, EarlyPrologue: c.Dependent && !t.LatePrologue,
		RoPE: c.RoPE != nil, FoldsRoPE: c.HeadDim != wideHeadDim && !c.KVFP8 && !c.persistentEligible(autoGrouped, dev), diag: t.diag}
	batch := len(c.ContextLens)
	if plan.Kernel == Grouped {
		d.Kernel, d.Grid = grouped, c.grid(grouped, 1)
		if twin, programs := c.persistent(grouped, dev); programs > 0 {
			d.Kernel, d.Grid = twin, [3]int{programs, 1, 1}
		}
	} else {
		d.Kernel, d.Grid = split, c.grid(split, plan.NumPartitions)
		d.FusedMerge = !t.SplitKReduceKernel
		if d.FusedMerge {
			chunk := mergeChunk(plan.NumPartitions, t)
			chunks := ceilDiv(plan.NumPartitions, chunk)
			ny := d.Grid[0] // program rows per sequence: KV heads × head chunks
			if t.SequenceMajor {
				ny = d.Grid[1]
			}
			if batch*ny*(1+chunks) > splitKCounterBytes/4 {
				d.FusedMerge = false // more counters than there are
			} else {
				d.MergeChunk, d.MergeChunks = chunk, chunks
			}
		}
		if !d.FusedMerge {
			d.ReduceKernel = reduceKernelName(c.DType, c.HeadDim)
		}
	}
	d.EvictFirst = c.evictFirst(dev, d.Grid[0]*d.Grid[1]*d.Grid[2])
	return d, nil
}

// ReadLens returns the tokens each sequence's decode reads, on which the call is planned: its context
// without a window; with one, from the page of its newest query's first key (max(0, ctx − Window)) to
// the context's end, the span the kernels' partitions are laid on (the CPU twin's decodeSpan). A graph's
// call, planned at its context cap for every batch it replays, takes the longest span any context up to
// the cap can have: the cap, or Window + BlockSize − 1 (a window that starts at the last token of a page).
func (c *DecodeCall) ReadLens() []int32 {
	if c.Window <= 0 {
		return c.ContextLens
	}
	lens := make([]int32, len(c.ContextLens))
	for i, n := range c.ContextLens {
		ctx := int(n)
		if c.Graph != nil {
			lens[i] = int32(min(ctx, c.Window+c.BlockSize-1))
			continue
		}
		first := max(0, ctx-c.Window)
		lens[i] = int32(ctx - first/c.BlockSize*c.BlockSize)
	}
	return lens
}

// check validates the call and returns its group size G.
func (c *DecodeCall) check() (int, error) {
	switch {
	case c.DType.name() == "":
		return 0, fmt.Errorf("%w: dtype %d", ErrUnsupported, c.DType)
	case c.HeadDim != 64 && c.HeadDim != 128 && c.HeadDim != wideHeadDim:
		return 0, fmt.Errorf("%w: head_dim %d (64, 128 or 256)", ErrUnsupported, c.HeadDim)
	case c.HeadDim == wideHeadDim && c.DType == FP32:
		return 0, fmt.Errorf("%w: head_dim %d in fp32 (16-bit dtypes only)", ErrUnsupported, c.HeadDim)
	case c.HeadDim == wideHeadDim && c.RoPE != nil:
		return 0, fmt.Errorf("%w: RoPE at head_dim %d (its kernels' blocks are smaller than a head)", ErrUnsupported, c.HeadDim)
	case c.KVFP8 && c.DType == FP32:
		return 0, fmt.Errorf("%w: FP8 KV pages with fp32 queries (16-bit dtypes only)", ErrUnsupported)
	case c.KVFP8 && c.RoPE != nil:
		return 0, fmt.Errorf("%w: RoPE over FP8 KV pages (the RoPE kernel writes them)", ErrUnsupported)
	case c.Window < 0:
		return 0, fmt.Errorf("attention: window %d", c.Window)
	case c.BlockSize < 8 || c.BlockSize > 64 || c.BlockSize&(c.BlockSize-1) != 0:
		return 0, fmt.Errorf("%w: block size %d (a power of two from 8 to 64)", ErrUnsupported, c.BlockSize)
	case c.NumKVHeads <= 0 || c.NumHeads <= 0 || c.NumHeads%c.NumKVHeads != 0:
		return 0, fmt.Errorf("attention: %d query heads for %d KV heads", c.NumHeads, c.NumKVHeads)
	case len(c.ContextLens) == 0:
		return 0, fmt.Errorf("attention: empty decode batch")
	case len(c.ContextLens) > maxGridYZ || c.NumHeads > maxGridYZ:
		return 0, fmt.Errorf("%w: %d sequences of %d query heads (at most %d of each: a grid dimension)",
			ErrUnsupported, len(c.ContextLens), c.NumHeads, maxGridYZ)
	case c.MaxBlocks <= 0 || int64(c.MaxBlocks)*int64(c.BlockSize) > maxDecodeTokens:
		return 0, fmt.Errorf("%w: block tables of %d blocks of %d tokens (at most %d tokens a sequence: the kernels count tokens in 32 bits)",
			ErrUnsupported, c.MaxBlocks, c.BlockSize, maxDecodeTokens)
	case c.RoPE != nil && c.RoPE.QKVCols < (c.NumHeads+2*c.NumKVHeads)*c.HeadDim:
		return 0, fmt.Errorf("attention: RoPE: %d Q/K/V columns, want at least %d", c.RoPE.QKVCols,
			(c.NumHeads+2*c.NumKVHeads)*c.HeadDim)
	case c.RoPE != nil && c.RoPE.NilPointer:
		return 0, errors.New("attention: RoPE: a nil device pointer")
	}
	for s, n := range c.ContextLens {
		if n < 1 || int(n) > c.MaxBlocks*c.BlockSize {
			return 0, fmt.Errorf("attention: sequence %d: context %d outside [1, %d·%d]", s, n, c.MaxBlocks, c.BlockSize)
		}
	}
	return c.NumHeads / c.NumKVHeads, nil
}

// tile returns the grouped and split-k kernels of the call's head tile on path: PathAuto is the mma
// path but for fp32, groups of more than 64 heads and, at head_dim 256, of more than 8; on it, groups of up to cudaNarrowRows heads take
// the narrow tile (unless CUDATuning.NoNarrow), others the smallest 16·mt-row tile that holds them; on
// the FMA path the smallest group count that holds them, 8 at most (larger groups loop).
func (c *DecodeCall) tile(path CUDAPath, group int) (grouped, split DecodeKernel, err error) {
	if path == PathAuto {
		path = PathMMA
		// The wide head's mma kernels are the narrow tile's alone; FP8 pages have the narrow tile's at
		// head_dim 64 and 128 (fp8MMA).
		if c.DType == FP32 || c.KVFP8 && !fp8MMA(c.HeadDim, c.Tuning) || group > 64 ||
			c.HeadDim == wideHeadDim && (!narrowTile(group) || c.Tuning.NoNarrow) {
			path = PathFMA
		}
	}
	switch path {
	case PathMMA:
		if c.KVFP8 {
			if !fp8MMA(c.HeadDim, c.Tuning) {
				return grouped, split, fmt.Errorf("%w: the mma path over FP8 KV pages takes head_dim 64 and 128 on the narrow tile", ErrUnsupported)
			}
			chunked := !narrowTile(group)
			return fp8NarrowKernel(Grouped, c.DType, c.HeadDim, chunked), fp8NarrowKernel(SplitK, c.DType, c.HeadDim, chunked), nil
		}
		if c.DType == FP32 {
			return grouped, split, fmt.Errorf("%w: the mma path has no fp32 (it would be TF32)", ErrUnsupported)
		}
		mt := -1
		if narrowTile(group) && !c.Tuning.NoNarrow {
			mt = 0
		} else if c.HeadDim == wideHeadDim {
			return grouped, split, fmt.Errorf("%w: group of %d heads on the mma path at head_dim %d (at most %d)",
				ErrUnsupported, group, c.HeadDim, cudaNarrowRows)
		} else {
			for _, m := range cudaMmaTiles {
				if 16*m >= group {
					mt = m
					break
				}
			}
		}
		if mt < 0 {
			return grouped, split, fmt.Errorf("%w: group of %d heads on the mma path (at most 64)", ErrUnsupported, group)
		}
		return mmaKernel(Grouped, c.DType, c.HeadDim, mt), mmaKernel(SplitK, c.DType, c.HeadDim, mt), nil
	case PathFMA:
		gc := cudaFmaGroups[len(cudaFmaGroups)-1]
		for _, g := range cudaFmaGroups {
			if g >= group {
				gc = g
				break
			}
		}
		if c.KVFP8 {
			gc = cudaFP8Group
		}
		return fmaKernel(Grouped, c.DType, c.HeadDim, gc, c.KVFP8), fmaKernel(SplitK, c.DType, c.HeadDim, gc, c.KVFP8), nil
	}
	return grouped, split, fmt.Errorf("attention: unknown path %v", path)
}

// plan is the call's algorithm and partitions: the forced one; else the planner's on the device's size
// for the auto path's kernels (gpuPlan, or gpuGraphPlan for a captured call, whose experiment override
// comes last), grouped where a split would not fit the caller's workspace. A split-k plan is checked
// against the block table and the grid.
func (c *DecodeCall) plan(dev DecodeDevice, grouped, split DecodeKernel) (DecodePlan, error) {
	var plan DecodePlan
	switch {
	case c.Force != nil && c.Force.Kernel == SplitK:
		plan = DecodePlan{Kernel: SplitK, PartitionTokens: c.Force.PartitionTokens}
	case c.Force != nil:
		return DecodePlan{Kernel: Grouped, NumPartitions: 1}, nil
	default:
		g := gpuSize{sms: dev.SMs, groupedPerSM: dev.ProgramsPerSM(grouped), splitPerSM: dev.ProgramsPerSM(split),
			bw: bandwidthScale(dev.PeakBandwidth)}
		in := gpuPlanInput(c.ContextLens, c.NumHeads, c.NumKVHeads, c.HeadDim, c.KVElementBytes(), c.BlockSize, g)
		if c.Graph == nil {
			plan = gpuPlan(in, g)
		} else {
			plan = gpuGraphPlan(in, g, c.Graph.MinBatch)
			switch t := c.Graph.PartitionTokens; {
			case t > 0:
				plan = DecodePlan{Kernel: SplitK, PartitionTokens: t}
			case t < 0:
				plan = DecodePlan{Kernel: Grouped, NumPartitions: 1}
			}
		}
		if plan.Kernel != SplitK {
			return plan, nil
		}
		if c.WorkspaceBytes > 0 && SplitKWorkspaceBytes(len(c.ContextLens), c.NumHeads, c.HeadDim,
			ceilDiv(longestContext(c.ContextLens), plan.PartitionTokens)) > c.WorkspaceBytes {
			return DecodePlan{Kernel: Grouped, NumPartitions: 1}, nil
		}
	}
	part := plan.PartitionTokens
	if part <= 0 || part%c.BlockSize != 0 || part > c.MaxBlocks*c.BlockSize {
		// The bound keeps the kernels' ctx + partition_tokens within int32 (check bounds the table).
		return DecodePlan{}, fmt.Errorf("attention: split-k partition of %d tokens is not a positive multiple of the block size %d of at most the block table's %d tokens",
			part, c.BlockSize, c.MaxBlocks*c.BlockSize)
	}
	plan.NumPartitions = ceilDiv(longestContext(c.ContextLens), part)
	if plan.NumPartitions > maxGridYZ {
		return DecodePlan{}, fmt.Errorf("%w: %d split-k partitions (at most %d: a grid dimension)", ErrUnsupported, plan.NumPartitions, maxGridYZ)
	}
	return plan, nil
}

// grid is the program grid of kernel k over partitions partitions (see DecodeDecision.Grid).
func (c *DecodeCall) grid(k DecodeKernel, partitions int) [3]int {
	chunks := ceilDiv(c.NumHeads/c.NumKVHeads, k.Rows)
	if c.Tuning.SequenceMajor {
		return [3]int{len(c.ContextLens), c.NumKVHeads * chunks, partitions}
	}
	return [3]int{c.NumKVHeads * chunks, len(c.ContextLens), partitions}
}

// persistent returns the persistent twin of grouped kernel k and its program count where the call runs
// it (programs 0: it does not): as many programs as run at once, each looping over (sequence, KV head)
// items, where there are more items than that and the contexts are short (persistMaxTokens), so that
// program starts are a large share of an item's time. Not for a call with RoPE (the twin has no RoPE
// path), nor under the switches that turn it off or order the grid sequence-major.
func (c *DecodeCall) persistent(k DecodeKernel, dev DecodeDevice) (DecodeKernel, int) {
	if c.RoPE != nil {
		return DecodeKernel{}, 0
	}
	return c.persistentPrograms(k, dev)
}

// persistentEligible reports whether a grouped call of kernel k, without RoPE, would run the persistent
// kernel (DecodeDecision.FoldsRoPE is its negation).
func (c *DecodeCall) persistentEligible(k DecodeKernel, dev DecodeDevice) bool {
	_, programs := c.persistentPrograms(k, dev)
	return programs > 0
}

func (c *DecodeCall) persistentPrograms(k DecodeKernel, dev DecodeDevice) (DecodeKernel, int) {
	t := c.Tuning
	twin, ok := persistentTwin(k)
	if t.NoPersistent || t.SequenceMajor || !ok {
		return DecodeKernel{}, 0
	}
	perSM := dev.ProgramsPerSM(twin)
	if perSM < 1 {
		return DecodeKernel{}, 0
	}
	items := len(c.ContextLens) * c.NumKVHeads
	if t.persistPrograms > 0 {
		return twin, min(items, t.persistPrograms)
	}
	slots := dev.SMs * perSM
	if items <= slots || longestContext(c.ContextLens) > persistMaxTokens {
		return DecodeKernel{}, 0
	}
	return twin, slots
}

// evictFirst is the L2 policy of a call of programs programs: evict_first (the stream is read once:
// what other kernels left in L2, the next products' weights and dirty lines, stays there) unless turned
// off, the call streams a largeStream, or its programs fill less than a wave of the SMs, one each: a few
// long programs, each streaming at its own latency-bound rate, ran slower with it.
func (c *DecodeCall) evictFirst(dev DecodeDevice, programs int) bool {
	t := c.Tuning
	return !t.NoEvictFirst && fillsWave(float64(programs), float64(dev.SMs)) &&
		(t.EvictFirstLarge || !largeStream(c.ContextLens, c.NumKVHeads, c.HeadDim, c.KVElementBytes(), dev.L2Bytes, dev.PeakBandwidth))
}

// KVElementBytes is the bytes of one stored K or V element of the call's pages: 1 with KVFP8, else
// DType's size. The plan sizes the K/V stream by it.
func (c *DecodeCall) KVElementBytes() int {
	if c.KVFP8 {
		return 1
	}
	return c.DType.Size()
}

// mergeChunk is the fused merge's first-level chunk for parts partitions: all of them (one level) up to
// maxOneLevelPartitions, else about √parts, so that neither level merges more than about √parts
// partials.
func mergeChunk(parts int, t CUDATuning) int {
	if t.MergeChunk > 0 {
		return min(t.MergeChunk, parts)
	}
	if parts <= maxOneLevelPartitions {
		return parts
	}
	return int(math.Ceil(math.Sqrt(float64(parts))))
}

// SplitKWorkspaceBytes is the workspace a split-k call of batch sequences with numHeads query heads of
// headDim and numPartitions partitions needs: (acc, m, l) in float32 per (sequence, head, partition). The
// workspace must be 16-byte aligned (device allocations are).
func SplitKWorkspaceBytes(batch, numHeads, headDim, numPartitions int) int64 {
	return 4 * int64(batch) * int64(numHeads) * int64(numPartitions) * int64(headDim+2)
}

// SplitKWorkspaceBound is a workspace size that serves every call Decode (CUDAKernels.Plan) or a graph
// step planned by CUDAKernels.GraphPlan can make with up to maxBatch sequences of at most maxContext
// tokens: their partitions are whole 64-token tiles, at most 64 per context (maxPlannedPartitions).
func SplitKWorkspaceBound(maxBatch, numHeads, headDim, maxContext int) int64 {
	return SplitKWorkspaceBytes(maxBatch, numHeads, headDim, maxPlannedPartitions(maxContext))
}
