//go:build cuda

package attention

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
)

// FP8 KV scales of the GPU tests: |x| < 1, so K's 1/600 saturates the values beyond 448/600 (a quarter
// of them) and V's 1/64 leaves the large codes unused and puts small values among the subnormals, as
// TestFP8Attention does on the CPU.
const fp8TestKScale, fp8TestVScale = 1.0 / 600, 1.0 / 64

// newGPUFP8Case is newGPUWindowCase over FP8 pages: the device's K and V become the e4m3 codes of the
// case's values with scales ks and vs, its host cache (and so the float64 reference) holds what they
// read back (float32(code) · scale), and the CPU twin's FP8 cache is returned.
func newGPUFP8Case(t *testing.T, k *CUDAKernels, rng *rand.Rand, codec elemCodec, group, kvHeads, headDim, blockSize, window int,
	lens []int32, ks, vs float32) (*gpuDecodeCase, *Cache) {
	t.Helper()
	c := newGPUWindowCase(t, k, rng, codec, group, kvHeads, headDim, blockSize, window, lens)
	return c, c.toFP8(t, ks, vs)
}

// toFP8 puts case c over FP8 pages: the device's K and V become the e4m3 codes of its values with
// scales ks and vs, its host cache (and so the float64 reference) holds what they read back (float32(code)
// · scale), and args asks for FP8 pages. It returns the CPU twin's FP8 cache.
func (c *gpuDecodeCase) toFP8(t *testing.T, ks, vs float32) *Cache {
	t.Helper()
	h := c.cache
	f8 := NewFP8Cache(h.NumBlocks, h.BlockSize, h.NumKVHeads, h.HeadDim).WithScales(ks, vs)
	for i := range h.K {
		f8.K8[i] = dtype.F32ToE4M3Sat(h.K[i] / ks)
		f8.V8[i] = dtype.F32ToE4M3Sat(h.V[i] / vs)
		h.K[i] = dtype.E4M3ToF32(f8.K8[i]) * ks
		h.V[i] = dtype.E4M3ToF32(f8.V8[i]) * vs
	}
	c.ref = denseDecodeReference(c.q, h, c.numHeads, float64(c.scale), c.tables, c.lens, c.window)
	c.dK, c.dV = c.upload(t, f8.K8), c.upload(t, f8.V8)
	c.fp8, c.kScale, c.vScale = true, ks, vs
	return f8
}

// fp8Args are c's call arguments over FP8 pages of scales ks and vs.
func (c *gpuDecodeCase) fp8Args(ks, vs float32) *CUDADecodeArgs {
	a := c.args()
	a.KVFP8, a.KScale, a.VScale = true, ks, vs
	return a
}

// TestCUDADecodeFP8KV runs the decode kernels over FP8 e4m3 pages (their _e4m3 entry points: the narrow
// mma tile's at head_dim 64 and 128 for groups of up to 8 heads, and the FMA kernels'): the
// grouped kernel, split-k with two partition sizes under the fused merge (one level and chunks of 2)
// and the reduce kernel, Decode's own plan, and on compute capability 9.0 dependent launches; queries
// and output in bf16 and fp16; head_dim 64, 128 and 256; groups 1, 4, 8 and 16 over 2
// KV heads; pages 8, 16 and 32; a ragged batch (contexts 1 to a few thousand) and sliding windows
// (fp32 queries are refused: ErrUnsupported).
// Each output is checked against the float64 reference over the values the codes read back and against
// the CPU twin's FP8 attention (Attend over the FP8 Cache) within the dtype's tolerance of the plain
// kernels (codec.tol: 1e-2 in 16 bits, 1e-5 in fp32). Why the same bound: the kernels read exactly the
// CPU's values (e4m3 → f16 → float is exact, V's scale is the same float32 product), and folding K's
// scale into the queries moves each score by float32 rounding only, far below the output's rounding to
// 16 bits and within fp32's 1e-5; a scale missing or misapplied moves the output by its own size (the
// scales are 1/600 and 1/64), a code read as the wrong byte by a random amount. (The mma kernels
// convert each tile's codes to the queries' 16-bit type, exactly, fold K's scale into the scores' and
// V's into the sums: the plain mma kernels' arithmetic.) The mma path refuses FP8 pages it has no
// kernel for (ErrUnsupported), and RoPE is refused over FP8 pages.
func TestCUDADecodeFP8KV(t *testing.T) {
	k := gpuKernels(t)
	if info := k.dev.Info(); info.Major*10+info.Minor < 89 {
		t.Skipf("%s: FP8 KV needs compute capability 8.9", info.Name)
	}
	type shape struct{ headDim, blockSize, group, window int }
	var shapes []shape
	for _, d := range []int{64, 128, 256} {
		for _, g := range []int{1, 4, 8, 16} {
			shapes = append(shapes, shape{d, 16, g, 0})
		}
	}
	shapes = append(shapes, shape{128, 8, 4, 0}, shape{64, 32, 8, 0}, shape{128, 16, 4, 21}, shape{128, 16, 8, 300},
		shape{256, 16, 2, 64})
	for _, codec := range codecs {
		if codec.typ == cuda.Float32 { // 16-bit queries only
			c := &gpuDecodeCase{codec: codec, numHeads: 8, kvHeads: 2, headDim: 128, blockSize: 16, maxBlocks: 1, lens: []int32{1},
				q: make([]float32, 8*128), dev: k.Device()}
			if err := k.decodeGrouped(nil, c.fp8Args(1, 1), PathAuto, CUDATuning{}); !errors.Is(err, ErrUnsupported) {
				t.Errorf("fp32 queries over FP8 pages: %v, want ErrUnsupported", err)
			}
			continue
		}
		for _, sh := range shapes {
			name := fmt.Sprintf("%s/d%d/page%d/g%d/w%d", codec.name, sh.headDim, sh.blockSize, sh.group, sh.window)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(uint64(sh.headDim*1000+sh.blockSize*100+sh.group), uint64(codec.typ)+uint64(sh.window)))
				lens := raggedLens(rng, sh.blockSize)
				c, f8 := newGPUFP8Case(t, k, rng, codec, sh.group, 2, sh.headDim, sh.blockSize, sh.window, lens, fp8TestKScale, fp8TestVScale)
				runFP8Variants(t, k, c, f8)
			})
		}
	}
}

func runFP8Variants(t *testing.T, k *CUDAKernels, c *gpuDecodeCase, f8 *Cache) {
	t.Helper()
	twin := toFloat64(c.checkedTwin(t, f8))
	check := func(what string) {
		t.Helper()
		c.checkOutput(t, what, twin, "the CPU twin's FP8 attention")
	}
	defer checkCountersZero(t, k)
	a := c.fp8Args(fp8TestKScale, fp8TestVScale)
	partitions := []int{2 * c.blockSize, 256}
	ws, wsBytes := c.splitWorkspace(t)

	mma := fp8MMA(c.headDim, CUDATuning{})
	paths := []CUDAPath{PathAuto, PathFMA}
	if mma {
		paths = append(paths, PathMMA)
	}
	for _, path := range paths {
		c.poisonOut(t)
		if err := k.decodeGrouped(nil, a, path, CUDATuning{}); err != nil {
			t.Fatal(err)
		}
		check("grouped/" + path.String())
	}
	for _, path := range paths[:2] {
		for _, part := range partitions {
			for _, m := range []struct {
				name string
				t    CUDATuning
			}{{"fused", CUDATuning{}}, {"fused-chunk2", CUDATuning{MergeChunk: 2}}, {"reduce-kernel", CUDATuning{SplitKReduceKernel: true}}} {
				c.poisonOut(t)
				poison(t, c.dev, ws, wsBytes)
				if err := k.decodeSplitK(nil, a, part, ws, wsBytes, path, m.t); err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("split-k/%v/partition%d/%s", path, part, m.name))
			}
		}
	}
	c.poisonOut(t)
	big := SplitKWorkspaceBound(len(c.lens), c.numHeads, c.headDim, c.maxBlocks*c.blockSize)
	wsBig := c.alloc(t, big)
	plan, err := k.Decode(nil, a, wsBig, big)
	if err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("decode/%+v", plan))
	if info := k.dev.Info(); info.Major == 9 && info.Minor == 0 {
		d := *a
		d.Dependent = true
		c.poisonOut(t)
		if err := k.decodeGrouped(nil, &d, PathAuto, CUDATuning{}); err != nil {
			t.Fatal(err)
		}
		check("grouped/dependent")
		c.poisonOut(t)
		poison(t, c.dev, ws, wsBytes)
		if err := k.decodeSplitK(nil, &d, 2*c.blockSize, ws, wsBytes, PathAuto, CUDATuning{}); err != nil {
			t.Fatal(err)
		}
		check("split-k/dependent")
	}
	if err := k.decodeGrouped(nil, a, PathMMA, CUDATuning{}); !mma && !errors.Is(err, ErrUnsupported) {
		t.Errorf("mma path over FP8 pages at head_dim %d, group %d: %v, want ErrUnsupported", c.headDim, c.numHeads/c.kvHeads, err)
	}
	if c.headDim != wideHeadDim {
		r := *a
		r.RoPE = &CUDARoPE{QKV: c.dQ, QKVCols: (c.numHeads + 2*c.kvHeads) * c.headDim, Positions: c.dLn, Slots: c.dLn, InvFreq: c.dQ}
		if err := k.decodeGrouped(nil, &r, PathAuto, CUDATuning{}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("RoPE over FP8 pages: %v, want ErrUnsupported", err)
		}
	}
	bad := *a
	bad.VScale = 0
	if err := k.decodeGrouped(nil, &bad, PathAuto, CUDATuning{}); err == nil {
		t.Error("a zero V scale was taken")
	}
}

// TestCUDAPrefillFP8KV runs every prefill kernel loaded over FP8 pages (the Hopper kernel,
// PrefillAttentionSM90_<dtype>_e4m3_d<D>, where it is loaded; the tensor-core kernel,
// PrefillAttentionMMA_<dtype>_e4m3_d<D>; the FMA one, PrefillAttention_<dtype>_e4m3_d<D>: chunks with
// cached FP8 prefixes, a whole prompt, a single row; windows too) against the float64 reference over the
// values the codes read back and against the CPU twin's FP8 attention, within the dtype's tolerance of
// the plain kernels (the kernels read float32(code) · scale, the CPU's very values; see
// TestCUDADecodeFP8KV): bf16, fp16 and fp32 (FMA only), head sizes 64, 128 and 256, pages 8, 16, 32 and
// 64, groups 1, 4 and 8, head sizes 8 and 32 at one shape, and the last rows of a 32768-token prompt.
func TestCUDAPrefillFP8KV(t *testing.T) {
	dev, pre := gpuPrefill(t)
	if info := dev.Info(); info.Major*10+info.Minor < 89 {
		t.Skipf("%s: FP8 KV needs compute capability 8.9", info.Name)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	scales := []float32{fp8TestKScale, fp8TestVScale}
	for _, cd := range prefillCodecs {
		for _, headDim := range []int{64, 128, 256} {
			for _, blockSize := range []int{8, 16, 32, 64} {
				for _, group := range []int{1, 4, 8} {
					for _, kernel := range pre.Kernels(headDim, blockSize, cd.typ, true) {
						t.Run(fmt.Sprintf("%s/d%d/page%d/group%d/%v", cd.name, headDim, blockSize, group, kernel), func(t *testing.T) {
							runPrefillCase(t, dev, pre, rng, cd, prefillSeqs, headDim, blockSize, group, kernel, 0, scales)
						})
					}
				}
			}
		}
		for _, window := range []int{1, 21, 130} {
			for _, kernel := range pre.Kernels(128, 16, cd.typ, true) {
				t.Run(fmt.Sprintf("%s/d128/w%d/%v", cd.name, window, kernel), func(t *testing.T) {
					runPrefillCase(t, dev, pre, rng, cd, prefillSeqs, 128, 16, 4, kernel, window, scales)
				})
			}
		}
		for _, headDim := range []int{8, 32} {
			t.Run(fmt.Sprintf("%s/d%d", cd.name, headDim), func(t *testing.T) {
				runPrefillCase(t, dev, pre, rng, cd, prefillSeqs, headDim, 16, 4, PrefillAuto, 0, scales)
			})
		}
	}
	for _, kernel := range pre.Kernels(128, 16, cuda.BFloat16, true) {
		if kernel != PrefillFMA {
			t.Run("long/"+kernel.String(), func(t *testing.T) {
				runPrefillCase(t, dev, pre, rng, prefillCodecs[0], [][2]int{{32768, 40}, {4096, 1}}, 128, 16, 4, kernel, 0, scales)
			})
		}
	}
	if len(pre.Kernels(128, 16, cuda.BFloat16, true)) == 0 || len(pre.Kernels(128, 16, cuda.DataType(99), true)) != 0 {
		t.Error("Kernels over FP8 pages")
	}
}
