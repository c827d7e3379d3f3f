// Rotary embedding fused with the KV-cache write (Backend.RoPEWriteKV). Grid (rows, head groups of
// heads_per_block), a block per token row and group of qkv [rows][(Hq + 2·Hkv)·D] (float, the Q/K/V product's
// output): every (head, i < D/2) pair of the q and k heads is rotated by the token's position with HF
// LLaMA's rotate-half convention (x·cos + rotate_half(x)·sin), four consecutive pairs a thread (16-byte
// loads of qkv: a step of many rows streams it, and a pair a thread left too few bytes in flight; D is a
// multiple of 8, as every attention kernel's head size is, so every row, head and half head starts
// 16-byte aligned in qkv and four elements aligned in q_out and the caches); the rotated q goes to q_out [rows][Hq·D]
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

// KVElem is the element type of the caches: T, or with F8 the e4m3 code.
template <typename T, bool F8> struct KVElem {
	typedef T type;
};
template <typename T> struct KVElem<T, true> {
	typedef __nv_fp8_storage_t type;
};

// store4 stores four consecutive elements at dst (aligned to four of them): as T, or with F8 as the e4m3
// codes of x / scale (E4M3Quotient: the IEEE division's codes).
template <typename T, bool F8> __device__ __forceinline__ void store4(typename KVElem<T, F8>::type *dst, float4 x, float scale) {
	if constexpr (F8) {
		*reinterpret_cast<uint32_t *>(dst) = E4M3Quotient(scale).codes4(x);
	} else if constexpr (sizeof(T) == 4) {
		*reinterpret_cast<float4 *>(dst) = x;
	} else {
		*reinterpret_cast<uint2 *>(dst) = make_uint2(pack2<T>(x.x, x.y), pack2<T>(x.z, x.w));
	}
}

template <typename T, bool F8 = false> __device__ __forceinline__ void rope_write_kv(const RoPEParams &p) {
	typedef typename KVElem<T, F8>::type KV;
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
	// ld4 is elements col … col+3 of the row's qkv (col a multiple of 4), scaled where the product left
	// them unscaled (no contraction).
	const float sx = p.in_sx ? p.in_sx[row] : 1.f;
	auto ld4 = [&](long long col) {
		float4 x = *reinterpret_cast<const float4 *>(qkv + col);
		if (p.in_sx) {
			const float4 w = *reinterpret_cast<const float4 *>(p.in_sw + col);
			x = make_float4(__fmul_rn(x.x, __fmul_rn(sx, w.x)), __fmul_rn(x.y, __fmul_rn(sx, w.y)),
			                __fmul_rn(x.z, __fmul_rn(sx, w.z)), __fmul_rn(x.w, __fmul_rn(sx, w.w)));
		}
		return x;
	};
	if (h0 < rotated) {
		if (p.q_norm) { // a warp a head: its sum of squares
			const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
			for (int h = h0 + (threadIdx.x >> 5); h < min(h1, rotated); h += warps) {
				float ss = 0.f;
				for (int i = 4 * lane; i < p.head_dim; i += 128) {
					const float4 x = ld4(h * p.head_dim + i);
					ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
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
		const int quads = half / 4, n = (min(h1, rotated) - h0) * quads;
#pragma unroll 4
		for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
			const int h = h0 + idx / quads, i = idx % quads * 4;
			const float4 cf = *reinterpret_cast<const float4 *>(&cos_sin[i]);
			const float4 sf = *reinterpret_cast<const float4 *>(&cos_sin[half + i]);
			float4 a = ld4(h * p.head_dim + i), b = ld4(h * p.head_dim + i + half);
			if (p.q_norm) {
				const float *w = h < p.num_heads ? p.q_norm : p.k_norm;
				const float4 wa = make_float4(w[i], w[i + 1], w[i + 2], w[i + 3]);
				const float4 wb = make_float4(w[i + half], w[i + half + 1], w[i + half + 2], w[i + half + 3]);
				const float inv = inv_rms[h - h0];
				a = make_float4(wa.x * (a.x * inv), wa.y * (a.y * inv), wa.z * (a.z * inv), wa.w * (a.w * inv));
				b = make_float4(wb.x * (b.x * inv), wb.y * (b.y * inv), wb.z * (b.z * inv), wb.w * (b.w * inv));
			}
			const float4 lo = make_float4(a.x * cf.x - b.x * sf.x, a.y * cf.y - b.y * sf.y, a.z * cf.z - b.z * sf.z,
			                              a.w * cf.w - b.w * sf.w);
			const float4 hi = make_float4(b.x * cf.x + a.x * sf.x, b.y * cf.y + a.y * sf.y, b.z * cf.z + a.z * sf.z,
			                              b.w * cf.w + a.w * sf.w);
			if (h < p.num_heads) {
				store4<T, false>(q_out + h * p.head_dim + i, lo, 0.f);
				store4<T, false>(q_out + h * p.head_dim + i + half, hi, 0.f);
			} else if (slot >= 0) {
				const int kh = h - p.num_heads;
				store4<T, F8>(k_dst + kh * p.head_dim + i, lo, p.k_scale);
				store4<T, F8>(k_dst + kh * p.head_dim + i + half, hi, p.k_scale);
			}
		}
	}
	const int v0 = max(h0, rotated);
	if (slot >= 0 && v0 < h1) {
		const long long c0 = (long long)v0 * p.head_dim;
		KV *vd = v_dst + (long long)(v0 - rotated) * p.head_dim;
		const int n = (h1 - v0) * p.head_dim;
#pragma unroll 4
		for (int j = 4 * threadIdx.x; j < n; j += 4 * blockDim.x) store4<T, F8>(vd + j, ld4(c0 + j), p.v_scale);
	}
}

#define ROPE_WRITE_KV(T, TN)                                                                                  \
	extern "C" __global__ void RoPEWriteKV_##TN(const RoPEParams p) { rope_write_kv<T>(p); }                \
	extern "C" __global__ void RoPEWriteKV_##TN##_e4m3(const RoPEParams p) { rope_write_kv<T, true>(p); }
FOR_EACH_TYPE(ROPE_WRITE_KV)
