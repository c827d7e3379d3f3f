package attention

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// dispatchDevice is the facts of an H100 SXM or an H200 ("h100", "h200") as the tests assume them: 132
// SMs, 50 MiB of L2, the drivers' peak bandwidths, and the occupancies of the kernels as the occupancy
// API gives them on the H100 (head_dim 128: 2 programs an SM of every mma kernel; head_dim 64: 4 of the
// grouped ones, 3 of split-k; the FMA kernels 4; the Hopper prefix kernels 1).
func dispatchDevice(name string) DecodeDevice {
	dev := DecodeDevice{SMs: 132, L2Bytes: 50 << 20, PeakBandwidth: h100PeakBandwidth, ProgramsPerSM: func(k DecodeKernel) int {
		switch {
		case strings.HasPrefix(k.Name, "SharedPrefixSM90_"):
			return 1
		case k.Path == PathFMA:
			return 4
		case k.HeadDim == 64 && k.Kernel == SplitK:
			return 3
		case k.HeadDim == 64:
			return 4
		}
		return 2
	}}
	if name == "h200" {
		dev.PeakBandwidth = 4.81e12
	}
	return dev
}

// summarize is what d runs with, as the oracle records it (oracleDecision).
func summarize(d DecodeDecision, err error) oracleDecision {
	if err != nil {
		return oracleDecision{err: err.Error()}
	}
	flags := int(d.diag.flags())
	for _, f := range []struct {
		on  bool
		bit int
	}{{d.HeadsFast, flagBitHeadsFast}, {d.FusedMerge, flagBitFusedMerge}, {d.EvictFirst, flagBitEvictFirst},
		{d.EarlyPrologue, flagBitEarlyPrologue}, {d.RoPE, flagBitRoPE}} {
		if f.on {
			flags |= f.bit
		}
	}
	return oracleDecision{kernel: d.Kernel.Name, plan: d.Plan, grid: d.Grid, flags: flags,
		merge: [2]int{d.MergeChunk, d.MergeChunks}, reduce: d.ReduceKernel != "", foldsRoPE: d.FoldsRoPE}
}

// The DECODE_FLAG_* bits of decode.cuh, as the oracle records them.
const (
	flagBitHeadsFast     = 1
	flagBitFusedMerge    = 4
	flagBitEvictFirst    = 8
	flagBitEarlyPrologue = 128
	flagBitRoPE          = 256
)

// checkOracle compares a decision with the oracle's: an error for an error (ErrUnsupported, the only
// kind the oracle has), else every field.
func checkOracle(t *testing.T, what string, got, want oracleDecision) {
	t.Helper()
	if want.err != "" || got.err != "" {
		if want.err == "" || got.err == "" {
			t.Errorf("%s: got %+v, want %+v", what, got, want)
		}
		return
	}
	if got != want {
		t.Errorf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// graphBucketOf and graphBucketLowOf are the model's graph buckets (model.graphBucket, graphBucketLow).
func graphBucketOf(n int) int {
	if n <= 32 {
		return nextPowerOfTwo(n)
	}
	return (n + 7) / 8 * 8
}

func graphBucketLowOf(b int) int {
	if b <= 32 {
		return b/2 + 1
	}
	return b - 7
}

// TestDecideModelCalls checks Decide against the oracle on the model's decode calls of Llama-3-8B and
// Llama-3.2-1B at batches 1-256 and contexts 300, 1152 and 4096, eager and captured, on the H100 and the
// H200: the RoPE fold asked first (as the model does), then the call with it.
func TestDecideModelCalls(t *testing.T) {
	shapes := map[string][3]int{"llama3-8b": {32, 8, 128}, "llama3.2-1b": {32, 8, 64}}
	for _, tc := range oracleModelCalls {
		name := fmt.Sprintf("%s/%s/b%d/ctx%d/graph=%v", tc.device, tc.model, tc.batch, tc.ctx, tc.graph)
		t.Run(name, func(t *testing.T) {
			sh := shapes[tc.model]
			c := DecodeCall{NumHeads: sh[0], NumKVHeads: sh[1], HeadDim: sh[2], BlockSize: 16, DType: BF16,
				WorkspaceBytes: 32 << 20}
			if tc.graph {
				capTokens := max(256, nextPowerOfTwo(tc.ctx))
				bucket := graphBucketOf(tc.batch)
				c.ContextLens = make([]int32, bucket)
				for i := range c.ContextLens {
					c.ContextLens[i] = int32(capTokens)
				}
				c.MaxBlocks, c.Dependent = capTokens/16, bucket <= 8
				c.Graph = &GraphCall{MinBatch: graphBucketLowOf(bucket)}
			} else {
				c.ContextLens = make([]int32, tc.batch)
				for i := range c.ContextLens {
					c.ContextLens[i] = int32(tc.ctx - i%7)
				}
				c.MaxBlocks, c.Dependent = (tc.ctx+15)/16, tc.batch <= 8
			}
			dev := dispatchDevice(tc.device)
			plain, err := Decide(c, dev)
			if err != nil {
				t.Fatal(err)
			}
			if plain.FoldsRoPE {
				c.RoPE = &DecodeRoPE{QKVCols: (sh[0] + 2*sh[1]) * sh[2]}
			}
			d, err := Decide(c, dev)
			got := summarize(d, err)
			if got.foldsRoPE != plain.FoldsRoPE {
				t.Errorf("FoldsRoPE %v with RoPE, %v without", got.foldsRoPE, plain.FoldsRoPE)
			}
			checkOracle(t, "decision", got, tc.want)
		})
	}
}

// TestDecideGrid checks Decide against the oracle on the attention grid's calls, as CUDAKernels.Decode
// makes them (no RoPE, no dependent launch, the workspace left to the launch).
func TestDecideGrid(t *testing.T) {
	for _, tc := range oracleGridCalls {
		s := tc.shape
		t.Run(fmt.Sprintf("%s/b%d_ctx%d_hq%d_hkv%d_d%d", tc.device, s[0], s[1], s[2], s[3], s[4]), func(t *testing.T) {
			lens := make([]int32, s[0])
			for i := range lens {
				lens[i] = int32(s[1])
			}
			c := DecodeCall{ContextLens: lens, MaxBlocks: s[1] / 16, NumHeads: s[2], NumKVHeads: s[3], HeadDim: s[4],
				BlockSize: 16, DType: BF16}
			checkOracle(t, "decision", summarize(Decide(c, dispatchDevice(tc.device))), tc.want)
		})
	}
}

// oracleTunings are the tunings of oracleForcedCalls, by index.
var oracleTunings = []CUDATuning{{}, {SequenceMajor: true}, {NoNarrow: true}, {NoPersistent: true}, {SplitKReduceKernel: true},
	{MergeChunk: 3}, {NoEvictFirst: true}, {EvictFirstLarge: true}, {LatePrologue: true}, {persistPrograms: 5}}

// TestDecideForced checks Decide against the oracle on forced calls (CUDAKernels.DecodeGrouped and
// DecodeSplitK) under every tuning switch and path, in bf16 and fp32.
func TestDecideForced(t *testing.T) {
	dev := dispatchDevice("h100")
	for _, tc := range oracleForcedCalls {
		s := tc.shape
		name := fmt.Sprintf("b%d_ctx%d_hq%d_hkv%d_d%d/%s/tuning%d/%v", s[0], s[1], s[2], s[3], s[4], tc.dtype, tc.tuning, tc.path)
		t.Run(name, func(t *testing.T) {
			lens := make([]int32, s[0])
			for i := range lens {
				lens[i] = int32(s[1] - i%3)
			}
			dt := BF16
			if tc.dtype == "fp32" {
				dt = FP32
			}
			c := DecodeCall{ContextLens: lens, MaxBlocks: (s[1] + 15) / 16, NumHeads: s[2], NumKVHeads: s[3], HeadDim: s[4],
				BlockSize: 16, DType: dt, Dependent: true, Path: tc.path, Tuning: oracleTunings[tc.tuning]}
			for _, f := range []struct {
				what  string
				force ForcedPlan
				want  oracleDecision
			}{{"grouped", ForcedPlan{Kernel: Grouped}, tc.grouped}, {"split", ForcedPlan{Kernel: SplitK, PartitionTokens: 128}, tc.split}} {
				c.Force = &f.force
				d, err := Decide(c, dev)
				if err != nil && !errors.Is(err, ErrUnsupported) {
					t.Errorf("%s: %v, want ErrUnsupported", f.what, err)
				}
				got := summarize(d, err)
				got.foldsRoPE = false // the oracle has none for forced calls
				checkOracle(t, f.what, got, f.want)
			}
		})
	}
}

// TestDecideKernels checks that every kernel Decide picks is one CUDAKernels loads, over the oracle's
// shapes and a sweep of group sizes, head_dims, dtypes, paths and KV page types (FP8 pages: the FMA
// path's _e4m3 kernels, and the narrow mma tile's at head_dim 64 and 128, chunked past 8 heads), and that the kernel list
// names each entry point once.
func TestDecideKernels(t *testing.T) {
	var names []string
	for _, k := range decodeKernels() {
		names = append(names, k.Name)
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(names) {
		t.Fatalf("decodeKernels names an entry point twice")
	}
	if len(names) != 136 {
		t.Errorf("%d kernels, want 136 (the fat binary's 144, less its 8 reduce kernels)", len(names))
	}
	dev := dispatchDevice("h100")
	for _, kvFP8 := range []bool{false, true} {
		for _, dt := range []DType{BF16, FP16, FP32} {
			for _, d := range []int{64, 128, 256} {
				for _, kv := range []int{1, 2, 8} {
					for _, group := range []int{1, 3, 4, 8, 9, 16, 17, 32, 33, 64, 65, 96} {
						for _, path := range []CUDAPath{PathAuto, PathMMA, PathFMA} {
							for _, batch := range []int{1, 300} {
								lens := make([]int32, batch)
								for i := range lens {
									lens[i] = 256
								}
								c := DecodeCall{ContextLens: lens, MaxBlocks: 16, NumHeads: kv * group, NumKVHeads: kv, HeadDim: d,
									BlockSize: 16, DType: dt, Path: path, KVFP8: kvFP8}
								for _, force := range []*ForcedPlan{nil, {Kernel: Grouped}, {Kernel: SplitK, PartitionTokens: 64}} {
									c.Force = force
									got, err := Decide(c, dev)
									if err != nil {
										// Unsupported: fp32 and groups past 64 on the mma path; at head_dim 256, fp32 on any path
										// and groups past 8 on the mma path.
										// FP8 pages: no fp32; on the mma path the narrow tile (in chunks of 8 heads) at head_dim
										// 64 and 128 only.
										wide := d == 256 && (dt == FP32 || path == PathMMA && group > 8)
										fp8 := kvFP8 && (dt == FP32 || path == PathMMA && d == 256)
										if !errors.Is(err, ErrUnsupported) || !wide && !fp8 && (path != PathMMA || dt != FP32 && group <= 64) {
											t.Errorf("%v d%d G%d %v: %v", dt, d, group, path, err)
										}
										continue
									}
									if !slices.Contains(names, got.Kernel.Name) {
										t.Errorf("%v d%d G%d %v: kernel %s is not loaded", dt, d, group, path, got.Kernel.Name)
									}
									if got.Kernel.Rows < min(group, 16) && got.Kernel.Path == PathMMA && !got.Kernel.KVFP8 { // FP8: chunks of 8
										t.Errorf("%v d%d G%d: head tile of %d rows", dt, d, group, got.Kernel.Rows)
									}
									fp8MMA := got.Kernel.Path == PathMMA && got.Kernel.Rows == 8 && d != 256 &&
										strings.HasSuffix(got.Kernel.Name, "_n8c") == (group > 8)
									if got.Kernel.KVFP8 != kvFP8 || kvFP8 && (got.Kernel.Path != PathFMA && !fp8MMA || got.Kernel.Persistent ||
										!strings.Contains(got.Kernel.Name, "_e4m3_")) {
										t.Errorf("%v d%d G%d FP8 KV %v: kernel %+v", dt, d, group, kvFP8, got.Kernel)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestFillsWave: work fills a wave from 9/10 of its slots.
func TestFillsWave(t *testing.T) {
	for _, tc := range []struct {
		work, slots float64
		want        bool
	}{{119, 132, true}, {118, 132, false}, {9, 10, true}, {8.9, 10, false}, {0, 0, true}, {264, 264, true}} {
		if got := fillsWave(tc.work, tc.slots); got != tc.want {
			t.Errorf("fillsWave(%v, %v) = %v, want %v", tc.work, tc.slots, got, tc.want)
		}
	}
}
