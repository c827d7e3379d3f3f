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

// row_scale returns the row's scale from each thread's largest |v| and NaN flag (QuantizeE4M3's rule):
// input_scale where static (non-zero), else max|v|/448, at least min_scale, NaN where a value is.
__device__ __forceinline__ float row_scale(float amax, bool nan, float input_scale, float min_scale, float *scratch,
                                           int *nan_seen) {
	if (input_scale != 0.f) return input_scale;
	if (threadIdx.x == 0) *nan_seen = 0;
	for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	__syncthreads();
	if (nan) atomicOr(nan_seen, 1);
	if (lane == 0) scratch[warp] = amax;
	__syncthreads();
	amax = lane < warps ? scratch[lane] : 0.f;
	for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	return *nan_seen ? __int_as_float(0x7fffffff) : fmaxf(__fdiv_rn(amax, 448.f), min_scale);
}

// MatMulE4M3QParams is the product of MatMulE4M3Params whose kernel quantizes its own input (QIN below):
// x is the input rows in the compute dtype T [m][k], quantized as QuantizeE4M3 would (input_scale when
// static, else per row from max|x|, at least min_scale); xq and sx of the product are not read.
struct MatMulE4M3QParams {
	MatMulE4M3Params mm;
	const void *x; // [m][k] of T
	float input_scale, min_scale;
	int k;
};

// quantize_rows is QIN's prologue: block-wide, each of the block's rows token rows (from row0) of q.x
// quantized into xs (a row every kp + 16 bytes: the pad spreads the rows' 16-byte loads over the banks)
// and its scale into sx, exactly as QuantizeE4M3 computes them. Every thread takes part.
template <typename T>
__device__ __forceinline__ void quantize_rows(const MatMulE4M3QParams &q, int row0, int rows, unsigned char *xs, float *sx) {
	__shared__ float scratch[32];
	__shared__ int nan_seen;
	const int kp = q.mm.kp;
	for (int r = 0; r < rows; r++) {
		const T *x = reinterpret_cast<const T *>(q.x) + (long long)(row0 + r) * q.k;
		float amax = 0.f;
		bool nan = false;
		if (q.input_scale == 0.f) {
			for (int i = threadIdx.x; i < q.k; i += blockDim.x) {
				const float v = fabsf(Num<T>::load(x[i]));
				nan |= v != v;
				amax = fmaxf(amax, v);
			}
		}
		const float s = row_scale(amax, nan, q.input_scale, q.min_scale, scratch, &nan_seen);
		const E4M3Quotient div(s);
		unsigned char *dst = xs + r * (kp + 16);
		for (int i = threadIdx.x; i < kp; i += blockDim.x) dst[i] = i < q.k ? div.code(Num<T>::load(x[i])) : 0;
		if (threadIdx.x == 0) sx[r] = s;
		__syncthreads(); // every read of nan_seen and scratch done before the next row's reset
	}
}

// matmul_e4m3 is the product's body. With QIN (one token tile, an MMA that reads codes: the Hopper
// kernel) the block first quantizes its token rows of the T input into shared memory (quantize_rows,
// dynamic shared memory of 32 + rows · (kp + 16) bytes) and its warps read their codes there, so that no
// QuantizeE4M3 runs before it: where the input's producer cannot quantize it (attention's output, whose
// scale needs every head of a token), the product does, each block for itself. Its weights' first loads
// still go out before pdl_wait.
template <int NT, int U, typename MMA, bool QIN = false, typename T = float>
__device__ __forceinline__ void matmul_e4m3(const MatMulE4M3Params &p, const MatMulE4M3QParams *q = nullptr) {
	static_assert(!QIN || (NT == 1 && !MMA::x16_one_tile), "a kernel quantizing its input runs one tile of codes");
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
	// QIN: the rows' scales (8 floats), then their codes [rows][kp + 16], in dynamic shared memory.
	extern __shared__ __align__(16) unsigned char qin_smem[];
	float *qin_sx = reinterpret_cast<float *>(qin_smem);
	unsigned char *qin_codes = qin_smem + 32;
	if constexpr (QIN) {
		xr[0] = qin_codes + (long long)min(g, min(8, p.m - row0) - 1) * (p.kp + 16) + 16 * c;
	} else {
#pragma unroll
		for (int j = 0; j < NT; j++) xr[j] = x + ((long long)min(row0 + 8 * j + g, p.m - 1) * p.kp + 16 * c) * XW;
	}

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
	if constexpr (QIN) quantize_rows<T>(*q, row0, min(8, p.m - row0), qin_codes, qin_sx);
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
				for (int j = 0; j < NT; j++) {
					const uint4 *a = reinterpret_cast<const uint4 *>(xr[j] + (long long)(kb + u * p.ks) * 64);
					xv[u][j][0] = QIN ? *a : __ldg(a);
				}
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
			for (int h = 0; h < XW; h++) {
				const uint4 *a = reinterpret_cast<const uint4 *>(xr[j] + off * XW) + h;
				xv[j][h] = QIN ? *a : __ldg(a);
			}
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
			const float sx = QIN ? qin_sx[t - row0] : p.sx[t];
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

