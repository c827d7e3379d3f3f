// Greedy argmax over logits rows (the CUDA backend's ArgmaxToHost): out[r] = the index of the largest
// entry of logits[r], the first one on ties (as the CPU's argmax); −∞ never wins, and a row with nothing
// else gives 0. A row holding NaN or +∞ names no token: out[r] = −1 (model.NonFinitePick, the CPU twin's
// rule), which the engine turns into an error finish of that sequence. Two passes, each bound by what it
// reads:
//   ArgmaxChunks_f32  grid (chunks, rows), 256 threads: the (max, index) of each chunk of 2048 logits
//                     (8 independent loads a thread), into values/indices [rows][chunks]; a chunk
//                     holding NaN or +∞ leaves NaN as its value;
//   ArgmaxPartials    grid (rows), 1024 threads: the best of a row's partials — ArgmaxChunks' or those
//                     the fused LM-head product (gemv.cu, GEMV_ARGMAX; gemm_sm90.cu) leaves, one per tile
//                     of logits, NaN or +∞ for a tile holding NaN or +∞ — or −1 when a partial is such;
//                     with best, also the row's largest value (a tensor-parallel rank's pick: the ranks'
//                     values decide between their slices of the vocabulary).
// Both launch with programmatic dependent launch on sm_90 (common.cuh).
#include "common.cuh"

#define ARGMAX_CHUNK 2048

// argmax_block reduces (v, i) over the block; thread 0 gets the result. blockDim.x is a multiple of 32.
__device__ __forceinline__ void argmax_block(float &v, int &i) {
	__shared__ float sv[32];
	__shared__ int si[32];
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(0xffffffffu, v, o);
		const int oi = __shfl_xor_sync(0xffffffffu, i, o);
		argmax_keep(v, i, ov, oi);
	}
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	if (lane == 0) {
		sv[warp] = v;
		si[warp] = i;
	}
	__syncthreads();
	if (warp == 0) {
		v = lane < warps ? sv[lane] : -INFINITY;
		i = lane < warps ? si[lane] : 0x7fffffff;
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(0xffffffffu, v, o);
			const int oi = __shfl_xor_sync(0xffffffffu, i, o);
			argmax_keep(v, i, ov, oi);
		}
	}
}

struct ArgmaxChunksParams {
	float *values;       // [rows][chunks]
	int *indices;        // [rows][chunks]
	const float *logits; // [rows][ld]
	int cols;            // the columns reduced: each row's first cols
	int chunks;
	int ld;              // the rows' stride in elements (≥ cols)
};

extern "C" __global__ void ArgmaxChunks_f32(const ArgmaxChunksParams p) {
	const int chunk = blockIdx.x, row = blockIdx.y;
	const float *logits = p.logits + (long long)row * p.ld;
	const int start = chunk * ARGMAX_CHUNK;
	pdl_wait();
	pdl_launch_dependents();
	constexpr int PER = ARGMAX_CHUNK / 256;
	float x[PER];
#pragma unroll
	for (int j = 0; j < PER; j++) {
		const int c = start + j * 256 + threadIdx.x;
		x[j] = c < p.cols ? logits[c] : -INFINITY;
	}
	float v = -INFINITY;
	int i = 0x7fffffff;
	bool bad = false; // a NaN (+∞ wins below and is seen by ArgmaxPartials)
#pragma unroll
	for (int j = 0; j < PER; j++) { // ascending columns: strictly greater keeps the first of equals
		bad |= x[j] != x[j];
		if (x[j] > v) {
			v = x[j];
			i = start + j * 256 + threadIdx.x;
		}
	}
	bad = __syncthreads_or(bad);
	argmax_block(v, i);
	if (threadIdx.x == 0) {
		p.values[(long long)row * p.chunks + chunk] = bad ? NAN : v;
		p.indices[(long long)row * p.chunks + chunk] = i;
	}
}

struct ArgmaxPartialsParams {
	int *out;            // [rows]
	const float *values; // [rows][tiles]
	const int *indices;  // [rows][tiles]
	float *best;         // [rows]: each row's largest value (NaN where out is -1), or null
	int tiles;
};

extern "C" __global__ void ArgmaxPartials(const ArgmaxPartialsParams p) {
	const float *values = p.values + (long long)blockIdx.x * p.tiles;
	const int *indices = p.indices + (long long)blockIdx.x * p.tiles;
	pdl_wait();
	pdl_launch_dependents();
	float v = -INFINITY;
	int i = 0x7fffffff;
	bool bad = false; // a partial of NaN or +∞
	constexpr int U = 8; // independent loads in flight a thread
	for (int t0 = threadIdx.x; t0 < p.tiles; t0 += U * blockDim.x) {
		float ov[U];
		int oi[U];
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int t = t0 + u * blockDim.x;
			ov[u] = t < p.tiles ? values[t] : -INFINITY;
			oi[u] = t < p.tiles ? indices[t] : 0x7fffffff;
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			bad |= !(ov[u] < INFINITY);
			argmax_keep(v, i, ov[u], oi[u]);
		}
	}
	bad = __syncthreads_or(bad);
	argmax_block(v, i);
	if (threadIdx.x == 0) {
		p.out[blockIdx.x] = bad ? -1 : i == 0x7fffffff ? 0 : i;
		if (p.best) p.best[blockIdx.x] = bad ? NAN : v;
	}
}
