// The FP8 product's kernel body, shared by MatMulE4M3_nt* (fp8.cu: f16 mma.sync on converted codes, any
// device from sm_89) and MatMulE4M3mma_nt1 (fp8_sm90.cu: e4m3 mma.sync, the PTX route to Hopper): the
// layout, the loads, the k split and the epilogue are fp8.cu's (see its head); the MMA policy is how a
// lane's k-block of codes becomes products.
#pragma once
#include <cuda_fp8.h>

#include "common.cuh"

struct MatMulE4M3Params {
	float *y;             // [m][n]
	const void *xq;       // [m][kp] e4m3 (QuantizeE4M3's codes); for NT = 1 their f16 values (x16)
	const void *w;        // [np][kp] e4m3, np = n rounded up to 16
	const float *sx;      // [m] the input rows' scales
	const float *sw;      // [np] the weight rows' scales
	const float *bias;    // [n], or null
	int m, n, kp;
	int ks;               // warps splitting a tile's k-blocks (1, 2, 4, 8)
	int tiles;            // np / 16
};

// e4m3x4_to_f16x2 converts the four codes of v (lowest byte first) to two f16 pairs: lo the first two.
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t v, uint32_t &lo, uint32_t &hi) {
	__half2_raw a = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v & 0xffffu), __NV_E4M3);
	__half2_raw b = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v >> 16), __NV_E4M3);
	lo = (uint32_t)a.x | ((uint32_t)a.y << 16);
	hi = (uint32_t)b.x | ((uint32_t)b.y << 16);
}

// CvtMma adds the products of one k-block (a lane's 16 codes of rows lo and hi, and of each token tile's
// inputs) to acc on f16 mma.sync: every code converted to f16 first (exact), products exact in float. With
// X16 the inputs are f16 values already (two 16-byte loads).
struct CvtMma {
	static constexpr bool x16_one_tile = true;
	template <int NT, bool X16>
	static __device__ __forceinline__ void run(float (&acc)[NT][4], const uint4 &wl, const uint4 &wh,
	                                           const uint4 (&xv)[NT][X16 ? 2 : 1]) {
		const uint32_t lw[4] = {wl.x, wl.y, wl.z, wl.w}, hw[4] = {wh.x, wh.y, wh.z, wh.w};
#pragma unroll
		for (int s = 0; s < 4; s++) {
			uint32_t l0, l1, h0, h1;
			e4m3x4_to_f16x2(lw[s], l0, l1);
			e4m3x4_to_f16x2(hw[s], h0, h1);
#pragma unroll
			for (int j = 0; j < NT; j++) {
				uint32_t b0, b1;
				if constexpr (X16) { // halves 4s..4s+3 of the lane's 16
					const uint4 &v = xv[j][s >> 1];
					b0 = s & 1 ? v.z : v.x;
					b1 = s & 1 ? v.w : v.y;
				} else {
					const uint32_t xs = s == 0 ? xv[j][0].x : s == 1 ? xv[j][0].y : s == 2 ? xv[j][0].z : xv[j][0].w;
					e4m3x4_to_f16x2(xs, b0, b1);
				}
				Mma<__half>::run(acc[j], l0, h0, l1, h1, b0, b1);
			}
		}
	}
};

template <int NT, int U, typename MMA> __device__ __forceinline__ void matmul_e4m3(const MatMulE4M3Params &p) {
	// One token tile reads the input as f16 values (QuantizeE4M3's x16): converting the codes in every
	// warp that reads them (each weight tile's) costs as much issue time as the weights' own conversions.
	constexpr bool X16 = MMA::x16_one_tile && NT == 1;
	constexpr int XW = X16 ? 2 : 1; // 16-byte loads of a lane's 16 input columns
	__shared__ float red[8 * NT * 4 * 32]; // [warp][NT][4][32], when ks > 1
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rb = 8 / p.ks;
	const int r = warp / p.ks, s = warp - r * p.ks;
	const int tile = blockIdx.y * rb + r;
	const bool active = tile < p.tiles;
	const int g = lane >> 2, c = lane & 3;
	const int lo = 16 * min(tile, p.tiles - 1) + g, hi = lo + 8;
	const int row0 = blockIdx.x * 8 * NT;

	const unsigned char *w = reinterpret_cast<const unsigned char *>(p.w);
	const unsigned char *x = reinterpret_cast<const unsigned char *>(p.xq);
	const unsigned char *wlo = w + (long long)lo * p.kp + 16 * c;
	const unsigned char *whi = w + (long long)hi * p.kp + 16 * c;
	const unsigned char *xr[NT];
#pragma unroll
	for (int j = 0; j < NT; j++) xr[j] = x + ((long long)min(row0 + 8 * j + g, p.m - 1) * p.kp + 16 * c) * XW;

	float acc[NT][4];
#pragma unroll
	for (int j = 0; j < NT; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) acc[j][e] = 0.f;

	const int blocks = active ? p.kp >> 6 : 0;
	int kb = s;
	// The weights never change: the first step's loads go out before pdl_wait, while the kernel that
	// quantizes x may still run; x is read after it.
	uint4 wl[U], wh[U];
	bool full = kb + (U - 1) * p.ks < blocks;
	if (full) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const long long off = (long long)(kb + u * p.ks) * 64;
			wl[u] = load_stream(wlo + off);
			wh[u] = load_stream(whi + off);
		}
	}
	pdl_wait();
	for (; full; kb += U * p.ks) { // U whole k-blocks: every load issued before their mma
		if (kb != s) {
#pragma unroll
			for (int u = 0; u < U; u++) {
				const long long off = (long long)(kb + u * p.ks) * 64;
				wl[u] = load_stream(wlo + off);
				wh[u] = load_stream(whi + off);
			}
		}
		if constexpr (X16) { // each k-block's input just before its mma: fewer registers, more warps an SM
#pragma unroll
			for (int u = 0; u < U; u++) {
				uint4 xv[1][2];
#pragma unroll
				for (int h = 0; h < 2; h++)
					xv[0][h] = __ldg(reinterpret_cast<const uint4 *>(xr[0] + (long long)(kb + u * p.ks) * 64 * XW) + h);
				MMA::template run<NT, X16>(acc, wl[u], wh[u], xv);
			}
		} else {
			uint4 xv[U][NT][XW];
#pragma unroll
			for (int u = 0; u < U; u++)
#pragma unroll
				for (int j = 0; j < NT; j++)
					xv[u][j][0] = __ldg(reinterpret_cast<const uint4 *>(xr[j] + (long long)(kb + u * p.ks) * 64));
#pragma unroll
			for (int u = 0; u < U; u++) MMA::template run<NT, X16>(acc, wl[u], wh[u], xv[u]);
		}
		full = kb + U * p.ks + (U - 1) * p.ks < blocks;
	}
	for (; kb < blocks; kb += p.ks) { // the rest, one at a time
		const long long off = (long long)kb * 64;
		const uint4 wl = load_stream(wlo + off), wh = load_stream(whi + off);
		uint4 xv[NT][XW];
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int h = 0; h < XW; h++) xv[j][h] = __ldg(reinterpret_cast<const uint4 *>(xr[j] + off * XW) + h);
		MMA::template run<NT, X16>(acc, wl, wh, xv);
	}
	pdl_launch_dependents();
	if (p.ks > 1) {
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) red[((warp * NT + j) * 4 + e) * 32 + lane] = acc[j][e];
		__syncthreads();
		if (s != 0) return;
		for (int t = 1; t < p.ks; t++)
#pragma unroll
			for (int j = 0; j < NT; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) acc[j][e] += red[(((warp + t) * NT + j) * 4 + e) * 32 + lane];
	}
	if (!active) return;
	// acc[j]: (row lo, token 2c), (lo, 2c+1), (hi, 2c), (hi, 2c+1) of token tile j.
	const float swl = p.sw[lo], swh = p.sw[hi];
	const float bl = p.bias != nullptr && lo < p.n ? p.bias[lo] : 0.f;
	const float bh = p.bias != nullptr && hi < p.n ? p.bias[hi] : 0.f;
#pragma unroll
	for (int j = 0; j < NT; j++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int t = row0 + 8 * j + 2 * c + e;
			if (t >= p.m) continue;
			const float sx = p.sx[t];
			float *y = p.y + (long long)t * p.n;
			if (lo < p.n) {
				float v = acc[j][e] * (sx * swl);
				if (p.bias != nullptr) v += bl;
				y[lo] = v;
			}
			if (hi < p.n) {
				float v = acc[j][2 + e] * (sx * swh);
				if (p.bias != nullptr) v += bh;
				y[hi] = v;
			}
		}
}

