// Rotary embedding fused with the KV-cache write (Backend.RoPEWriteKV). Grid (rows, head groups of
// heads_per_block), a block per token row and group of qkv [rows][(Hq + 2·Hkv)·D] (float, the Q/K/V product's
// output): every (head, i < D/2) pair of the q and k heads is rotated by the token's position with HF
// LLaMA's rotate-half convention (x·cos + rotate_half(x)·sin); the rotated q goes to q_out [rows][Hq·D]
// (the contiguous layout the attention kernels read), and the rotated k and the v of the row go to the
// paged caches [blocks][block_size][Hkv][D] at the row's slot (slot < 0: a padding row, not stored). qkv
// itself is only read: attention reads q_out and the caches, and nothing reads qkv after this kernel, so
// writing the rotated values back would cost a third of the kernel's bytes for no reader. cos and sin
// are those of the float32 angle inv_freq[i]·position, as transformers computes it (evaluated in double,
// then rounded), times attention_scaling, computed once per row and i into shared memory for all heads.
//
// With q_norm set (Qwen3's and Gemma 3's q/k norms, Backend.QKNorm, fused here where the rotation runs as
// this kernel) every q and k head is first RMS-normalised: x = w · (x · 1/sqrt(mean(x²) + eps)), w = q_norm
// for a query head and k_norm for a key head, as the QKNorm kernel (qknorm.cu) would have left it.
//
// With in_sx set, qkv holds an FP8 product's unscaled sums (cuBLASLt's, the plan's fp8ScaleFrom): every
// element is first scaled as ScaleE4M3 would have, acc · (in_sx[row] · in_sw[col]), so q_out and the
// caches get what they would have after that pass.
//
// RoPEWriteKV_<dtype>_e4m3 writes the caches as OCP FP8 e4m3 codes instead (model.KVCacheFP8): each
// element of the rotated k (float, not rounded to T first) and of v is stored as e4m3(x / k_scale) and
// e4m3(x / v_scale), an IEEE division then a saturating conversion (±448, NaN kept NaN: the CPU Cache's
// dtype.F32ToE4M3Sat), no clamp before it. q_out stays T.
#include <cuda_fp8.h>

#include "common.cuh"

// ROPE_MAX_HEADS bounds heads_per_block, the heads (q, k or v) one block of a row covers: grid (rows,
// ⌈(Hq + 2·Hkv) / heads_per_block⌉). Few rows take few heads a block (more blocks to spread a short
// step over the SMs), many rows many (the row's angles and barrier paid once for more heads).
#define ROPE_MAX_HEADS 64

struct RoPEParams {
	const float *qkv;       // [rows][qkv_cols], read only
	void *q_out;            // [rows][num_heads·head_dim] of T
	void *k_cache;          // [num_blocks][block_size][num_kv_heads][head_dim] of T
	void *v_cache;
	const int *positions;   // [rows]
	const int *slots;       // [rows]
	const float *inv_freq;  // [head_dim/2]
	float attention_scaling;
	int num_heads;
	int num_kv_heads;
	int head_dim;
	int qkv_cols;
	const float *q_norm;   // [head_dim], or null: no q/k norms
	const float *k_norm;   // [head_dim]
	float eps;
	float k_scale;         // the _e4m3 kernels: the layer's K and V scales of an FP8 KV cache
	float v_scale;
	const float *in_sx;    // [rows]: the Q/K/V product's input scales, or null (see above)
	const float *in_sw;    // [qkv_cols]: its weight scales
	int heads_per_block;   // 1 … ROPE_MAX_HEADS
};

// KVStore stores one K or V element: as T, or with F8 as the e4m3 code of x / scale.
template <typename T, bool F8> struct KVStore {
	typedef T type;
	static __device__ __forceinline__ T store(float x, float) { return Num<T>::store(x); }
};
template <typename T> struct KVStore<T, true> {
	typedef __nv_fp8_storage_t type;
	static __device__ __forceinline__ __nv_fp8_storage_t store(float x, float scale) {
		return __nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3);
	}
};

template <typename T, bool F8 = false> __device__ __forceinline__ void rope_write_kv(const RoPEParams &p) {
	typedef KVStore<T, F8> KVS;
	typedef typename KVS::type KV;
	__shared__ float cos_sin[2 * 256]; // [half] cos, then [half] sin (head_dim ≤ 512)
	__shared__ float inv_rms[ROPE_MAX_HEADS]; // q/k norms: 1/rms of each rotated head of the block
	const long long row = blockIdx.x;
	const int half = p.head_dim / 2;
	const int rotated = p.num_heads + p.num_kv_heads; // q and k heads; the v heads after them are copied
	const int h0 = blockIdx.y * p.heads_per_block, h1 = min(h0 + p.heads_per_block, rotated + p.num_kv_heads);
	const float *qkv = p.qkv + row * p.qkv_cols;
	T *q_out = reinterpret_cast<T *>(p.q_out) + row * (long long)p.num_heads * p.head_dim;
	const long long kv_row = (long long)p.num_kv_heads * p.head_dim;
	pdl_wait();
	pdl_launch_dependents();
	const int pos = p.positions[row];
	const long long slot = p.slots[row];
	KV *k_dst = reinterpret_cast<KV *>(p.k_cache) + slot * kv_row;
	KV *v_dst = reinterpret_cast<KV *>(p.v_cache) + slot * kv_row;
	// ld is element col of the row's qkv, scaled where the product left it unscaled (no contraction).
	const float sx = p.in_sx ? p.in_sx[row] : 1.f;
	auto ld = [&](long long col) { return p.in_sx ? __fmul_rn(qkv[col], __fmul_rn(sx, p.in_sw[col])) : qkv[col]; };
	if (h0 < rotated) {
		if (p.q_norm) { // a warp a head: its sum of squares
			const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
			for (int h = h0 + (threadIdx.x >> 5); h < min(h1, rotated); h += warps) {
				float ss = 0.f;
				for (int i = lane; i < p.head_dim; i += 32) {
					const float x = ld(h * p.head_dim + i);
					ss += x * x;
				}
				for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
				if (lane == 0) inv_rms[h - h0] = 1.0f / sqrtf(ss / (float)p.head_dim + p.eps);
			}
		}
		// The angles depend on (position, i) only: every head of the row shares them.
		for (int i = threadIdx.x; i < half; i += blockDim.x) {
			const float angle = p.inv_freq[i] * (float)pos;
			double s, c;
			sincos((double)angle, &s, &c);
			cos_sin[i] = (float)c * p.attention_scaling;
			cos_sin[half + i] = (float)s * p.attention_scaling;
		}
		__syncthreads();
		const int pairs = (min(h1, rotated) - h0) * half;
		for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
			const int h = h0 + idx / half, i = idx % half;
			const float cf = cos_sin[i], sf = cos_sin[half + i];
			float a = ld(h * p.head_dim + i), b = ld(h * p.head_dim + i + half);
			if (p.q_norm) {
				const float *w = h < p.num_heads ? p.q_norm : p.k_norm;
				const float inv = inv_rms[h - h0];
				a = w[i] * (a * inv);
				b = w[i + half] * (b * inv);
			}
			const float rlo = a * cf - b * sf, rhi = b * cf + a * sf;
			const T lo = Num<T>::store(rlo), hi = Num<T>::store(rhi);
			if (h < p.num_heads) {
				q_out[h * p.head_dim + i] = lo;
				q_out[h * p.head_dim + i + half] = hi;
			} else if (slot >= 0) {
				const int kh = h - p.num_heads;
				if constexpr (F8) {
					k_dst[kh * p.head_dim + i] = KVS::store(rlo, p.k_scale);
					k_dst[kh * p.head_dim + i + half] = KVS::store(rhi, p.k_scale);
				} else {
					k_dst[kh * p.head_dim + i] = lo;
					k_dst[kh * p.head_dim + i + half] = hi;
				}
			}
		}
	}
	const int v0 = max(h0, rotated);
	if (slot >= 0 && v0 < h1) {
		const long long c0 = (long long)v0 * p.head_dim;
		KV *vd = v_dst + (long long)(v0 - rotated) * p.head_dim;
		const int n = (h1 - v0) * p.head_dim;
		for (int j = threadIdx.x; j < n; j += blockDim.x) {
			vd[j] = KVS::store(ld(c0 + j), p.v_scale);
		}
	}
}

#define ROPE_WRITE_KV(T, TN)                                                                                  \
	extern "C" __global__ void RoPEWriteKV_##TN(const RoPEParams p) { rope_write_kv<T>(p); }                \
	extern "C" __global__ void RoPEWriteKV_##TN##_e4m3(const RoPEParams p) { rope_write_kv<T, true>(p); }
FOR_EACH_TYPE(ROPE_WRITE_KV)
