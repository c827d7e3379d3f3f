// FP8 (OCP e4m3) W8A8 products: the CUDA backend's MatMul with a weight from UploadFP8, computing what
// model.FP8Weight defines (docs/fp8.md, "The arithmetic") and the CPU backend computes:
//
//	s[r]      = input_scale, or max(max_i |x[r][i]| / 448, min_scale)   (a NaN in the row: NaN)
//	xq[r][i]  = e4m3(x[r][i] / s[r])                                     IEEE division, saturating cast
//	acc[r][o] = Σ_i float(xq[r][i]) · float(w[o][i])                     float accumulation
//	y[r][o]   = acc[r][o] · (s[r] · sw[o])  (+ bias[o])
//
// QuantizeE4M3_<T> writes each input row's codes and scale (one block a row), or the op that produces
// the input does (NormE4M3, SwiGLUE4M3_<T>, at the end: the plan fuses them where the input is theirs);
// MatMulE4M3_nt<NT> streams the weight codes and computes the product (decode sizes), or cuBLASLt's e4m3
// GEMM computes the unscaled sums and ScaleE4M3 applies the scales and the bias (prefill; the plan picks). The weights are stored with
// rows and columns padded with zero codes to multiples of 16 and 64 (kp columns, also the stride of the
// quantized activations, whose padding columns QuantizeE4M3 zeroes): every row then starts 64-byte
// aligned and a 64-column k-block never reads past a row, and a zero code adds an exact 0.
//
// The product runs on the tensor cores as mma.sync.m16n8k16 in f16 with float accumulators: every e4m3
// value is an f16 value (3 mantissa bits, exponents 2^-9..2^8 inside f16's normal range), so the
// codes convert exactly (cvt.rn.f16x2.e4m3x2, one instruction for two on sm_89 and newer) and each
// product of two is exact in float, as the definition asks; only the order of the float sum differs
// from the CPU's. The layout is the skinny product's (gemv.cu): a warp owns a tile of 16 weight rows
// (the A operand) × 8·NT token rows (B); lane (g, c) (g = lane/4, c = lane%4) loads, per 64-column
// k-block, the 16 codes 16c..16c+15 of weight rows lo = 16·tile + g and hi = lo + 8 and of its token
// rows (one 16-byte load each: half the bytes of bf16 for the same columns; with one token tile the
// token rows' f16 values instead, two loads, which QuantizeE4M3 or the fused producer wrote beside the
// codes: the conversions then are the weights' alone), and feeds codes
// 16c+4s..16c+4s+3 to the fragment slots of logical k {2c, 2c+1, 2c+8, 2c+9} of the s-th of four mma
// (A and B permuted alike, so each mma sums 16 distinct columns). U k-blocks are loaded before their
// mma (bytes in flight). A block is 8 warps: rb = 8/ks tiles, each split over k between ks warps whose
// partial tiles the first sums through shared memory before the epilogue. Grid: x the chunks of 8·NT
// token rows (fastest, so the blocks of one weight tile run together and read its bytes once from
// memory), y the groups of rb tiles. On Hopper the same layout runs on e4m3 mma with no conversion
// (fp8_sm90.cu, MatMulE4M3mma_nt<NT>), which the backend loads in their place.
#include <cuda_fp8.h>

#include "common.cuh"

// e4m3_to_f16 is the value of one code as f16 (exact).
__device__ __forceinline__ __half e4m3_to_f16(unsigned char c) {
	__half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3);
	return __half(h);
}

// E4M3QuotientCheck holds E4M3Quotient to __fdiv_rn (TestCUDAE4M3Quotient): for each of n pairs (x[i],
// s[i]) it counts in bad[0] the codes that differ and in bad[1] the quotients of a code's range (2^-11 to
// 448 in magnitude, where a last bit may move a code) that differ in any bit.
struct E4M3QuotientCheckParams {
	const float *x, *s;
	unsigned *bad;
	int n;
};
extern "C" __global__ void E4M3QuotientCheck(const E4M3QuotientCheckParams p) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= p.n) return;
	const float x = p.x[i], s = p.s[i];
	const E4M3Quotient div(s);
	const float want = __fdiv_rn(x, s), got = div(x);
	const unsigned char wc = __nv_cvt_float_to_fp8(want, __NV_SATFINITE, __NV_E4M3), gc = div.code(x);
	if (wc != gc) atomicAdd(&p.bad[0], 1u);
	if (fabsf(want) >= 0x1p-11f && fabsf(want) < 448.f && __float_as_uint(want) != __float_as_uint(got)) atomicAdd(&p.bad[1], 1u);
}

struct QuantizeE4M3Params {
	unsigned char *codes; // [m][kp] e4m3
	__half *x16;          // [m][kp]: the codes' values in f16 (exact), for MatMulE4M3_nt1; or null
	float *scales;        // [m]
	const void *x;        // [m][k] of T
	float input_scale;    // > 0: static; 0: per row
	float min_scale;      // the per-row scale's floor (1/(448·512))
	int k, kp;
};

template <typename T> __device__ __forceinline__ void quantize_e4m3(const QuantizeE4M3Params &p) {
	__shared__ float scratch[32];
	__shared__ int nan_seen;
	pdl_wait();
	// The product after this kernel may launch now: its blocks stream their first weights while this
	// one runs, and wait (pdl_wait) before they read what it writes.
	pdl_launch_dependents();
	const int r = blockIdx.x;
	const T *x = reinterpret_cast<const T *>(p.x) + (long long)r * p.k;
	unsigned char *q = p.codes + (long long)r * p.kp;
	float s = p.input_scale;
	if (s == 0.f) {
		float amax = 0.f;
		bool nan = false;
		for (int i = threadIdx.x; i < p.k; i += blockDim.x) {
			const float v = fabsf(Num<T>::load(x[i]));
			nan |= v != v;
			amax = fmaxf(amax, v);
		}
		if (threadIdx.x == 0) nan_seen = 0;
		for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
		const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
		__syncthreads(); // orders nan_seen's clearing before the atomics
		if (nan) atomicOr(&nan_seen, 1);
		if (lane == 0) scratch[warp] = amax;
		__syncthreads();
		amax = lane < warps ? scratch[lane] : 0.f;
		for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
		s = nan_seen ? __int_as_float(0x7fffffff) : fmaxf(__fdiv_rn(amax, 448.f), p.min_scale);
	}
	// No clamp before the cast: the saturating cast maps beyond ±448 to ±448 and keeps NaN a NaN.
	const E4M3Quotient div(s);
	for (int i = threadIdx.x; i < p.kp; i += blockDim.x) {
		unsigned char c = 0;
		if (i < p.k) c = div.code(Num<T>::load(x[i]));
		q[i] = c;
		if (p.x16 != nullptr) p.x16[(long long)r * p.kp + i] = e4m3_to_f16(c);
	}
	if (threadIdx.x == 0) p.scales[r] = s;
}

#define FP8_QUANTIZE(TN, T)                                                                                   \
	extern "C" __global__ void QuantizeE4M3_##TN(const QuantizeE4M3Params p) { quantize_e4m3<T>(p); }
FP8_QUANTIZE(f32, float)
FP8_QUANTIZE(bf16, __nv_bfloat16)
FP8_QUANTIZE(f16, __half)

#include "fp8.cuh"

#define FP8_MATMUL(NT, U)                                                                                     \
	extern "C" __global__ void __launch_bounds__(256) MatMulE4M3_nt##NT(const MatMulE4M3Params p) {        \
		matmul_e4m3<NT, U, CvtMma>(p);                                                                     \
	}
// One token tile: three blocks an SM (80 registers a thread), as many loads in flight as the registers allow.
extern "C" __global__ void __launch_bounds__(256, 3) MatMulE4M3_nt1(const MatMulE4M3Params p) {
	matmul_e4m3<1, 4, CvtMma>(p);
}
FP8_MATMUL(2, 4)
FP8_MATMUL(4, 2)
FP8_MATMUL(8, 1)

// ScaleE4M3: the epilogue of an FP8 product that cuBLASLt computed unscaled into y (acc, float32; a
// cuBLASLt with outer-vector scales applies them itself):
// y[r][o] = acc[r][o] · (sx[r] · sw[o]) (+ bias[o]), as MatMulE4M3's epilogue. Block (x, y) scales 4·256
// columns of rows y, y + gridDim.y, … four at a time: n is a multiple of 4 (fp8Path), and no element's
// row needs a division (64-bit, in a loop over every element, it made this pass cost as much as the GEMM
// before it at prefill sizes).
struct ScaleE4M3Params {
	float *y;          // [m][n]
	const float *sx;   // [m]
	const float *sw;   // [n] (or more)
	const float *bias; // [n], or null
	int m, n;
};

extern "C" __global__ void ScaleE4M3(const ScaleE4M3Params p) {
	pdl_wait();
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (4 * c < p.n) {
		const float4 w = reinterpret_cast<const float4 *>(p.sw)[c];
		const float4 b = p.bias != nullptr ? reinterpret_cast<const float4 *>(p.bias)[c] : make_float4(0.f, 0.f, 0.f, 0.f);
		for (int r = blockIdx.y; r < p.m; r += gridDim.y) {
			const float sx = p.sx[r];
			float4 *y = reinterpret_cast<float4 *>(p.y + (long long)r * p.n) + c;
			float4 v = *y;
			v.x *= sx * w.x, v.y *= sx * w.y, v.z *= sx * w.z, v.w *= sx * w.w;
			if (p.bias != nullptr) v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
			*y = v;
		}
	}
	pdl_launch_dependents();
}

// The producers of an FP8 product's input with its quantization fused in (the plan's choice: the op
// before the product writes nothing else the step reads): each writes, instead of its output row in T,
// the row's e4m3 codes [kp] and scale as QuantizeE4M3 would from its float values, so the value is
// quantized from float as the CPU backend quantizes it, without the rounding to T in between. One block a
// row; the row's values are computed twice (for the scale, then for the codes) rather than kept, so any
// width fits; a thread recomputes only what it computed (and, for the norm, wrote) before.
//
// NormE4M3: residual += add (when given), then v = w · (residual · inv), inv = 1/sqrt(mean(residual²) +
// eps), as AddRMSNorm (norm.cu). SwiGLUE4M3_<T>: v = silu_mul<T>(gate, up), as SwiGLU (swiglu.cu; T only
// picks its arithmetic, as there).
//
// Scales of the product before (in_sx set): the float input (NormE4M3's add, SwiGLUE4M3's gate_up) is an
// FP8 product's unscaled sums as cuBLASLt left them, and each element is first scaled as ScaleE4M3 would
// have, acc · (in_sx[row] · in_sw[col]) with no contraction into the add after it, so the result is
// ScaleE4M3's to the bit and that pass (a read and a write of the whole product) does not run. in_sx is
// the product's input scales, the array this kernel writes its own row scales to: each thread reads its
// row's scale before the block's first barrier, and thread 0 writes the new one after the last.
struct FusedE4M3Params {
	unsigned char *codes; // [rows][kp]
	__half *x16;          // [rows][kp]: the codes' f16 values (QuantizeE4M3Params), or null
	float *scales;        // [rows]
	float *residual;      // NormE4M3: [rows][cols], updated in place; SwiGLUE4M3: gate_up [rows][2·cols] (_in16: of bf16)
	const float *add;     // NormE4M3: [rows][cols], or null
	const float *weight;  // NormE4M3: [cols]
	const float *in_sx;   // [rows]: the scales of the product before's input, or null (see above)
	const float *in_sw;   // NormE4M3: [cols]; SwiGLUE4M3: [2·cols]: that product's weight scales
	float eps;
	float input_scale; // > 0: static; 0: per row
	float min_scale;
	int cols, kp;
};

// row_scale returns the row's scale from each thread's largest |v| and NaN flag (QuantizeE4M3's rule):
// input_scale where static (non-zero), else max|v|/448, at least min_scale, NaN where a value is.
__device__ __forceinline__ float row_scale(float amax, bool nan, float input_scale, float min_scale, float *scratch,
                                           int *nan_seen) {
	if (input_scale != 0.f) return input_scale;
	if (threadIdx.x == 0) *nan_seen = 0;
	for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	__syncthreads();
	if (nan) atomicOr(nan_seen, 1);
	if (lane == 0) scratch[warp] = amax;
	__syncthreads();
	amax = lane < warps ? scratch[lane] : 0.f;
	for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	return *nan_seen ? __int_as_float(0x7fffffff) : fmaxf(__fdiv_rn(amax, 448.f), min_scale);
}

// fused_e4m3 runs value(i) (the row's i-th float value) twice around the scale.
template <typename F> __device__ __forceinline__ void fused_e4m3(const FusedE4M3Params &p, F value, float *scratch) {
	__shared__ int nan_seen;
	const long long row = blockIdx.x;
	float amax = 0.f;
	bool nan = false;
	if (p.input_scale == 0.f) {
		for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
			const float v = fabsf(value(i, true));
			nan |= v != v;
			amax = fmaxf(amax, v);
		}
	}
	const float s = row_scale(amax, nan, p.input_scale, p.min_scale, scratch, &nan_seen);
	unsigned char *q = p.codes + row * p.kp;
	const E4M3Quotient div(s);
	for (int i = threadIdx.x; i < p.kp; i += blockDim.x) {
		unsigned char c = 0;
		if (i < p.cols) c = div.code(value(i, false));
		q[i] = c;
		if (p.x16 != nullptr) p.x16[row * p.kp + i] = e4m3_to_f16(c);
	}
	if (threadIdx.x == 0) p.scales[row] = s;
}

// in_scale is the block's row's scale of the product before (1 without one; see FusedE4M3Params), read by
// every thread before a barrier that comes before any write of the row's new scale.
__device__ __forceinline__ float in_scale(const FusedE4M3Params &p) {
	if (!p.in_sx) return 1.f;
	const float sx = p.in_sx[blockIdx.x];
	__syncthreads();
	return sx;
}

extern "C" __global__ void NormE4M3(const FusedE4M3Params p) {
	__shared__ float scratch[32];
	const long long row = blockIdx.x;
	float *res = p.residual + row * p.cols;
	const float *add = p.add ? p.add + row * p.cols : nullptr;
	pdl_wait();
	pdl_launch_dependents();
	const float sx = in_scale(p);
	float ss = 0.f;
	for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
		float x = res[i];
		if (add) {
			x += p.in_sx ? __fmul_rn(add[i], __fmul_rn(sx, p.in_sw[i])) : add[i];
			res[i] = x;
		}
		ss += x * x;
	}
	ss = block_sum(ss, scratch);
	const float inv = 1.0f / sqrtf(ss / (float)p.cols + p.eps);
	fused_e4m3(p, [&](int i, bool) { return p.weight[i] * (res[i] * inv); }, scratch);
}

// GU is gate_up's element type: float, or __nv_bfloat16 for the _in16 entry points, which read an FP8
// product's unscaled sums as cuBLASLt wrote them in bfloat16 (opPlan.fp8Out16): half the bytes of the
// float sums, each rounded once to bfloat16 before its scale.
template <typename T, typename GU = float> __device__ __forceinline__ void swiglu_e4m3(const FusedE4M3Params &p) {
	__shared__ float scratch[32];
	const GU *gu = reinterpret_cast<const GU *>(p.residual) + (long long)blockIdx.x * 2 * p.cols;
	pdl_wait();
	pdl_launch_dependents();
	const float sx = in_scale(p);
	fused_e4m3(p,
	           [&](int i, bool) {
		           const float g = Num<GU>::load(gu[i]), u = Num<GU>::load(gu[p.cols + i]);
		           if (!p.in_sx) return silu_mul<T>(g, u);
		           return silu_mul<T>(__fmul_rn(g, __fmul_rn(sx, p.in_sw[i])), __fmul_rn(u, __fmul_rn(sx, p.in_sw[p.cols + i])));
	           },
	           scratch);
}

extern "C" __global__ void SwiGLUE4M3_f32(const FusedE4M3Params p) { swiglu_e4m3<float>(p); }
extern "C" __global__ void SwiGLUE4M3_bf16(const FusedE4M3Params p) { swiglu_e4m3<__nv_bfloat16>(p); }
extern "C" __global__ void SwiGLUE4M3_f16(const FusedE4M3Params p) { swiglu_e4m3<__half>(p); }
extern "C" __global__ void SwiGLUE4M3_bf16_in16(const FusedE4M3Params p) { swiglu_e4m3<__nv_bfloat16, __nv_bfloat16>(p); }
extern "C" __global__ void SwiGLUE4M3_f16_in16(const FusedE4M3Params p) { swiglu_e4m3<__half, __nv_bfloat16>(p); }

// The register kernels: the same three producers (and QuantizeE4M3) for rows of cols ≤ 16384 values, cols
// a multiple of 4 (fp8RowShape on the Go side picks them; odd rows run the kernels above, wider ones the
// staged kernels below, or for QuantizeE4M3 the loop). A
// block of THREADS threads owns a row; thread t holds the row's float4 groups t, t + THREADS, … (NV of
// them, all loaded before the first is used) in registers, so each value is loaded and computed once and
// a block keeps 16·NV bytes a thread and operand in flight, where the loops above, one float a thread and
// iteration, each value computed twice, keep a few bytes in flight and ran at a third of the copy
// bandwidth at prefill sizes (docs/bench/fp8-h200.md). Codes go out four to a 32-bit store. Same values,
// same rounding as above but for the order of the norm's sum of squares.

// amax4 folds the float4 group a into a thread's largest |v| and NaN flag.
__device__ __forceinline__ void amax4(float4 a, float &amax, bool &nan) {
	nan |= a.x != a.x || a.y != a.y || a.z != a.z || a.w != a.w;
	amax = fmaxf(amax, fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))));
}

// put_codes writes group i4 (columns 4·i4 … 4·i4+3) of a row as codes at q (and f16 values at x16 unless
// null) with the row's scale (div).
__device__ __forceinline__ void put_codes(float4 v, int i4, const E4M3Quotient &div, unsigned char *q, __half *x16) {
	const uint32_t c = div.codes4(v);
	reinterpret_cast<uint32_t *>(q)[i4] = c;
	if (x16 != nullptr) {
		uint32_t lo, hi;
		e4m3x4_to_f16x2(c, lo, hi);
		reinterpret_cast<uint2 *>(x16)[i4] = make_uint2(lo, hi);
	}
}

// pad_codes zeroes a row's padding groups n4 … kp/4 and writes its scale to *scale_out.
__device__ __forceinline__ void pad_codes(int n4, int kp, unsigned char *q, __half *x16, float *scale_out, float s) {
	for (int i4 = n4 + threadIdx.x; i4 < kp / 4; i4 += blockDim.x) {
		reinterpret_cast<uint32_t *>(q)[i4] = 0;
		if (x16 != nullptr) reinterpret_cast<uint2 *>(x16)[i4] = make_uint2(0, 0);
	}
	if (threadIdx.x == 0) *scale_out = s;
}

// store_codes quantizes the row held in v (n4 float4 groups; the block's row of codes at q, of f16
// values at x16 unless null) with its scale (row_scale), zeroes the padding up to kp columns and writes
// the scale to *scale_out.
template <int NV>
__device__ __forceinline__ void store_codes(const float4 (&v)[NV], int n4, int kp, unsigned char *q, __half *x16,
                                            float *scale_out, float input_scale, float min_scale, float *scratch) {
	__shared__ int nan_seen;
	float amax = 0.f;
	bool nan = false;
	if (input_scale == 0.f) {
#pragma unroll
		for (int j = 0; j < NV; j++)
			if (threadIdx.x + j * blockDim.x < n4) amax4(v[j], amax, nan);
	}
	const float s = row_scale(amax, nan, input_scale, min_scale, scratch, &nan_seen);
	const E4M3Quotient div(s);
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int i4 = threadIdx.x + j * blockDim.x;
		if (i4 < n4) put_codes(v[j], i4, div, q, x16);
	}
	pad_codes(n4, kp, q, x16, scale_out, s);
}

// scale4 is a · (sx · w) element by element, as ScaleE4M3 computes it (no contraction).
__device__ __forceinline__ float4 scale4(float4 a, float sx, float4 w) {
	return make_float4(__fmul_rn(a.x, __fmul_rn(sx, w.x)), __fmul_rn(a.y, __fmul_rn(sx, w.y)),
	                   __fmul_rn(a.z, __fmul_rn(sx, w.z)), __fmul_rn(a.w, __fmul_rn(sx, w.w)));
}

// load4 is elements 4·i4 … 4·i4+3 of x as floats.
template <typename T> __device__ __forceinline__ float4 load4(const T *x, int i4);
template <> __device__ __forceinline__ float4 load4<float>(const float *x, int i4) {
	return reinterpret_cast<const float4 *>(x)[i4];
}
template <typename T> __device__ __forceinline__ float4 load4(const T *x, int i4) {
	const uint2 u = reinterpret_cast<const uint2 *>(x)[i4];
	const T *e = reinterpret_cast<const T *>(&u);
	return make_float4(Num<T>::load(e[0]), Num<T>::load(e[1]), Num<T>::load(e[2]), Num<T>::load(e[3]));
}

template <int THREADS, int NV> __device__ __forceinline__ void norm_e4m3_regs(const FusedE4M3Params &p) {
	__shared__ float scratch[32];
	const long long row = blockIdx.x;
	const int n4 = p.cols >> 2;
	float4 *res = reinterpret_cast<float4 *>(p.residual + row * p.cols);
	const float4 *add = p.add ? reinterpret_cast<const float4 *>(p.add + row * p.cols) : nullptr;
	const float4 *w4 = reinterpret_cast<const float4 *>(p.weight);
	float4 x[NV], a[NV], w[NV];
#pragma unroll
	for (int j = 0; j < NV; j++) // the gain never changes: loaded before the wait
		if (threadIdx.x + j * THREADS < n4) w[j] = w4[threadIdx.x + j * THREADS];
	pdl_wait();
	pdl_launch_dependents();
	const float sx = in_scale(p);
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int i4 = threadIdx.x + j * THREADS;
		if (i4 < n4) {
			x[j] = res[i4];
			if (add) a[j] = add[i4];
		}
	}
	float ss = 0.f;
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int i4 = threadIdx.x + j * THREADS;
		if (i4 < n4) {
			if (add) {
				if (p.in_sx) a[j] = scale4(a[j], sx, reinterpret_cast<const float4 *>(p.in_sw)[i4]);
				x[j].x += a[j].x, x[j].y += a[j].y, x[j].z += a[j].z, x[j].w += a[j].w;
				res[i4] = x[j];
			}
			ss += x[j].x * x[j].x + x[j].y * x[j].y + x[j].z * x[j].z + x[j].w * x[j].w;
		}
	}
	ss = block_sum(ss, scratch);
	const float inv = 1.0f / sqrtf(ss / (float)p.cols + p.eps);
#pragma unroll
	for (int j = 0; j < NV; j++) {
		x[j].x = w[j].x * (x[j].x * inv), x[j].y = w[j].y * (x[j].y * inv);
		x[j].z = w[j].z * (x[j].z * inv), x[j].w = w[j].w * (x[j].w * inv);
	}
	store_codes<NV>(x, n4, p.kp, p.codes + row * p.kp, p.x16 ? p.x16 + row * p.kp : nullptr, p.scales + row, p.input_scale,
	                p.min_scale, scratch);
}

template <typename T, int THREADS, int NV, typename GU = float>
__device__ __forceinline__ void swiglu_e4m3_regs(const FusedE4M3Params &p) {
	__shared__ float scratch[32];
	const long long row = blockIdx.x;
	const int n4 = p.cols >> 2;
	const GU *gu = reinterpret_cast<const GU *>(p.residual) + row * 2 * p.cols;
	pdl_wait();
	pdl_launch_dependents();
	const float sx = in_scale(p);
	float4 g[NV], u[NV];
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int i4 = threadIdx.x + j * THREADS;
		if (i4 < n4) g[j] = load4<GU>(gu, i4), u[j] = load4<GU>(gu, n4 + i4);
	}
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int i4 = threadIdx.x + j * THREADS;
		if (i4 < n4 && p.in_sx) {
			const float4 *sw = reinterpret_cast<const float4 *>(p.in_sw);
			g[j] = scale4(g[j], sx, sw[i4]), u[j] = scale4(u[j], sx, sw[n4 + i4]);
		}
		g[j] = make_float4(silu_mul<T>(g[j].x, u[j].x), silu_mul<T>(g[j].y, u[j].y), silu_mul<T>(g[j].z, u[j].z),
		                   silu_mul<T>(g[j].w, u[j].w));
	}
	store_codes<NV>(g, n4, p.kp, p.codes + row * p.kp, p.x16 ? p.x16 + row * p.kp : nullptr, p.scales + row, p.input_scale,
	                p.min_scale, scratch);
}

template <typename T, int THREADS, int NV> __device__ __forceinline__ void quantize_e4m3_regs(const QuantizeE4M3Params &p) {
	__shared__ float scratch[32];
	const long long row = blockIdx.x;
	const int n4 = p.k >> 2;
	const T *x = reinterpret_cast<const T *>(p.x) + row * p.k;
	pdl_wait();
	pdl_launch_dependents(); // as QuantizeE4M3
	float4 v[NV];
#pragma unroll
	for (int j = 0; j < NV; j++)
		if (threadIdx.x + j * THREADS < n4) v[j] = load4<T>(x, threadIdx.x + j * THREADS);
	store_codes<NV>(v, n4, p.kp, p.codes + row * p.kp, p.x16 ? p.x16 + row * p.kp : nullptr, p.scales + row, p.input_scale,
	                p.min_scale, scratch);
}

// Entry points <kernel>_r<THREADS>x<NV>: the shapes of fp8RowShapes (model/fp8.go), in its order.
#define FP8_ROWS_T(TN, T, TH, NV)                                                                             \
	extern "C" __global__ void __launch_bounds__(TH) SwiGLUE4M3_##TN##_r##TH##x##NV(const FusedE4M3Params p) { \
		swiglu_e4m3_regs<T, TH, NV>(p);                                                                    \
	}                                                                                                          \
	extern "C" __global__ void __launch_bounds__(TH) QuantizeE4M3_##TN##_r##TH##x##NV(const QuantizeE4M3Params p) { \
		quantize_e4m3_regs<T, TH, NV>(p);                                                                  \
	}
#define FP8_ROWS_IN16(TN, T, TH, NV)                                                                          \
	extern "C" __global__ void __launch_bounds__(TH) SwiGLUE4M3_##TN##_in16_r##TH##x##NV(const FusedE4M3Params p) { \
		swiglu_e4m3_regs<T, TH, NV, __nv_bfloat16>(p);                                                      \
	}
#define FP8_ROWS(TH, NV)                                                                                      \
	extern "C" __global__ void __launch_bounds__(TH) NormE4M3_r##TH##x##NV(const FusedE4M3Params p) {       \
		norm_e4m3_regs<TH, NV>(p);                                                                         \
	}                                                                                                          \
	FP8_ROWS_T(f32, float, TH, NV) FP8_ROWS_T(bf16, __nv_bfloat16, TH, NV) FP8_ROWS_T(f16, __half, TH, NV)   \
	FP8_ROWS_IN16(bf16, __nv_bfloat16, TH, NV) FP8_ROWS_IN16(f16, __half, TH, NV)
FP8_ROWS(256, 1)
FP8_ROWS(256, 2)
FP8_ROWS(256, 4)
FP8_ROWS(256, 8)
FP8_ROWS(512, 8)

// The staged kernels, NormE4M3_staged and SwiGLUE4M3_<T>_staged: the same producers for rows of a
// multiple of 4 values too wide for every register shape (Qwen2.5-7B's and Llama-3-70B's intermediate)
// that fit the block's shared memory as float32 (4·cols bytes, dynamic; fp8FusedForm on the Go side picks
// them). A thread computes its float4 groups STAGE_U at a time (their loads issued together) and keeps
// the values in shared memory, then quantizes them from there once the row's scale is known, so each
// value is loaded and computed once, where the loop kernels compute it twice. A thread reads back only
// the groups it wrote, so no barrier but the reductions' is needed. Same values and rounding as the other
// forms but for the order of the norm's sum of squares.
#define STAGE_THREADS 512
#define STAGE_U 4

// stage_buffer is the staged kernels' dynamic shared memory: the block's row as float4 groups.
extern __shared__ float4 stage_buffer[];

// stage_out quantizes the block's row of n4 staged groups with the scale from the threads' amax and nan.
__device__ __forceinline__ void stage_out(const float4 *staged, int n4, float amax, bool nan, const FusedE4M3Params &p,
                                          float *scratch, int *nan_seen) {
	const long long row = blockIdx.x;
	const float s = row_scale(amax, nan, p.input_scale, p.min_scale, scratch, nan_seen);
	unsigned char *q = p.codes + row * p.kp;
	__half *x16 = p.x16 ? p.x16 + row * p.kp : nullptr;
	const E4M3Quotient div(s);
	for (int i4 = threadIdx.x; i4 < n4; i4 += STAGE_THREADS) put_codes(staged[i4], i4, div, q, x16);
	pad_codes(n4, p.kp, q, x16, p.scales + row, s);
}

extern "C" __global__ void __launch_bounds__(STAGE_THREADS) NormE4M3_staged(const FusedE4M3Params p) {
	float4 *staged = stage_buffer;
	__shared__ float scratch[32];
	__shared__ int nan_seen;
	const long long row = blockIdx.x;
	const int n4 = p.cols >> 2;
	float4 *res = reinterpret_cast<float4 *>(p.residual + row * p.cols);
	const float4 *add = p.add ? reinterpret_cast<const float4 *>(p.add + row * p.cols) : nullptr;
	const float4 *sw = reinterpret_cast<const float4 *>(p.in_sw);
	pdl_wait();
	pdl_launch_dependents();
	const float sx = in_scale(p);
	float ss = 0.f;
	for (int base = threadIdx.x; base < n4; base += STAGE_THREADS * STAGE_U) {
		float4 x[STAGE_U], a[STAGE_U];
#pragma unroll
		for (int j = 0; j < STAGE_U; j++) {
			const int i4 = base + j * STAGE_THREADS;
			if (i4 < n4) {
				x[j] = res[i4];
				if (add) a[j] = add[i4];
			}
		}
#pragma unroll
		for (int j = 0; j < STAGE_U; j++) {
			const int i4 = base + j * STAGE_THREADS;
			if (i4 < n4) {
				if (add) {
					if (p.in_sx) a[j] = scale4(a[j], sx, sw[i4]);
					x[j].x += a[j].x, x[j].y += a[j].y, x[j].z += a[j].z, x[j].w += a[j].w;
					res[i4] = x[j];
				}
				ss += x[j].x * x[j].x + x[j].y * x[j].y + x[j].z * x[j].z + x[j].w * x[j].w;
				staged[i4] = x[j];
			}
		}
	}
	ss = block_sum(ss, scratch);
	const float inv = 1.0f / sqrtf(ss / (float)p.cols + p.eps);
	const float4 *w4 = reinterpret_cast<const float4 *>(p.weight);
	float amax = 0.f;
	bool nan = false;
	for (int i4 = threadIdx.x; i4 < n4; i4 += STAGE_THREADS) {
		const float4 w = w4[i4];
		float4 x = staged[i4];
		x.x = w.x * (x.x * inv), x.y = w.y * (x.y * inv), x.z = w.z * (x.z * inv), x.w = w.w * (x.w * inv);
		staged[i4] = x;
		amax4(x, amax, nan);
	}
	stage_out(staged, n4, amax, nan, p, scratch, &nan_seen);
}

template <typename T, typename GU = float> __device__ __forceinline__ void swiglu_e4m3_staged(const FusedE4M3Params &p) {
	float4 *staged = stage_buffer;
	__shared__ float scratch[32];
	__shared__ int nan_seen;
	const long long row = blockIdx.x;
	const int n4 = p.cols >> 2;
	const GU *gu = reinterpret_cast<const GU *>(p.residual) + row * 2 * p.cols;
	const float4 *sw = reinterpret_cast<const float4 *>(p.in_sw);
	pdl_wait();
	pdl_launch_dependents();
	const float sx = in_scale(p);
	float amax = 0.f;
	bool nan = false;
	for (int base = threadIdx.x; base < n4; base += STAGE_THREADS * STAGE_U) {
		float4 g[STAGE_U], u[STAGE_U];
#pragma unroll
		for (int j = 0; j < STAGE_U; j++) {
			const int i4 = base + j * STAGE_THREADS;
			if (i4 < n4) g[j] = load4<GU>(gu, i4), u[j] = load4<GU>(gu, n4 + i4);
		}
#pragma unroll
		for (int j = 0; j < STAGE_U; j++) {
			const int i4 = base + j * STAGE_THREADS;
			if (i4 < n4) {
				if (p.in_sx) g[j] = scale4(g[j], sx, sw[i4]), u[j] = scale4(u[j], sx, sw[n4 + i4]);
				const float4 y = make_float4(silu_mul<T>(g[j].x, u[j].x), silu_mul<T>(g[j].y, u[j].y),
				                             silu_mul<T>(g[j].z, u[j].z), silu_mul<T>(g[j].w, u[j].w));
				staged[i4] = y;
				amax4(y, amax, nan);
			}
		}
	}
	stage_out(staged, n4, amax, nan, p, scratch, &nan_seen);
}

#define FP8_STAGED_T(TN, T)                                                                                   \
	extern "C" __global__ void __launch_bounds__(STAGE_THREADS) SwiGLUE4M3_##TN##_staged(const FusedE4M3Params p) { \
		swiglu_e4m3_staged<T>(p);                                                                          \
	}
FP8_STAGED_T(f32, float)
FP8_STAGED_T(bf16, __nv_bfloat16)
FP8_STAGED_T(f16, __half)
extern "C" __global__ void __launch_bounds__(STAGE_THREADS) SwiGLUE4M3_bf16_in16_staged(const FusedE4M3Params p) {
	swiglu_e4m3_staged<__nv_bfloat16, __nv_bfloat16>(p);
}
extern "C" __global__ void __launch_bounds__(STAGE_THREADS) SwiGLUE4M3_f16_in16_staged(const FusedE4M3Params p) {
	swiglu_e4m3_staged<__half, __nv_bfloat16>(p);
}
