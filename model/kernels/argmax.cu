// Greedy argmax over logits rows (the CUDA backend's ArgmaxToHost): out[r] = the index of the largest
// entry of logits[r], the first one on ties (as the CPU's argmax). Grid (rows), 1024 threads: each thread
// scans a strided slice keeping its first best, then a warp-shuffle and shared-memory reduction keeps the
// largest value and, among equal values, the smallest index. NaNs never win. Bound by reading the row.
#include "common.cuh"

struct ArgmaxParams {
	int *out;            // [rows]
	const float *logits; // [rows][cols]
	int cols;
};

__device__ __forceinline__ void argmax_merge(float &v, int &i, float ov, int oi) {
	if (ov > v || (ov == v && oi < i)) {
		v = ov;
		i = oi;
	}
}

__device__ __forceinline__ void argmax_rows(const ArgmaxParams &p) {
	__shared__ float sv[32];
	__shared__ int si[32];
	const float *row = p.logits + (long long)blockIdx.x * p.cols;
	float best = -INFINITY;
	int idx = 0x7fffffff;
	for (int c = threadIdx.x; c < p.cols; c += blockDim.x) {
		const float x = row[c];
		if (x > best) { // strictly greater: the first of equal values stays
			best = x;
			idx = c;
		}
	}
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(0xffffffffu, best, o);
		const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
		argmax_merge(best, idx, ov, oi);
	}
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	if (lane == 0) {
		sv[warp] = best;
		si[warp] = idx;
	}
	__syncthreads();
	if (warp == 0) {
		best = lane < warps ? sv[lane] : -INFINITY;
		idx = lane < warps ? si[lane] : 0x7fffffff;
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(0xffffffffu, best, o);
			const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
			argmax_merge(best, idx, ov, oi);
		}
		if (lane == 0) p.out[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
	}
}

// The logits are the LM head's float output whatever the compute type.
extern "C" __global__ void Argmax_f32(const ArgmaxParams p) { argmax_rows(p); }
