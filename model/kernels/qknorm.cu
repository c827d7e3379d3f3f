// Per-head RMSNorm of the queries and keys (Backend.QKNorm: Qwen3's and Gemma 3's q_norm and k_norm, before
// the rotary embedding): in each row of qkv [rows][qkv_cols] (float, the Q/K/V product's output), each of
// the num_heads query heads and num_kv_heads key heads of head_dim values becomes
// x / sqrt(mean(x²) + eps) · w, with w = q_w for a query head and k_w for a key head (float, [head_dim]);
// the value heads after them are left alone. Grid (rows, ⌈(num_heads + num_kv_heads) / 8⌉), 8 warps a
// block, a warp per head: the lanes sum the head's squares (a warp reduction, no shared memory), then
// scale it in place, as the CPU backend's rmsNorm computes: gain · (x · inv).
#include "common.cuh"

// QKNORM_HEADS is the heads (warps) of one block.
#define QKNORM_HEADS 8

struct QKNormParams {
	float *qkv;        // [rows][qkv_cols], normalised in place
	const float *q_w;  // [head_dim]
	const float *k_w;  // [head_dim]
	float eps;
	int num_heads;
	int num_kv_heads;
	int head_dim;
	int qkv_cols;
};

extern "C" __global__ void __launch_bounds__(QKNORM_HEADS * 32) QKNorm(const QKNormParams p) {
	const int lane = threadIdx.x & 31;
	const int h = blockIdx.y * QKNORM_HEADS + (threadIdx.x >> 5);
	pdl_wait();
	pdl_launch_dependents();
	if (h >= p.num_heads + p.num_kv_heads) return;
	float *x = p.qkv + (long long)blockIdx.x * p.qkv_cols + (long long)h * p.head_dim;
	const float *w = h < p.num_heads ? p.q_w : p.k_w;
	float ss = 0.f;
	for (int i = lane; i < p.head_dim; i += 32) ss += x[i] * x[i];
	for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
	const float inv = 1.0f / sqrtf(ss / (float)p.head_dim + p.eps);
	for (int i = lane; i < p.head_dim; i += 32) x[i] = w[i] * (x[i] * inv);
}
