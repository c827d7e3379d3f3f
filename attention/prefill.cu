// Causal attention of query rows over the paged KV cache, flash style: the GPU twin of the prefill path
// of Attend (prefill.go, online.go). A prefill chunk's rows attend to the sequence's cached prefix and to
// the chunk up to themselves; a decode row is a chunk of one. Launched by CUDAPrefill.Attend
// (prefill_cuda.go); compiled into the model's fat binary (../model/kernels/build.sh includes this file),
// so it stays out of the decode kernels' build.
//
// Work items: the host cuts every sequence's rows into items of up to PREFILL_VECTORS query vectors, a
// vector being one (row, query head) of one KV head's group: heads_per_item heads of the group (all G
// when G ≤ 64) times PREFILL_VECTORS / heads_per_item consecutive rows. items[i] = {seq, first row,
// rows, first head of the group}. Grid (items, num_kv_heads); 128 threads, two per vector.
//
// A program loads its vectors' q (times scale) into shared memory as float, then walks the keys from
// position 0 (with a sliding window: the page of its first row's first key) to its last row's position
// in tiles of PREFILL_TILE tokens: each tile's K and V rows are
// read once through the block table (converted to float into shared memory) and serve every vector of
// the program, which is what makes GQA cheap (a group's heads share the read); tiles wholly before the
// window are skipped, and keys of a tile before that first page are neither read nor used (their pages
// may have been given back: block-table entries −1). Per tile, each thread of a
// vector's pair scores half the tile's keys (masked causally by the row's position, and by its window), the pair agrees on
// the running max with a shuffle, rescales its half of the float accumulator (D/2 registers) and adds
// P·V. Scores, max and sums are float (IEEE expf and division), so float32 caches stay float32 end to end.
//
// Shared memory (dynamic): q [64][D+1], K [32][D+1], V [32][D], P [64][33] floats (74 KB at D = 128);
// the +1 pads keep the pair-strided reads of q and K conflict-free. Head sizes 8 to 256 (137 KB at 256: the
// GPUs whose shared memory cannot hold it lack that size).
// This FMA kernel serves float32 and the head sizes below 64; 16-bit dtypes at head sizes 64, 128 and 256
// (over 16-bit or FP8 pages) run the tensor-core kernel at the end of this file (the FMA kernel took most of a long prompt's prefill:
// docs/bench/prefill-h100.md). Decode steps with a head size the decode kernels cover go to
// those.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "common.cuh" // ../model/kernels: Mma, pack2 (build.sh compiles this file with the model's kernels)
#include "prefill.cuh"

#define PREFILL_THREADS 128
#define PREFILL_VECTORS 64
#define PREFILL_TILE 32

template <typename T> struct PrefillElem;
template <> struct PrefillElem<float> {
	static __device__ __forceinline__ float load(float x) { return x; }
	static __device__ __forceinline__ float store(float x) { return x; }
};
template <> struct PrefillElem<__nv_bfloat16> {
	static __device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
	static __device__ __forceinline__ __nv_bfloat16 store(float x) { return __float2bfloat16_rn(x); }
};
template <> struct PrefillElem<__half> {
	static __device__ __forceinline__ float load(__half x) { return __half2float(x); }
	static __device__ __forceinline__ __half store(float x) { return __float2half_rn(x); }
};

// PrefillKV reads one stored K or V element as float: a T of the compute dtype as it is, or (KV =
// PrefillE4M3, an FP8 KV cache) an e4m3 code as float(code) · scale, the float product the CPU's Cache
// computes (exact conversion through f16, then one IEEE multiplication), so that both read the same
// values.
struct PrefillE4M3 {
	unsigned char bits;
};
template <typename KV> struct PrefillKV {
	static __device__ __forceinline__ float load(KV x, float) { return PrefillElem<KV>::load(x); }
};
template <> struct PrefillKV<PrefillE4M3> {
	static __device__ __forceinline__ float load(PrefillE4M3 x, float scale) {
		return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)x.bits, __NV_E4M3))) * scale;
	}
};

// prefill_smem_floats is the dynamic shared memory of one program, in floats.
__host__ __device__ constexpr int prefill_smem_floats(int d) {
	return PREFILL_VECTORS * (d + 1) + PREFILL_TILE * (d + 1) + PREFILL_TILE * d + PREFILL_VECTORS * (PREFILL_TILE + 1);
}

// KV is the pages' element type: T, or PrefillE4M3 for an FP8 KV cache (the _e4m3 entry points).
template <typename T, int D, typename KV = T> __device__ __forceinline__ void prefill_attention(const PrefillParams &p) {
	constexpr int HALF = D / 2;
	constexpr int KEYS = PREFILL_TILE / 2; // keys per thread per tile
	extern __shared__ float smem[];
	float *sq = smem;                                   // [VECTORS][D+1]
	float *sk = sq + PREFILL_VECTORS * (D + 1);         // [TILE][D+1]
	float *sv = sk + PREFILL_TILE * (D + 1);            // [TILE][D]
	float *sp = sv + PREFILL_TILE * D;                  // [VECTORS][TILE+1]

	const int *item = p.items + 4 * blockIdx.x;
	const int seq = item[0], row0 = item[1], nrows = item[2], g0 = item[3];
	const int kvh = blockIdx.y;
	const int hpi = p.heads_per_item;
	const int tid = threadIdx.x, v = tid >> 1, part = tid & 1;
	const int r = v / hpi, g = g0 + v % hpi;
	const bool valid = r < nrows && g < p.group;
	const int row = row0 + r;
	const int head = kvh * p.group + g;
	const int pos = valid ? p.positions[row] : -1;
	const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0; // the row's first key
	const long long qstride = (long long)p.num_heads * D;

	// q of every vector, scaled, as float.
	const T *q = reinterpret_cast<const T *>(p.q);
	for (int idx = tid; idx < PREFILL_VECTORS * D; idx += PREFILL_THREADS) {
		const int vv = idx / D, d = idx - vv * D;
		const int rr = vv / hpi, gg = g0 + vv % hpi;
		float x = 0.f;
		if (rr < nrows && gg < p.group) x = PrefillElem<T>::load(q[(row0 + rr) * qstride + (long long)(kvh * p.group + gg) * D + d]) * p.scale;
		sq[vv * (D + 1) + d] = x;
	}
	// The keys this program needs: positions [0, last row's position], or from the page of its first row's
	// first key (kstart) with a window.
	const int key_end = p.positions[row0 + nrows - 1] + 1;
	const int kstart = p.window > 0 ? max(0, p.positions[row0] - p.window + 1) / p.block_size * p.block_size : 0;
	const int *table = p.block_tables + (long long)seq * p.max_blocks;
	const KV *kc = reinterpret_cast<const KV *>(p.k_cache);
	const KV *vc = reinterpret_cast<const KV *>(p.v_cache);
	const long long kv_row = (long long)p.num_kv_heads * D;

	float acc[HALF];
#pragma unroll
	for (int i = 0; i < HALF; i++) acc[i] = 0.f;
	float m = -INFINITY, l = 0.f;

	for (int t0 = kstart / PREFILL_TILE * PREFILL_TILE; t0 < key_end; t0 += PREFILL_TILE) {
		__syncthreads(); // the previous tile's K/V (and the q fill) are done with
		for (int idx = tid; idx < PREFILL_TILE * D; idx += PREFILL_THREADS) {
			const int kk = idx / D, d = idx - kk * D;
			const int key = t0 + kk;
			float kx = 0.f, vx = 0.f;
			if (key >= kstart && key < key_end) {
				const long long slot = (long long)table[key / p.block_size] * p.block_size + key % p.block_size;
				const long long at = slot * kv_row + (long long)kvh * D + d;
				kx = PrefillKV<KV>::load(kc[at], p.k_scale);
				vx = PrefillKV<KV>::load(vc[at], p.v_scale);
			}
			sk[kk * (D + 1) + d] = kx;
			sv[kk * D + d] = vx;
		}
		__syncthreads();

		// Scores of this thread's half of the tile: each q element is read once and meets its KEYS keys.
		float s[KEYS];
#pragma unroll
		for (int j = 0; j < KEYS; j++) s[j] = 0.f;
		const float *qr = sq + v * (D + 1);
		const float *kr = sk + part * KEYS * (D + 1);
#pragma unroll 4
		for (int d = 0; d < D; d++) {
			const float qd = qr[d];
#pragma unroll
			for (int j = 0; j < KEYS; j++) s[j] += qd * kr[j * (D + 1) + d];
		}
		float tile_max = -INFINITY;
#pragma unroll
		for (int j = 0; j < KEYS; j++) {
			const int key = t0 + part * KEYS + j;
			if (key > pos || key < lo) s[j] = -INFINITY;
			tile_max = fmaxf(tile_max, s[j]);
		}
		tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
		const float m_new = fmaxf(m, tile_max);
		float alpha = 1.f, sum = 0.f;
		if (m_new != -INFINITY) {
			alpha = expf(m - m_new); // m = -inf gives 0: nothing accumulated yet
#pragma unroll
			for (int j = 0; j < KEYS; j++) {
				s[j] = expf(s[j] - m_new); // masked keys: exp(-inf) = 0
				sum += s[j];
			}
		} else {
#pragma unroll
			for (int j = 0; j < KEYS; j++) s[j] = 0.f;
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		l = l * alpha + sum;
		m = m_new;
#pragma unroll
		for (int i = 0; i < HALF; i++) acc[i] *= alpha;
#pragma unroll
		for (int j = 0; j < KEYS; j++) sp[v * (PREFILL_TILE + 1) + part * KEYS + j] = s[j];
		__syncwarp(); // both halves of a pair are in one warp
#pragma unroll 4
		for (int kk = 0; kk < PREFILL_TILE; kk++) {
			const float pw = sp[v * (PREFILL_TILE + 1) + kk];
			const float *vr = sv + kk * D + part * HALF;
#pragma unroll
			for (int i = 0; i < HALF; i++) acc[i] += pw * vr[i];
		}
	}
	if (!valid) return;
	T *out = reinterpret_cast<T *>(p.out) + row * qstride + (long long)head * D + part * HALF;
	const float inv = 1.f / l;
#pragma unroll
	for (int i = 0; i < HALF; i++) out[i] = PrefillElem<T>::store(acc[i] * inv);
}

// Each kernel's dynamic shared memory in bytes is the __device__ int <kernel>_smem beside it, which the
// loader (prefill_cuda.go) reads: the sizes live here, with the layouts they describe.
#define PREFILL_ATTENTION(T, TN, D)                                                                           \
	extern "C" __device__ int PrefillAttention_##TN##_d##D##_smem = 4 * prefill_smem_floats(D);          \
	extern "C" __global__ void __launch_bounds__(PREFILL_THREADS) PrefillAttention_##TN##_d##D(const PrefillParams p) { \
		prefill_attention<T, D>(p);                                                                       \
	}
#define PREFILL_ATTENTION_ALL(T, TN)                                                                          \
	PREFILL_ATTENTION(T, TN, 8)                                                                           \
	PREFILL_ATTENTION(T, TN, 16)                                                                          \
	PREFILL_ATTENTION(T, TN, 32)                                                                          \
	PREFILL_ATTENTION(T, TN, 64)                                                                          \
	PREFILL_ATTENTION(T, TN, 128)                                                                          \
	PREFILL_ATTENTION(T, TN, 256)

PREFILL_ATTENTION_ALL(float, f32)
PREFILL_ATTENTION_ALL(__nv_bfloat16, bf16)
PREFILL_ATTENTION_ALL(__half, f16)

// Over FP8 KV pages: PrefillAttention_<dtype>_e4m3_d<head_dim> (the FMA kernel: float32, the head sizes
// below 64; the tensor-core kernel's _e4m3 entry points serve the others).
#define PREFILL_ATTENTION_E4M3(T, TN, D)                                                                      \
	extern "C" __device__ int PrefillAttention_##TN##_e4m3_d##D##_smem = 4 * prefill_smem_floats(D);     \
	extern "C" __global__ void __launch_bounds__(PREFILL_THREADS) PrefillAttention_##TN##_e4m3_d##D(const PrefillParams p) { \
		prefill_attention<T, D, PrefillE4M3>(p);                                                          \
	}
#define PREFILL_ATTENTION_E4M3_ALL(T, TN)                                                                     \
	PREFILL_ATTENTION_E4M3(T, TN, 8)                                                                      \
	PREFILL_ATTENTION_E4M3(T, TN, 16)                                                                     \
	PREFILL_ATTENTION_E4M3(T, TN, 32)                                                                     \
	PREFILL_ATTENTION_E4M3(T, TN, 64)                                                                     \
	PREFILL_ATTENTION_E4M3(T, TN, 128)                                                                    \
	PREFILL_ATTENTION_E4M3(T, TN, 256)

PREFILL_ATTENTION_E4M3_ALL(float, f32)
PREFILL_ATTENTION_E4M3_ALL(__nv_bfloat16, bf16)
PREFILL_ATTENTION_E4M3_ALL(__half, f16)

// ---------------------------------------------------------------------------------------------------
// Tensor-core path (16-bit dtypes, D = 64 or 128): the same work items and grid, FlashAttention-2 style.
// Each of the 4 warps owns 16 of the item's 64 vectors as the A operand of mma.sync.m16n8k16 (q in
// registers, straight from global memory). K and V tiles of 64 keys go to shared memory with 16-byte
// cp.async through the block table (zero-filled past the last key), two tiles in flight, rows XOR-swizzled
// by 16-byte chunk so that ldmatrix reads are conflict-free. Per tile a warp computes S = q·Kᵀ (16 × 64,
// fp32), masks it causally per row, updates its rows' running max and sum (log2 units, exp2f), turns P
// into A fragments without shared memory and adds P·V (ldmatrix.trans) into a 16 × D fp32 accumulator.
// The dynamic shared memory is two K and two V tiles: 64 KiB at D = 128, 128 KiB at D = 256 (Gemma 3).
//
// Over FP8 pages (KV = PrefillE4M3, the _e4m3 entry points) the copies bring the tiles' e4m3 codes (16 a
// chunk) into two code buffers instead, and once a tile has landed the block converts it into one K and
// one V tile of T in the swizzled layout (every e4m3 value is a bf16 and an f16 value: exact), which the
// unchanged mma loop reads; K's scale is folded into the scores' scale and V's applied to the sums at the
// end, so the products are the CPU twin's float32(code) · scale up to the 16-bit rounding of P that the
// plain kernel has too. Shared memory: the same bytes (one T tile pair, two code tile pairs).

#define PMMA_TILE 64

// pmma_e4m3x2 is the pair of T (bf16 or f16) of two e4m3 codes (c, lowest byte first), exactly.
template <typename T> __device__ __forceinline__ uint32_t pmma_e4m3x2(uint32_t c) {
	const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(c & 0xffffu), __NV_E4M3);
	if constexpr (std::is_same<T, __half>::value) {
		return (uint32_t)h.x | ((uint32_t)h.y << 16);
	} else {
		const float2 f = __half22float2(__half2(h));
		return pack2<T>(f.x, f.y);
	}
}

__device__ __forceinline__ void pmma_cp16(void *dst, const void *src, bool valid) {
	const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void pmma_ldmatrix(uint32_t (&r)[4], const void *p) {
	const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(s));
}

__device__ __forceinline__ void pmma_ldmatrix_trans(uint32_t (&r)[4], const void *p) {
	const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(s));
}

// pmma_offset is the byte offset of 16-byte chunk ch of row tok in a swizzled [64][D] tile.
template <int D> __device__ __forceinline__ int pmma_offset(int tok, int ch) {
	return tok * D * 2 + ((ch ^ (tok & 7)) << 4);
}

// pmma_smem_bytes is the tensor-core kernel's dynamic shared memory: two K and two V tiles of PMMA_TILE keys
// of 16-bit values (over FP8 pages the same bytes: one K and one V tile, two of each of their codes).
__host__ __device__ constexpr int pmma_smem_bytes(int d) { return 2 * 2 * PMMA_TILE * d * 2; }

template <typename T, int D, typename KV = T> __device__ __forceinline__ void prefill_mma(const PrefillParams &p) {
	constexpr bool F8 = sizeof(KV) == 1;
	constexpr int CH = D / 8;                         // 16-byte chunks of a row of T
	constexpr int CH8 = D / 16;                       // F8: 16-byte chunks of a row of codes
	constexpr int TILE_BYTES = PMMA_TILE * D * 2;
	constexpr int CODE_BYTES = PMMA_TILE * D;        // F8: a tile of codes
	static_assert(4 * TILE_BYTES == pmma_smem_bytes(D) && 2 * TILE_BYTES + 4 * CODE_BYTES == pmma_smem_bytes(D),
	              "the layout is pmma_smem_bytes's");
	// K[2][64][D], V[2][64][D] of T; F8: K[64][D], V[64][D] of T, then codes K[2][64][D], V[2][64][D].
	extern __shared__ __align__(16) unsigned char pmma_smem[];
	unsigned char *sk = pmma_smem, *sv = pmma_smem + (F8 ? 1 : 2) * TILE_BYTES;
	unsigned char *ck = pmma_smem + 2 * TILE_BYTES, *cv = ck + 2 * CODE_BYTES;

	const int *item = p.items + 4 * blockIdx.x;
	const int seq = item[0], row0 = item[1], nrows = item[2], g0 = item[3];
	const int kvh = blockIdx.y, hpi = p.heads_per_item;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, cq = lane & 3;
	const long long qstride = (long long)p.num_heads * D;

	// The two rows of the warp's fragments: vectors 16·warp + gq and that + 8.
	bool valid[2];
	int pos[2], lo[2]; // each row's last and first key
	long long off[2];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int v = 16 * warp + gq + 8 * i, r = v / hpi, g = g0 + v % hpi;
		valid[i] = r < nrows && g < p.group;
		pos[i] = valid[i] ? p.positions[row0 + r] : -1;
		lo[i] = p.window > 0 ? max(0, pos[i] - p.window + 1) : 0;
		off[i] = valid[i] ? (row0 + r) * qstride + (long long)(kvh * p.group + g) * D : 0;
	}
	const uint32_t *q32 = reinterpret_cast<const uint32_t *>(p.q);
	uint32_t qa[D / 16][4];
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) {
		const int d = 16 * kk + 2 * cq;
		qa[kk][0] = valid[0] ? q32[(off[0] + d) >> 1] : 0u;
		qa[kk][1] = valid[1] ? q32[(off[1] + d) >> 1] : 0u;
		qa[kk][2] = valid[0] ? q32[(off[0] + d + 8) >> 1] : 0u;
		qa[kk][3] = valid[1] ? q32[(off[1] + d + 8) >> 1] : 0u;
	}

	const int key_end = p.positions[row0 + nrows - 1] + 1;
	// With a window the walk starts at the tile of the page of the first row's first key (kstart): the
	// tiles before it are skipped, its keys before kstart neither read nor used.
	const int kstart = p.window > 0 ? max(0, p.positions[row0] - p.window + 1) / p.block_size * p.block_size : 0;
	const int tiles = (key_end + PMMA_TILE - 1) / PMMA_TILE;
	const int *table = p.block_tables + (long long)seq * p.max_blocks;
	const KV *kc = reinterpret_cast<const KV *>(p.k_cache);
	const KV *vc = reinterpret_cast<const KV *>(p.v_cache);
	auto load_tile = [&](int t) {
		if constexpr (F8) { // codes, unswizzled: convert_tile lays them out
			for (int i = tid; i < PMMA_TILE * CH8; i += PREFILL_THREADS) {
				const int tok = i / CH8, ch = i - tok * CH8;
				const int key = t * PMMA_TILE + tok;
				const int kcl = max(kstart, min(key, key_end - 1));
				const long long slot = (long long)table[kcl / p.block_size] * p.block_size + kcl % p.block_size;
				const long long at = (slot * p.num_kv_heads + kvh) * D + ch * 16;
				const int so = (t & 1) * CODE_BYTES + tok * D + ch * 16;
				const bool in = key >= kstart && key < key_end;
				pmma_cp16(ck + so, kc + at, in);
				pmma_cp16(cv + so, vc + at, in);
			}
		} else {
			unsigned char *dk = sk + (t & 1) * TILE_BYTES, *dv = sv + (t & 1) * TILE_BYTES;
			for (int i = tid; i < PMMA_TILE * CH; i += PREFILL_THREADS) {
				const int tok = i / CH, ch = i - tok * CH;
				const int key = t * PMMA_TILE + tok;
				const int kcl = max(kstart, min(key, key_end - 1));
				const long long slot = (long long)table[kcl / p.block_size] * p.block_size + kcl % p.block_size;
				const long long at = (slot * p.num_kv_heads + kvh) * D + ch * 8;
				const int so = pmma_offset<D>(tok, ch);
				const bool in = key >= kstart && key < key_end;
				pmma_cp16(dk + so, kc + at, in);
				pmma_cp16(dv + so, vc + at, in);
			}
		}
		asm volatile("cp.async.commit_group;" ::: "memory");
	};
	// F8: tile t's codes (landed) as the K and V tiles of T.
	auto convert_tile = [&](int t) {
		for (int i = tid; i < 2 * PMMA_TILE * CH8; i += PREFILL_THREADS) {
			const int which = i / (PMMA_TILE * CH8), c = i - which * (PMMA_TILE * CH8);
			const int tok = c / CH8, ch = c - tok * CH8;
			const uint4 v = *reinterpret_cast<const uint4 *>((which ? cv : ck) + (t & 1) * CODE_BYTES + tok * D + ch * 16);
			unsigned char *dst = which ? sv : sk;
			*reinterpret_cast<uint4 *>(dst + pmma_offset<D>(tok, 2 * ch)) =
			    make_uint4(pmma_e4m3x2<T>(v.x), pmma_e4m3x2<T>(v.x >> 16), pmma_e4m3x2<T>(v.y), pmma_e4m3x2<T>(v.y >> 16));
			*reinterpret_cast<uint4 *>(dst + pmma_offset<D>(tok, 2 * ch + 1)) =
			    make_uint4(pmma_e4m3x2<T>(v.z), pmma_e4m3x2<T>(v.z >> 16), pmma_e4m3x2<T>(v.w), pmma_e4m3x2<T>(v.w >> 16));
		}
	};

	float o[D / 8][4];
#pragma unroll
	for (int dn = 0; dn < D / 8; dn++)
#pragma unroll
		for (int e = 0; e < 4; e++) o[dn][e] = 0.f;
	float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
	const float scale_log2 = p.scale * 1.4426950408889634f * (F8 ? p.k_scale : 1.f);

	const int t_first = kstart / PMMA_TILE;
	load_tile(t_first);
	for (int t = t_first; t < tiles; t++) {
		if (t + 1 < tiles) {
			load_tile(t + 1);
			asm volatile("cp.async.wait_group 1;" ::: "memory");
		} else {
			asm volatile("cp.async.wait_group 0;" ::: "memory");
		}
		__syncthreads();
		if constexpr (F8) {
			convert_tile(t);
			__syncthreads();
		}
		const unsigned char *ks = sk + (F8 ? 0 : (t & 1) * TILE_BYTES), *vs = sv + (F8 ? 0 : (t & 1) * TILE_BYTES);

		// S = q · Kᵀ for 8 tiles of 8 keys.
		float s[8][4];
#pragma unroll
		for (int j = 0; j < 8; j++) {
#pragma unroll
			for (int e = 0; e < 4; e++) s[j][e] = 0.f;
#pragma unroll
			for (int kk = 0; kk < D / 16; kk += 2) {
				uint32_t b[4];
				const int tok = 8 * j + (lane & 7);
				pmma_ldmatrix(b, ks + pmma_offset<D>(tok, 2 * kk + (lane >> 3)));
				Mma<T>::run(s[j], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b[0], b[1]);
				Mma<T>::run(s[j], qa[kk + 1][0], qa[kk + 1][1], qa[kk + 1][2], qa[kk + 1][3], b[2], b[3]);
			}
		}
		// Causal mask and the online softmax of the thread's two rows (the quad of lanes 4gq… shares them).
		const int t0 = t * PMMA_TILE;
		float mx[2] = {m[0], m[1]};
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int key = t0 + 8 * j + 2 * cq + (e & 1);
				float x = s[j][e] * scale_log2;
				if (key > pos[e >> 1] || key < lo[e >> 1]) x = -INFINITY;
				s[j][e] = x;
				mx[e >> 1] = fmaxf(mx[e >> 1], x);
			}
		float base[2], alpha[2], rs[2] = {0.f, 0.f};
		prefill_rows_max(mx, m, base, alpha);
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const float pe = exp2f(s[j][e] - base[e >> 1]);
				s[j][e] = pe;
				rs[e >> 1] += pe;
			}
#pragma unroll
		for (int i = 0; i < 2; i++) l[i] = l[i] * alpha[i] + rs[i];
#pragma unroll
		for (int dn = 0; dn < D / 8; dn++)
#pragma unroll
			for (int e = 0; e < 4; e++) o[dn][e] *= alpha[e >> 1];

		// O += P · V, 16 keys a step.
#pragma unroll
		for (int kk = 0; kk < PMMA_TILE / 16; kk++) {
			const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
			                       pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
			                       pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
			const int tok = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
			for (int dn = 0; dn < D / 8; dn += 2) {
				uint32_t b[4];
				pmma_ldmatrix_trans(b, vs + pmma_offset<D>(tok, dn + (lane >> 4)));
				Mma<T>::run(o[dn], a[0], a[1], a[2], a[3], b[0], b[1]);
				Mma<T>::run(o[dn + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
			}
		}
		__syncthreads(); // this buffer is refilled by the load two tiles on (F8: the T tiles by the next convert)
	}

	T *out = reinterpret_cast<T *>(p.out);
#pragma unroll
	for (int i = 0; i < 2; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
		if (!valid[i]) continue;
		const float inv = (F8 ? p.v_scale : 1.f) / l[i];
		uint32_t *dst = reinterpret_cast<uint32_t *>(out + off[i]);
#pragma unroll
		for (int dn = 0; dn < D / 8; dn++)
			dst[(8 * dn + 2 * cq) >> 1] = pack2<T>(o[dn][2 * i] * inv, o[dn][2 * i + 1] * inv);
	}
}

#define PREFILL_MMA(T, TN, D)                                                                                 \
	extern "C" __device__ int PrefillAttentionMMA_##TN##_d##D##_smem = pmma_smem_bytes(D);                \
	extern "C" __global__ void __launch_bounds__(PREFILL_THREADS) PrefillAttentionMMA_##TN##_d##D(const PrefillParams p) { \
		prefill_mma<T, D>(p);                                                                             \
	}
PREFILL_MMA(__nv_bfloat16, bf16, 64)
PREFILL_MMA(__nv_bfloat16, bf16, 128)
PREFILL_MMA(__half, f16, 64)
PREFILL_MMA(__half, f16, 128)
PREFILL_MMA(__nv_bfloat16, bf16, 256)
PREFILL_MMA(__half, f16, 256)

// Over FP8 pages: PrefillAttentionMMA_<dtype>_e4m3_d<head_dim>.
#define PREFILL_MMA_E4M3(T, TN, D)                                                                            \
	extern "C" __device__ int PrefillAttentionMMA_##TN##_e4m3_d##D##_smem = pmma_smem_bytes(D);           \
	extern "C" __global__ void __launch_bounds__(PREFILL_THREADS) PrefillAttentionMMA_##TN##_e4m3_d##D(const PrefillParams p) { \
		prefill_mma<T, D, PrefillE4M3>(p);                                                                \
	}
PREFILL_MMA_E4M3(__nv_bfloat16, bf16, 64)
PREFILL_MMA_E4M3(__nv_bfloat16, bf16, 128)
PREFILL_MMA_E4M3(__nv_bfloat16, bf16, 256)
PREFILL_MMA_E4M3(__half, f16, 64)
PREFILL_MMA_E4M3(__half, f16, 128)
PREFILL_MMA_E4M3(__half, f16, 256)
