// Causal prefill attention on Hopper's asynchronous tensor cores (wgmma, sm_90a): the same work as
// prefill.cu's tensor-core kernel (query rows of one sequence over the paged cache, causal, a sliding
// window, 16-bit dtypes, head sizes 64 and 128), with FlashAttention-3's products. Launched by
// CUDAPrefill.Attend (prefill_cuda.go) on sm_90 where the driver compiles this file's PTX; the
// mma.sync kernel of prefill.cu serves every other GPU, FP8 pages and head size 256.
//
// Work items: PrefillItems cut for 128 vectors (PrefillSM90Vectors), a vector being one (row, query head)
// of one KV head's group, as in prefill.cu. Grid (items, num_kv_heads), 256 threads: two consumer
// warpgroups, warpgroup w owning the item's vectors [64w, 64w + 64) as the 64 rows of its wgmma tiles.
//
// Shared memory (1024-byte aligned, every tile in the 128-byte swizzle that wgmma's descriptors read: a
// tile of R rows × D elements is D/64 column blocks of R rows × 128 bytes, row r's 16-byte chunk c stored
// at chunk c ^ (r mod 8)): the two warpgroups' q tiles [64][D], then two stages of a K tile and a V tile
// of PH_TILE keys. Every thread copies its share of a tile with 16-byte cp.async through the block table
// (zero-filled past the last key); tile t + 1's copies go out before tile t's products.
//
// Per tile a warpgroup computes S = q·Kᵀ (m64n128k16, both operands K-major from shared memory), masks it
// (only on tiles that cross a row's diagonal or its window's start), runs the online softmax on its rows in
// registers (log2 units, exp2f, as prefill.cu), turns P into bf16/f16 A fragments in registers and adds
// P·V (m64nDk16, A from registers, V read N-major from the same [key][d] tile: the transposed B operand of
// 16-bit wgmma, so V needs no transpose pass). A warpgroup whose rows end before a tile, or whose item
// has no vectors left for it, skips that tile's products.
//
// This file needs PTX ISA 8.0 and target sm_90a (wgmma), newer than nvcc 11.8 emits: build.sh compiles it
// to PTX for compute_90 and raises the version, as gemm_sm90.cu; the driver compiles it at load.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh" // ../model/kernels: pack2
#include "prefill.cuh"

#define PH_THREADS 256
#define PH_TILE 128

// ph_off is the byte offset of 16-byte chunk ch of row r in a swizzled tile of ROWS rows.
template <int ROWS> __device__ __forceinline__ uint32_t ph_off(int r, int ch) {
	return (uint32_t)((ch >> 3) * ROWS * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

// ph_desc is the matrix descriptor of a tile in the 128-byte swizzle at shared address addr: stride 1024
// bytes between groups of 8 rows (K-major: rows of the M or N dimension; N-major: rows of K), leading
// byte offset lbo (N-major: between column blocks of 64 elements; unused by K-major, set to 1).
__device__ __forceinline__ uint64_t ph_desc(uint32_t addr, uint32_t lbo) {
	return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
	       ((uint64_t)1 << 62);
}

__device__ __forceinline__ void ph_cp16(uint32_t dst, const void *src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// PhWgmma<T>: ssN is d (+)= A·B of m64nNk16 with A and B K-major in shared memory (sd = 0: d = A·B); rsN
// is d += A·B with A in registers (the m64k16 fragment: mma.sync's m16k16 A layout, warp w of the
// warpgroup holding rows 16w…16w+15) and B N-major in shared memory. Accumulators in the m64nN layout:
// d[4j + e] holds row 16·warp + lane/4 (+ 8 for e ≥ 2) and column 8j + 2·(lane % 4) + (e & 1).
template <typename T> struct PhWgmma;
#define PH_WGMMA(T, TN) \
template <> struct PhWgmma<T> { \
	static __device__ __forceinline__ void ss64(float (&d)[32], uint64_t a, uint64_t b, int sd) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n64k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
		             : "l"(a), "l"(b), "r"(sd)); \
	} \
	static __device__ __forceinline__ void ss128(float (&d)[64], uint64_t a, uint64_t b, int sd) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n128k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
		             : "l"(a), "l"(b), "r"(sd)); \
	} \
	static __device__ __forceinline__ void rs64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n64k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)); \
	} \
	static __device__ __forceinline__ void rs128(float (&d)[64], const uint32_t (&a)[4], uint64_t b) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n128k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)); \
	} \
};
PH_WGMMA(__nv_bfloat16, "bf16")
PH_WGMMA(__half, "f16")

__device__ __forceinline__ void ph_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void ph_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void ph_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// ph_pin keeps the compiler from moving reads or writes of accumulators across the wgmma wait before it:
// the registers change when the asynchronous products land, which the asm statements do not declare.
template <int N> __device__ __forceinline__ void ph_pin(float (&x)[N]) {
#pragma unroll
	for (int i = 0; i < N; i++) asm volatile("" : "+f"(x[i])::"memory");
}

template <typename T, int D> __device__ __forceinline__ void prefill_sm90(const PrefillParams &p) {
	constexpr int CH = D / 8;                        // 16-byte chunks of a row
	constexpr int Q_BYTES = 64 * D * 2;              // one warpgroup's q tile
	constexpr int KV_BYTES = PH_TILE * D * 2;        // one K or V tile
	constexpr int ND = D / 2;                        // O accumulators a thread
	extern __shared__ __align__(1024) unsigned char ph_smem[];
	const uint32_t base = ((uint32_t)__cvta_generic_to_shared(ph_smem) + 1023) & ~1023u;
	const uint32_t sq = base, skv = base + 2 * Q_BYTES; // stage s: K at skv + 2s·KV_BYTES, V after it

	const int *item = p.items + 4 * blockIdx.x;
	const int seq = item[0], row0 = item[1], nrows = item[2], g0 = item[3];
	const int kvh = blockIdx.y, hpi = p.heads_per_item;
	const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, gq = lane >> 2, cq = lane & 3;
	const long long qstride = (long long)p.num_heads * D;
	const T *qg = reinterpret_cast<const T *>(p.q);

	// q of the item's 128 vectors into the two q tiles (zero rows for vectors past the item).
	for (int i = tid; i < 128 * CH; i += PH_THREADS) {
		const int v = i / CH, ch = i - v * CH, r = v / hpi, g = g0 + v % hpi;
		const bool in = r < nrows && g < p.group;
		const long long at = in ? (row0 + r) * qstride + (long long)(kvh * p.group + g) * D + ch * 8 : 0;
		ph_cp16(sq + (v >> 6) * Q_BYTES + ph_off<64>(v & 63, ch), qg + at, in);
	}

	// This warpgroup's rows: the thread's two (vectors 64·wg + 16·warp + gq, and + 8), and the span of
	// the warpgroup's rows (rows of one sequence are in position order).
	bool valid[2];
	int pos[2], lo[2];
	long long off[2];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int v = 64 * wg + 16 * warp + gq + 8 * i, r = v / hpi, g = g0 + v % hpi;
		valid[i] = r < nrows && g < p.group;
		pos[i] = valid[i] ? p.positions[row0 + r] : -1;
		lo[i] = p.window > 0 ? max(0, pos[i] - p.window + 1) : 0;
		off[i] = valid[i] ? (row0 + r) * qstride + (long long)(kvh * p.group + g) * D : 0;
	}
	const int wr0 = (64 * wg) / hpi;                          // the warpgroup's first row
	const bool wg_live = wr0 < nrows;                         // it has vectors at all
	const int wr1 = min(nrows, (64 * wg + 63) / hpi + 1) - 1; // its last row
	const int wpos0 = wg_live ? p.positions[row0 + wr0] : 0, wpos1 = wg_live ? p.positions[row0 + wr1] : -1;
	const int wlo1 = p.window > 0 ? max(0, wpos1 - p.window + 1) : 0; // the latest first key of its rows

	const int key_end = p.positions[row0 + nrows - 1] + 1;
	const int kstart = p.window > 0 ? max(0, p.positions[row0] - p.window + 1) / p.block_size * p.block_size : 0;
	const int tiles = (key_end + PH_TILE - 1) / PH_TILE;
	const int *table = p.block_tables + (long long)seq * p.max_blocks;
	const T *kc = reinterpret_cast<const T *>(p.k_cache);
	const T *vc = reinterpret_cast<const T *>(p.v_cache);
	auto load_tile = [&](int t) {
		const uint32_t dk = skv + (t & 1) * 2 * KV_BYTES, dv = dk + KV_BYTES;
		for (int i = tid; i < PH_TILE * CH; i += PH_THREADS) {
			const int tok = i / CH, ch = i - tok * CH;
			const int key = t * PH_TILE + tok;
			const int kcl = max(kstart, min(key, key_end - 1));
			const long long slot = (long long)table[kcl / p.block_size] * p.block_size + kcl % p.block_size;
			const long long at = (slot * p.num_kv_heads + kvh) * D + ch * 8;
			const bool in = key >= kstart && key < key_end;
			const uint32_t so = ph_off<PH_TILE>(tok, ch);
			ph_cp16(dk + so, kc + at, in);
			ph_cp16(dv + so, vc + at, in);
		}
		asm volatile("cp.async.commit_group;" ::: "memory");
	};

	float o[ND];
#pragma unroll
	for (int e = 0; e < ND; e++) o[e] = 0.f;
	float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
	const float scale_log2 = p.scale * 1.4426950408889634f;
	const uint32_t qt = sq + wg * Q_BYTES;

	const int t_first = kstart / PH_TILE;
	load_tile(t_first); // with the q copies: one group
	for (int t = t_first; t < tiles; t++) {
		if (t + 1 < tiles) {
			load_tile(t + 1);
			asm volatile("cp.async.wait_group 1;" ::: "memory");
		} else {
			asm volatile("cp.async.wait_group 0;" ::: "memory");
		}
		// The tile's copies (generic proxy) made visible to the tensor cores' reads (async proxy).
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		__syncthreads();
		const int t0 = t * PH_TILE;
		// The warpgroup skips a tile wholly after its last row or wholly before its rows' windows.
		if (wg_live && t0 <= wpos1 && !(p.window > 0 && t0 + PH_TILE <= max(0, wpos0 - p.window + 1))) {
			const uint32_t kt = skv + (t & 1) * 2 * KV_BYTES, vt = kt + KV_BYTES;
			float s[64];
			ph_fence();
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++) {
				const uint32_t koff = (kk >> 2) * 64 * 128 + (kk & 3) * 32;
				const uint32_t kofk = (kk >> 2) * PH_TILE * 128 + (kk & 3) * 32;
				PhWgmma<T>::ss128(s, ph_desc(qt + koff, 16), ph_desc(kt + kofk, 16), kk > 0);
			}
			ph_commit();
			ph_wait0();
			ph_pin(s);

			// Mask only a tile that reaches past the warpgroup's first row or before its last row's window.
			const bool mask = t0 + PH_TILE - 1 > wpos0 || (p.window > 0 && t0 < wlo1);
			float mx[2] = {m[0], m[1]};
#pragma unroll
			for (int j = 0; j < 16; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					float x = s[4 * j + e] * scale_log2;
					if (mask) {
						const int key = t0 + 8 * j + 2 * cq + (e & 1);
						if (key > pos[e >> 1] || key < lo[e >> 1]) x = -INFINITY;
					}
					s[4 * j + e] = x;
					mx[e >> 1] = fmaxf(mx[e >> 1], x);
				}
			float b[2], alpha[2], rs[2] = {0.f, 0.f};
			prefill_rows_max(mx, m, b, alpha);
			uint32_t a[PH_TILE / 16][4];
#pragma unroll
			for (int j = 0; j < 16; j++) {
				const float p0 = exp2f(s[4 * j] - b[0]), p1 = exp2f(s[4 * j + 1] - b[0]);
				const float p2 = exp2f(s[4 * j + 2] - b[1]), p3 = exp2f(s[4 * j + 3] - b[1]);
				rs[0] += p0 + p1;
				rs[1] += p2 + p3;
				a[j >> 1][2 * (j & 1)] = pack2<T>(p0, p1);
				a[j >> 1][2 * (j & 1) + 1] = pack2<T>(p2, p3);
			}
#pragma unroll
			for (int i = 0; i < 2; i++) l[i] = l[i] * alpha[i] + rs[i];
#pragma unroll
			for (int e = 0; e < ND; e++) o[e] *= alpha[(e >> 1) & 1];
			ph_pin(o);

			ph_fence();
#pragma unroll
			for (int kk = 0; kk < PH_TILE / 16; kk++) {
				const uint64_t vd = ph_desc(vt + kk * 16 * 128, PH_TILE * 128);
				if constexpr (D == 64)
					PhWgmma<T>::rs64(o, a[kk], vd);
				else
					PhWgmma<T>::rs128(o, a[kk], vd);
			}
			ph_commit();
			ph_wait0();
			ph_pin(o);
		}
		__syncthreads(); // this stage is refilled by the copies of tile t + 2
	}

	T *out = reinterpret_cast<T *>(p.out);
#pragma unroll
	for (int i = 0; i < 2; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
		if (!valid[i]) continue;
		const float inv = 1.f / l[i];
		uint32_t *dst = reinterpret_cast<uint32_t *>(out + off[i]);
#pragma unroll
		for (int j = 0; j < D / 8; j++) dst[(8 * j + 2 * cq) >> 1] = pack2<T>(o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
	}
}

#define PREFILL_SM90(T, TN, D)                                                                                \
	extern "C" __global__ void __launch_bounds__(PH_THREADS, 1) PrefillAttentionSM90_##TN##_d##D(const PrefillParams p) { \
		prefill_sm90<T, D>(p);                                                                            \
	}
PREFILL_SM90(__nv_bfloat16, bf16, 64)
PREFILL_SM90(__nv_bfloat16, bf16, 128)
PREFILL_SM90(__half, f16, 64)
PREFILL_SM90(__half, f16, 128)
