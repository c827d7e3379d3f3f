// SwiGLU (Backend.SwiGLU): dst[r][i] = silu(gate_up[r][i]) · gate_up[r][I + i], silu(g) = g / (1 + e^-g),
// from the float output of the gate/up product to T for the down product; and GeGLU (Backend.GeGLU,
// Gemma's gelu_pytorch_tanh) with GELU's tanh form in place of silu, evaluated as the CPU backend does:
// 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))) in double, rounded to float, times the up value in float. A grid-stride loop over
// rows · I elements (four a thread with 16-byte loads when I is a multiple of 4), 256 threads a block;
// bound by bytes (2 · 4 + sizeof(T) per element).
#include "common.cuh"

struct SwiGLUParams {
	void *dst;            // [rows][inter] of T
	const float *gate_up; // [rows][2·inter]
	long long n;          // rows · inter
	int inter;
};

// glu_act is the gated activation's product: silu(g)·u, or gelu_tanh(g)·u with GELU.
template <typename T, bool GELU> __device__ __forceinline__ float glu_act(float g, float u) {
	if constexpr (GELU) {
		return gelu_mul(g, u);
	} else {
		return silu_mul<T>(g, u);
	}
}

template <typename T, bool GELU = false> __device__ __forceinline__ void swiglu(const SwiGLUParams &p) {
	const float *gu = p.gate_up;
	T *dst = reinterpret_cast<T *>(p.dst);
	pdl_wait();
	pdl_launch_dependents();
	if ((p.inter & 3) == 0) { // four elements a thread, 16-byte loads
		for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; 4 * q < p.n;
		     q += (long long)gridDim.x * blockDim.x) {
			const long long idx = 4 * q, r = idx / p.inter, i = idx - r * p.inter;
			const float4 g = *reinterpret_cast<const float4 *>(gu + r * 2 * p.inter + i);
			const float4 u = *reinterpret_cast<const float4 *>(gu + r * 2 * p.inter + p.inter + i);
			dst[idx] = Num<T>::store(glu_act<T, GELU>(g.x, u.x));
			dst[idx + 1] = Num<T>::store(glu_act<T, GELU>(g.y, u.y));
			dst[idx + 2] = Num<T>::store(glu_act<T, GELU>(g.z, u.z));
			dst[idx + 3] = Num<T>::store(glu_act<T, GELU>(g.w, u.w));
		}
		return;
	}
	for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < p.n;
	     idx += (long long)gridDim.x * blockDim.x) {
		const long long r = idx / p.inter, i = idx - r * p.inter;
		const float g = gu[r * 2 * p.inter + i];
		const float u = gu[r * 2 * p.inter + p.inter + i];
		dst[idx] = Num<T>::store(glu_act<T, GELU>(g, u));
	}
}

#define SWIGLU(T, TN)                                                                                         \
	extern "C" __global__ void SwiGLU_##TN(const SwiGLUParams p) { swiglu<T>(p); }                            \
	extern "C" __global__ void GeGLU_##TN(const SwiGLUParams p) { swiglu<T, true>(p); }
FOR_EACH_TYPE(SWIGLU)
