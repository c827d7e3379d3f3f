// What the model's kernels share: element conversions and a block-wide reduction. Included by every .cu
// file of this folder; build.sh compiles them (and ../../attention/prefill.cu) as one translation unit.
//
// Conventions of every kernel here (see ../backend_cuda.go for the Go side):
//   - one by-value parameter struct per kernel, pointers first, then 4-byte fields, mirrored field for
//     field by a Go struct (cuda.Launch passes its bytes as the kernel's only parameter);
//   - weight matrices, the inputs of the matrix products (normed rows, attention output, SwiGLU
//     output, gathered rows) and the KV pages are of the compute type T (float, __nv_bfloat16 or
//     __half); the products' outputs (cuBLAS accumulates in float and stores float), the residual
//     stream and the norm gains are float; all arithmetic is float;
//   - entry points are extern "C", named <GoOp>_<dtype> (f32, bf16, f16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

template <typename T> struct Num;
template <> struct Num<float> {
	static __device__ __forceinline__ float load(float x) { return x; }
	static __device__ __forceinline__ float store(float x) { return x; }
};
template <> struct Num<__nv_bfloat16> {
	static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
	static __device__ __forceinline__ __nv_bfloat16 store(float x) { return __float2bfloat16_rn(x); }
};
template <> struct Num<__half> {
	static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
	static __device__ __forceinline__ __half store(float x) { return __float2half_rn(x); }
};

// silu_mul returns SwiGLU's silu(g)·u = g / (1 + e^-g) · u for a result stored as T: by the fast
// intrinsics (__expf, __fdividef: within a few float ulps, far below a 16-bit rounding) when T is 16-bit,
// by IEEE expf and division for float. (IEEE's cost a visible share of the Llama-3-8B gate/up GEMM's
// epilogue at 64 rows, its last act: docs/bench/gemm-h100.md.) e^-g overflowing gives -0 for g < -88:
// silu's limit.
template <typename T> __device__ __forceinline__ float silu_mul(float g, float u) {
	if constexpr (std::is_same<T, float>::value) {
		return g / (1.f + expf(-g)) * u;
	} else {
		return __fdividef(g, 1.f + __expf(-g)) * u;
	}
}

// gelu_mul returns GeGLU's gelu_tanh(g)·u (PyTorch's gelu(approximate="tanh")) as the CPU backend computes
// it: 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))) in double, rounded to float, times u in float.
__device__ __forceinline__ float gelu_mul(float g, float u) {
	const double v = g;
	return (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))) * u;
}

// E4M3Quotient is x / s correctly rounded for many x over one scale s, as __fdiv_rn(x, s) computes it on
// its fast path, with s's reciprocal taken once instead of once an element: the reciprocal's
// approximation refined by one Newton step, the quotient x·r corrected by its residual, the sequence
// of FFMAs __fdiv_rn compiles to. __fdiv_rn leaves that path for a slower one where its operands'
// exponents put it out of range (its FCHK); with s a row scale (at least min_scale) that happens only
// where the quotient is far below the smallest e4m3 value (code 0 either way) or overflows (which
// saturates either way), so every code is __fdiv_rn's: code stays the saturating cast of the quotient
// and the quotient is left uncorrected past ±448, where its last bit changes no code, and at zero, whose
// sign it keeps. A NaN scale or value gives a NaN quotient, as the division does.
struct E4M3Quotient {
	float s, r;
	__device__ __forceinline__ explicit E4M3Quotient(float scale) : s(scale) {
		float a;
		asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(a) : "f"(scale));
		r = __fmaf_rn(a, __fmaf_rn(a, -scale, 1.f), a);
	}
	__device__ __forceinline__ float operator()(float x) const {
		const float q = __fmul_rn(x, r); // keeps a zero's sign, as the division does (−0 is code 0x80)
		return fabsf(q) < 448.f && q != 0.f ? __fmaf_rn(r, __fmaf_rn(q, -s, x), q) : q;
	}
	// code is the e4m3 code of x / s (saturating).
	__device__ __forceinline__ unsigned char code(float x) const {
		return __nv_cvt_float_to_fp8((*this)(x), __NV_SATFINITE, __NV_E4M3);
	}
	// codes4 is the codes of v / s, the first lowest, four to a word.
	__device__ __forceinline__ uint32_t codes4(float4 v) const {
		const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2((*this)(v.x), (*this)(v.y)), __NV_SATFINITE, __NV_E4M3);
		const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2((*this)(v.z), (*this)(v.w)), __NV_SATFINITE, __NV_E4M3);
		return lo | hi << 16;
	}
};

// block_sum returns the sum of v over the block (every thread gets it). blockDim.x is a multiple of 32
// and at most 1024; scratch holds 32 floats. The block must call it uniformly.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	__syncthreads(); // scratch may still be read by a previous call
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	v = lane < warps ? scratch[lane] : 0.f;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// argmax_keep merges candidate (ov, oi) into (v, i): the larger value, the smaller index among equals.
__device__ __forceinline__ void argmax_keep(float &v, int &i, float ov, int oi) {
	if (ov > v || (ov == v && oi < i)) {
		v = ov;
		i = oi;
	}
}

// Programmatic dependent launch (Hopper): a kernel launched with the PDL attribute may start while the
// kernel before it in the stream still runs. It must call pdl_wait() before it reads anything an earlier
// kernel wrote or writes anything an earlier kernel reads (weights, which never change, it may read
// before); pdl_wait returns once the previous kernel has finished and its writes are visible, and is a
// no-op in a kernel launched without the attribute. pdl_launch_dependents() lets the next kernel (if it
// was launched with the attribute) start as soon as every block of this one has called it or exited.
// Compiled to nothing below sm_90: the backend launches with the attribute only on compute capability 9.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Mma<T>::run is mma.sync.m16n8k16 with fp32 accumulators for a 16-bit T: d += A·B, A in a0..a3 and B in
// b0, b1 as PTX lays the fragments out. The skinny product (gemv.cu) and the tensor-core prefill
// attention (../../attention/prefill.cu) use it.
// load_stream is a 16-byte load of bytes read once (weights streamed by a product): through the
// non-coherent path, not allocated in L1, and with L2's 256-byte prefetch (L2::256B). A warp's load of a
// weight tile touches 64-128 bytes of each of 16 rows, and the warps beside it the bytes next to them:
// fetching each row's 256-byte span from memory at once gives the memory larger bursts and keeps more
// bytes in flight for the same loads, which the skinny products at one token row need to reach the
// bandwidth (docs/bench/gemm-h200.md).
__device__ __forceinline__ uint4 load_stream(const void *p) {
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p));
	return v;
}

template <typename T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
	static __device__ __forceinline__ void run(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
	                                           uint32_t b0, uint32_t b1) {
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		             "{%0,%1,%2,%3};"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
	}
};
template <> struct Mma<__half> {
	static __device__ __forceinline__ void run(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
	                                           uint32_t b0, uint32_t b1) {
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		             "{%0,%1,%2,%3};"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
	}
};

// pack2 rounds two floats to T and packs them into one 32-bit register, lo in the low half (the layout of
// an mma fragment's pair).
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
	__half2 v = __floats2half2_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&v);
}

// Instantiates KERNEL(T, name) for the three compute types.
#define FOR_EACH_TYPE(KERNEL)                                                                               \
	KERNEL(float, f32)                                                                                    \
	KERNEL(__nv_bfloat16, bf16)                                                                           \
	KERNEL(__half, f16)

// The folded norms (gemv.cu, "Folded norm"; embed.cu): NORM_MAX_TOKENS is the most token rows a step
// that folds them has (one token tile of the skinny product), NORM_SCALE the fixed-point unit of their
// sums of squares: 2^-24, exact to 6e-8 and up to 5.5e11 a part and 1.1e12 a token's sum (a residual
// RMS of 16,000 at hidden 4096; LLaMA-family residuals stay orders of magnitude below), added as integers:
// the same total in any order.
#define NORM_MAX_TOKENS 8
#define NORM_SCALE 16777216.0f
