// Row gather (Backend.GatherRows): dst[j] = src[rows[j]]. Grid (rows of dst), a block striding over the
// columns.
#include "common.cuh"

struct GatherRowsParams {
	void *dst;         // [n][cols] of T
	const void *src;   // [*][cols] of T
	const int *rows;   // [n]
	int cols;
};

template <typename T> __device__ __forceinline__ void gather_rows(const GatherRowsParams &p) {
	const long long j = blockIdx.x;
	pdl_wait(); // rows may be step metadata; src the previous kernel's output
	pdl_launch_dependents();
	const T *src = reinterpret_cast<const T *>(p.src) + (long long)p.rows[j] * p.cols;
	T *dst = reinterpret_cast<T *>(p.dst) + j * p.cols;
	for (int c = threadIdx.x; c < p.cols; c += blockDim.x) dst[c] = src[c];
}

#define GATHER_ROWS(T, TN)                                                                                    \
	extern "C" __global__ void GatherRows_##TN(const GatherRowsParams p) { gather_rows<T>(p); }
FOR_EACH_TYPE(GATHER_ROWS)
