// SwiGLU (Backend.SwiGLU): dst[r][i] = silu(gate_up[r][i]) · gate_up[r][I + i], silu(g) = g / (1 + e^-g),
// from the float output of the gate/up product to T for the down product. A grid-stride loop over
// rows · I elements, 256 threads a block; bound by bytes (2 · 4 + sizeof(T) per element).
#include "common.cuh"

struct SwiGLUParams {
	void *dst;            // [rows][inter] of T
	const float *gate_up; // [rows][2·inter]
	long long n;          // rows · inter
	int inter;
};

template <typename T> __device__ __forceinline__ void swiglu(const SwiGLUParams &p) {
	const float *gu = p.gate_up;
	T *dst = reinterpret_cast<T *>(p.dst);
	for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < p.n;
	     idx += (long long)gridDim.x * blockDim.x) {
		const long long r = idx / p.inter, i = idx - r * p.inter;
		const float g = gu[r * 2 * p.inter + i];
		const float u = gu[r * 2 * p.inter + p.inter + i];
		dst[idx] = Num<T>::store(g / (1.f + expf(-g)) * u);
	}
}

#define SWIGLU(T, TN)                                                                                         \
	extern "C" __global__ void SwiGLU_##TN(const SwiGLUParams p) { swiglu<T>(p); }
FOR_EACH_TYPE(SWIGLU)
