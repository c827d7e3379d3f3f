// Causal prefill attention on Hopper's asynchronous tensor cores (wgmma, sm_90a): the same work as
// prefill.cu's tensor-core kernel (query rows of one sequence over the paged cache, causal, a sliding
// window, 16-bit dtypes, head sizes 64, 128 and 256), in FlashAttention-3's warp-specialized structure.
// Launched by CUDAPrefill.Attend (prefill_cuda.go) on sm_90 where the driver compiles this file's PTX;
// the mma.sync kernel of prefill.cu serves every other GPU. The same body in PREFIX mode
// (SharedPrefixSM90_*) is the prefix pass of shared-prefix decode (shared_cuda.go): a group's query rows
// (gathered from the call's queries as they load: PhPrefixParams) over its shared pages, no causal mask,
// split-k partials out.
//
// Work items: PrefillItems cut for 128 vectors (PrefillSM90Vectors), a vector being one (row, query head)
// of one KV head's group, as in prefill.cu. Grid (items, num_kv_heads), 384 threads, three warpgroups;
// program x takes item count − 1 − x, so that a causal prompt's longest items (its last rows) start first
// and the grid's last wave holds short ones.
//
//   - warpgroup 0, the producer, gives up registers (setmaxnreg); one of its threads copies the item's K/V
//     tiles of PH_TILE keys through the block table into a ring of stages with the Hopper copy engine
//     (cp.async.bulk.tensor, tensor maps of the caches as [page][token][kv head][D], one box a page and
//     64-column block, landing in the 128-byte swizzle): per tile it looks up the next tile's pages (all
//     loads in flight at once, and before it waits: page ids waited for one by one made the copies the
//     kernel's bound), waits for the stage's empty barrier, arms the stage's full barrier with the tile's
//     bytes and queues a copy per page and column block, skipping pages wholly outside the item's keys.
//     The copy engine completes the barrier. Sixteen-byte cp.async copies by the whole warpgroup (4096 a
//     tile at d128) held the kernel to 42% of the tensor rate where the consumers alone ran at 58%;
//
//     Over FP8 pages (F8, the _e4m3 entry points) the copies bring each tile's e4m3 codes, unswizzled
//     ([key][D] bytes, one box a page), into a ring of PH_CODE_STAGES code stages instead, and the
//     warpgroup's warps 1-3 (PH_CONVERTERS threads) convert every landed tile into the stage's K and V
//     tiles of T in the swizzled layout (every e4m3 value is a bf16 and an f16 value: exact), fence them
//     for the async proxy and complete the stage's full barrier themselves; K's scale is folded into the
//     scores' scale and V's applied to the sums at the end, as prefill.cu's FP8 kernel does, so the
//     consumers run unchanged. At d128 the code stages take the room of one 16-bit stage (two where
//     16-bit pages have three);
//
//   - warpgroups 1 and 2, the consumers, take the registers, each owning 64 of the item's vectors as the
//     rows of its wgmma tiles (warpgroup 1 + w: vectors [64w, 64w + 64)). Per tile a consumer waits for the
//     full barrier, computes S = q·Kᵀ (m64n128k16, both operands K-major from shared memory), masks it
//     (only on tiles that cross a row's diagonal or its window's start), runs the online softmax on its
//     rows in registers (log2 units, as prefill.cu), turns P into bf16/f16 A fragments in registers,
//     adds P·V (m64nDk16, A from registers, V read N-major from the same [key][d] tile: the transposed B
//     operand of 16-bit wgmma, so V needs no transpose pass) and arrives on the stage's empty barrier.
//     The two take turns at issuing S (two named barriers, FlashAttention-3's ping-pong), so that one's
//     softmax runs beside the other's products. Keys outside the item's [kstart, key_end) get masked
//     scores, but their V rows hold whatever the stage held (a page's unwritten slots, an earlier tile,
//     never-written shared memory): P = 0 times a NaN there is NaN, so a consumer zeroes those V rows of a
//     tile that has any before its P·V. A consumer whose rows end before a tile, or that has no
//     vectors, skips the tile's products but still takes its turn and releases the stage.
//
// Shared memory (1024-byte aligned; every tile in the 128-byte swizzle that wgmma's descriptors read: a
// tile of R rows × D elements is D/64 column blocks of R rows × 128 bytes, row r's 16-byte chunk c stored
// at chunk c ^ (r mod 8)): the two consumers' q tiles [64][D], PH_STAGES stages of a K and a V tile, over
// FP8 pages the code stages of a K and a V tile of codes, then the stages' full and empty barriers and the
// code stages'. ph_smem_bytes computes it; the loaders read it from each kernel's <name>_smem.
//
// This file needs PTX ISA 8.0 and target sm_90a (wgmma, setmaxnreg), newer than nvcc 11.8 emits:
// build.sh compiles it to PTX for compute_90 and raises the version, as gemm_sm90.cu; the driver compiles
// it at load.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "common.cuh" // ../model/kernels: pack2
#include "decode.cuh"  // DecodeParams (the prefix kernel)
#include "prefill.cuh"
#include "sm90.cuh" // ../model/kernels: mbarriers, wgmma fences, TmaDesc

// The kernels' parameters: the K and V caches' tensor maps (4-D: D, kv heads, tokens of a page, pages;
// 16-bit pages cuda.Device.EncodeTiled's, box 64 × 1 × block size × 1 in the 128-byte swizzle; FP8 pages
// EncodeTiledLinear's, box D × 1 × block size × 1 unswizzled), then the call's parameters. Mirrored by prefillSM90Params (prefill_cuda.go) and sharedPrefixSM90Params (shared_cuda.go).
template <typename P> struct PhArgs {
	TmaDesc kmap, vmap;
	P p;
};
// PhPrefixParams are the prefix pass's: DecodeParams over the virtual sequences (group: a virtual
// sequence's rows a KV head, members·G; q: the call's own queries [batch][q_heads][D]) and what takes a
// row to its query, so that the kernel gathers its rows as it loads them (row r of KV head h of virtual
// sequence v is query head h·G + r mod G of decode sequence virtual_seqs[v·members + r / G]), where
// shared.cu's prefix kernels read SharedGather's copy.
struct PhPrefixParams : DecodeParams {
	const int *virtual_seqs; // [virtual][members]: each member slot's decode index
	int q_group;             // G: the query heads a KV head
	int q_heads;             // the call's query heads (q's row stride in heads)
};
static_assert(sizeof(PhArgs<PrefillParams>) == 384, "prefillSM90Params");
static_assert(sizeof(DecodeParams) == 192 && sizeof(PhArgs<PhPrefixParams>) == 512, "sharedPrefixSM90Params");

#define PH_THREADS 384
// PH_TILE is the keys of a K/V tile at head size D, PH_STAGES the ring's depth: as many stages as fit
// beside the q tiles in the 227 KiB a block may take (d128: 3 of 128 keys, 225 KiB; d256: 2 of 64 keys,
// 193 KiB; d64: 4 of 128 keys, 145 KiB). Over FP8 pages (F8) PH_STAGES_F8 16-bit stages and
// PH_CODE_STAGES stages of codes (a K and a V tile of one byte a value): d128 2 and 2 (225 KiB), d256 2
// and 1 (225 KiB), d64 4 and 2 (177 KiB).
#define PH_TILE(D) ((D) == 256 ? 64 : 128)
#define PH_STAGES(D) ((D) == 128 ? 3 : (D) == 256 ? 2 : 4)
#define PH_STAGES_F8(D) ((D) == 64 ? 4 : 2)
#define PH_CODE_STAGES(D) ((D) == 256 ? 1 : 2)
// PH_CONVERTERS is the threads that convert FP8 tiles: the producer warpgroup's warps 1-3.
#define PH_CONVERTERS 96
// ph_smem_bytes is the kernels' dynamic shared memory at head size d (over FP8 pages: f8), as
// prefill_sm90 lays it out: 1 KiB to align the tiles, two q tiles, the ring's stages of a K and a V tile,
// (f8) the code stages, and each stage's full and empty barriers. Each kernel's is the __device__ int
// <kernel>_smem beside it, which the loaders read.
__host__ __device__ constexpr int ph_smem_bytes(int d, bool f8 = false) {
	return f8 ? 1024 + 2 * 64 * d * 2 + PH_STAGES_F8(d) * 2 * PH_TILE(d) * d * 2 +
	                PH_CODE_STAGES(d) * 2 * PH_TILE(d) * d + 16 * PH_STAGES_F8(d) + 16 * PH_CODE_STAGES(d)
	          : 1024 + 2 * 64 * d * 2 + PH_STAGES(d) * 2 * PH_TILE(d) * d * 2 + 16 * PH_STAGES(d);
}
static_assert(ph_smem_bytes(128, true) <= 232448 && ph_smem_bytes(256, true) <= 232448, "227 KiB a block");

// Registers a thread: the producer's after it gives some up, the consumers' after they take them (the
// block starts with 168 each, 65536 / 384: 128·56 + 256·224 ≤ 65536).
#define PH_PRODUCER_REGS 56
#define PH_CONSUMER_REGS 224
// setmaxnreg.inc waits until the registers it asks for are free: asking for more than the block holds (the
// launch bounds' share, 168 a thread at 384) would hang the consumers.
static_assert(128 * PH_PRODUCER_REGS + 256 * PH_CONSUMER_REGS <= PH_THREADS * ((65536 / PH_THREADS) & ~7),
              "the warpgroups' registers exceed the block's");

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

// PhWgmma<T>: ssN is d (+)= A·B of m64nNk16 with A and B K-major in shared memory (sd = 0: d = A·B);
// rsN is d += A·B with A in registers (the m64k16 fragment: mma.sync's m16k16 A layout, warp w of the
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

// ph_pin keeps the compiler from moving reads or writes of accumulators across the wgmma wait before it:
// the registers change when the asynchronous products land, which the asm statements do not declare.
template <int N> __device__ __forceinline__ void ph_pin(float (&x)[N]) {
#pragma unroll
	for (int i = 0; i < N; i++) asm volatile("" : "+f"(x[i])::"memory");
}


template <int N> __device__ __forceinline__ void ph_pin(uint32_t (&x)[N][4]) {
#pragma unroll
	for (int i = 0; i < N; i++)
#pragma unroll
		for (int e = 0; e < 4; e++) asm volatile("" : "+r"(x[i][e])::"memory");
}

// ph_turn_wait and ph_turn_pass are the consumers' turns at issuing S: named barriers 1 and 2 (one per
// consumer, 256 threads: the waiting warpgroup's sync and the other's arrive).
__device__ __forceinline__ void ph_turn_wait(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void ph_turn_pass(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// ph_tma_page queues the copy of the box at column c of KV head kvh over the tokens of page pg from the
// cache's tensor map into shared dst, completing on bar (16-bit pages: the column block of 64 elements
// from c; FP8 pages: c 0, the whole row of codes).
__device__ __forceinline__ void ph_tma_page(uint32_t dst, const TmaDesc *map, int c, int kvh, int pg, uint32_t bar) {
	asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
	             "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(kvh), "r"(0), "r"(pg), "r"(bar)
	             : "memory");
}

// ph_produce is the producer thread's loop: tiles [t_first, tiles) of NP pages each (TILE / NP keys a
// page) into the ring of ST stages at dst (full barrier of stage s at full + 8s, empty at empty + 8s), K
// then V. 16-bit pages: a page's column blocks at c·TILE·128 + its rows' offset (the consumers' swizzled
// tile layout; a box of 8 or more rows starts on a 1024-byte boundary, where the swizzle's pattern
// restarts). FP8 pages (F8): a page's codes, one box of its rows × D bytes, at its rows' offset in a
// [TILE][D] tile of codes. Pages wholly outside [kstart, key_end) are not copied.
template <int D, int TILE, int ST, int NP, bool F8>
__device__ __forceinline__ void ph_produce(const TmaDesc *kmap, const TmaDesc *vmap, const int *table, int kvh,
                                           int kstart, int key_end, int t_first, int tiles, uint32_t dst,
                                           uint32_t full, uint32_t empty) {
	constexpr int BS = TILE / NP, BOX = F8 ? BS * D : BS * 128, KV_BYTES = F8 ? TILE * D : TILE * D * 2;
	int pg[NP], nx[NP];
	auto lookup = [&](int t, int (&out)[NP]) {
#pragma unroll
		for (int k = 0; k < NP; k++) {
			const int key0 = t * TILE + k * BS;
			out[k] = t < tiles && key0 + BS > kstart && key0 < key_end ? table[key0 / BS] : -1;
		}
	};
	lookup(t_first, pg);
	int n = 0, s = 0, ph = 0;
	for (int t = t_first; t < tiles; t++, n++) {
		lookup(t + 1, nx); // in flight while the stage drains
		if (n >= ST) mbar_wait(empty + 8 * s, ph ^ 1);
		int live = 0;
#pragma unroll
		for (int k = 0; k < NP; k++) live += pg[k] >= 0;
		const uint32_t fb = full + 8 * s, dk = dst + s * 2 * KV_BYTES, dv = dk + KV_BYTES;
		mbar_expect(fb, live * (F8 ? 1 : D / 64) * BOX * 2);
#pragma unroll
		for (int k = 0; k < NP; k++) {
			if (pg[k] < 0) continue;
#pragma unroll
			for (int c = 0; c < (F8 ? 1 : D / 64); c++) {
				const uint32_t off = c * TILE * 128 + k * BOX;
				ph_tma_page(dk + off, kmap, 64 * c, kvh, pg[k], fb);
				ph_tma_page(dv + off, vmap, 64 * c, kvh, pg[k], fb);
			}
		}
#pragma unroll
		for (int k = 0; k < NP; k++) pg[k] = nx[k];
		if (++s == ST) s = 0, ph ^= 1;
	}
}

// ph_convert is the FP8 converters' loop (thread ct of PH_CONVERTERS): each tile of [t_first, tiles), once
// its codes have landed in code stage cs (of CS at codes, full barrier cfull + 8cs, empty cempty + 8cs)
// and 16-bit stage s (of ST at skv) is free, as the K and V tiles of T in the consumers' swizzled layout;
// then the async-proxy fence and an arrival on both the code stage's empty barrier and the stage's full
// one (PH_CONVERTERS arrivals each). Rows of pages the producer skipped convert whatever the code stage
// held: the consumers mask those keys' scores and zero their V rows, as they do for a 16-bit stage's.
template <typename T, int D, int TILE, int ST, int CS>
__device__ __forceinline__ void ph_convert(int ct, int t_first, int tiles, uint32_t codes, uint32_t cfull,
                                           uint32_t cempty, uint32_t skv, uint32_t full, uint32_t empty) {
	constexpr int CH8 = D / 16, CODE_BYTES = TILE * D, KV_BYTES = TILE * D * 2;
	int n = 0, s = 0, ph = 0, cs = 0, cph = 0;
	for (int t = t_first; t < tiles; t++, n++) {
		mbar_wait(cfull + 8 * cs, cph);
		if (n >= ST) mbar_wait(empty + 8 * s, ph ^ 1);
		const uint32_t src = codes + cs * 2 * CODE_BYTES, dst = skv + s * 2 * KV_BYTES;
#pragma unroll 2
		for (int i = ct; i < 2 * TILE * CH8; i += PH_CONVERTERS) {
			const int which = i / (TILE * CH8), c = i - which * (TILE * CH8), r = c / CH8, j = c - r * CH8;
			uint4 v;
			asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
			             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
			             : "r"(src + which * CODE_BYTES + r * D + 16 * j));
			const uint32_t d = dst + which * KV_BYTES;
			asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(d + ph_off<TILE>(r, 2 * j)),
			             "r"(e4m3_to_t16<T>(v.x)), "r"(e4m3_to_t16<T>(v.x >> 16)), "r"(e4m3_to_t16<T>(v.y)),
			             "r"(e4m3_to_t16<T>(v.y >> 16))
			             : "memory");
			asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(d + ph_off<TILE>(r, 2 * j + 1)),
			             "r"(e4m3_to_t16<T>(v.z)), "r"(e4m3_to_t16<T>(v.z >> 16)), "r"(e4m3_to_t16<T>(v.w)),
			             "r"(e4m3_to_t16<T>(v.w >> 16))
			             : "memory");
		}
		// The tiles are read by wgmma (the async proxy): generic-proxy writes need this fence first.
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		mbar_arrive(cempty + 8 * cs);
		mbar_arrive(full + 8 * s);
		if (++cs == CS) cs = 0, cph ^= 1;
		if (++s == ST) s = 0, ph ^= 1;
	}
}

// PREFIX (P = PhPrefixParams): the shared-prefix pass (shared.cu's prefix kernels' work): a program serves
// 128 rows (row block blockIdx.x % row_blocks of virtual sequence blockIdx.x / row_blocks, each row's
// query loaded from the call's queries through virtual_seqs) over partition blockIdx.z of its shared pages, every key
// in [start, end) of the partition, and writes the split-k partials (m, l in log2 units, acc
// unnormalised). Otherwise (P = PrefillParams) the causal prefill of a work item. F8: over FP8 pages.
// TILE is a template parameter: nvcc 11.8 crashes on a local constexpr in the lambdas' parameter types.
template <typename T, int D, bool PREFIX, bool F8, typename P, int TILE = PH_TILE(D)>
__device__ __forceinline__ void prefill_sm90(const PhArgs<P> &a) {
	const P &p = a.p;
	constexpr int ST = F8 ? PH_STAGES_F8(D) : PH_STAGES(D);
	constexpr int CS = F8 ? PH_CODE_STAGES(D) : 0; // stages of codes
	constexpr int CH = D / 8;                 // 16-byte chunks of a row
	constexpr int Q_BYTES = 64 * D * 2;       // one consumer's q tile
	constexpr int KV_BYTES = TILE * D * 2; // one K or V tile
	constexpr int CODE_BYTES = TILE * D;   // F8: one K or V tile of codes
	constexpr int ND = D / 2;                 // O accumulators a thread
	extern __shared__ __align__(1024) unsigned char ph_smem[];
	const uint32_t base = ((uint32_t)__cvta_generic_to_shared(ph_smem) + 1023) & ~1023u;
	const uint32_t sq = base, skv = base + 2 * Q_BYTES, codes = skv + ST * 2 * KV_BYTES;
	const uint32_t bars = codes + CS * 2 * CODE_BYTES;
	static_assert(1024 + 2 * Q_BYTES + ST * 2 * KV_BYTES + CS * 2 * CODE_BYTES + 2 * 8 * (ST + CS) == ph_smem_bytes(D, F8),
	              "the layout is ph_smem_bytes's");
	auto full = [&](int s) { return bars + 8 * s; };
	auto empty = [&](int s) { return bars + 8 * (ST + s); };
	const uint32_t cfull = bars + 16 * ST, cempty = cfull + 8 * CS; // F8: the code stages' barriers

	const int kvh = blockIdx.y, tid = threadIdx.x;
	const int *table;
	int block_size, kstart, key_end;
	bool windowed; // keys before kstart are masked
	int seq = 0, row0 = 0, nrows = 0, g0 = 0, hpi = 1; // prefill: the work item
	int vs = 0, rows = 0, rblk = 0, part = 0;          // prefix: virtual sequence, its rows, row block, partition
	if constexpr (PREFIX) {
		rows = p.group;
		const int row_blocks = (rows + 127) / 128;
		vs = blockIdx.x / row_blocks, rblk = blockIdx.x % row_blocks, part = blockIdx.z;
		kstart = part * p.partition_tokens;
		key_end = min(kstart + p.partition_tokens, p.context_lens[vs]);
		if (kstart >= key_end) return; // past the sequence's shared tokens: the merge reads no partial
		table = p.block_tables + (long long)vs * p.max_blocks;
		block_size = 1 << p.log2_block_size;
		windowed = kstart > 0;
	} else {
		const int *item = p.items + 4 * (gridDim.x - 1 - blockIdx.x); // the longest items first
		seq = item[0], row0 = item[1], nrows = item[2], g0 = item[3], hpi = p.heads_per_item;
		key_end = p.positions[row0 + nrows - 1] + 1;
		kstart = p.window > 0 ? max(0, p.positions[row0] - p.window + 1) / p.block_size * p.block_size : 0;
		table = p.block_tables + (long long)seq * p.max_blocks;
		block_size = p.block_size;
		windowed = p.window > 0;
	}
	const int tiles = (key_end + TILE - 1) / TILE;
	const int t_first = kstart / TILE;

	if (tid == 0) {
#pragma unroll
		for (int s = 0; s < ST; s++) {
			// 16-bit pages: the producer's arming, the copies' bytes complete it; FP8: each converter.
			mbar_init(full(s), F8 ? PH_CONVERTERS : 1);
			mbar_init(empty(s), 256); // each consumer thread, once it is done with the tile
		}
#pragma unroll
		for (int s = 0; s < CS; s++) {
			mbar_init(cfull + 8 * s, 1);              // the producer's arming and the copies' bytes
			mbar_init(cempty + 8 * s, PH_CONVERTERS); // each converter, once it has read the codes
		}
		// The copy engine (the async proxy) completes the full barriers: their initialization must be
		// visible to it, not only to the block's threads.
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();

	// The warpgroup, made warp-uniform for the compiler (lane 0's): setmaxnreg must be.
	const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
	if (wg == 0) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PH_PRODUCER_REGS) : "memory");
		if constexpr (F8) {
			if (tid >= 32) {
				ph_convert<T, D, TILE, ST, CS>(tid - 32, t_first, tiles, codes, cfull, cempty, skv, full(0), empty(0));
				return;
			}
		}
		if (tid != 0) return;
		const TmaDesc *kmap = &a.kmap, *vmap = &a.vmap;
		auto run = [&](auto pages) {
			if constexpr (F8)
				ph_produce<D, TILE, CS, decltype(pages)::value, true>(kmap, vmap, table, kvh, kstart, key_end, t_first, tiles, codes, cfull, cempty);
			else
				ph_produce<D, TILE, ST, decltype(pages)::value, false>(kmap, vmap, table, kvh, kstart, key_end, t_first, tiles, skv, full(0), empty(0));
		};
		switch (block_size) { // the host launches pages of 8, 16, 32 or 64 tokens (sm90Pages)
		case 8: run(std::integral_constant<int, TILE / 8>{}); break;
		case 16: run(std::integral_constant<int, TILE / 16>{}); break;
		case 32: run(std::integral_constant<int, TILE / 32>{}); break;
		case 64: run(std::integral_constant<int, TILE / 64>{}); break;
		default: __trap(); // no copies would come: the consumers would wait for ever
		}
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(PH_CONSUMER_REGS) : "memory");

	const int c = wg - 1, lt = tid & 127, warp = lt >> 5, lane = tid & 31, gq = lane >> 2, cq = lane & 3;
	const T *qg = reinterpret_cast<const T *>(p.q);
	const uint32_t qt = sq + c * Q_BYTES;
	// prefill: vector v's q row; prefix: the query of row v of the program's row block (PhPrefixParams).
	auto q_at = [&](int v, bool &in) -> long long {
		if constexpr (PREFIX) {
			const int r = rblk * 128 + v;
			in = r < rows;
			if (!in) return 0;
			const int m = r / p.q_group, g = r - m * p.q_group;
			const long long seq = p.virtual_seqs[vs * (rows / p.q_group) + m];
			return (seq * p.q_heads + kvh * p.q_group + g) * D;
		} else {
			const int r = v / hpi, g = g0 + v % hpi;
			in = r < nrows && g < p.group;
			return in ? (row0 + r) * (long long)p.num_heads * D + (long long)(kvh * p.group + g) * D : 0;
		}
	};
	// The consumer's q tile (zero rows for vectors past the item), then a barrier of its own (id 3 + c).
	for (int i = lt; i < 64 * CH; i += 128) {
		const int v = 64 * c + i / CH, ch = i % CH;
		bool in;
		const long long at = q_at(v, in);
		ph_cp16(qt + ph_off<64>(v & 63, ch), qg + at + (in ? ch * 8 : 0), in);
	}
	asm volatile("cp.async.commit_group;" ::: "memory");
	asm volatile("cp.async.wait_group 0;" ::: "memory");
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	asm volatile("bar.sync %0, 128;" ::"r"(3 + c) : "memory");

	// This consumer's rows: the thread's two (vectors 64·c + 16·warp + gq, and + 8), and the span of the
	// consumer's rows (rows of one sequence are in position order), which gives its tiles [ta, tb].
	bool valid[2];
	int pos[2], lo[2];
	long long off[2];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int v = 64 * c + 16 * warp + gq + 8 * i;
		off[i] = q_at(v, valid[i]); // the output row is the q row's place (prefill); prefix: its index · D
		if constexpr (PREFIX) {
			pos[i] = key_end - 1, lo[i] = kstart;
		} else {
			pos[i] = valid[i] ? p.positions[row0 + v / hpi] : -1;
			lo[i] = p.window > 0 ? max(0, pos[i] - p.window + 1) : 0;
		}
	}
	bool live;
	int wpos0, wpos1, wlo0, wlo1; // the positions of the consumer's first and last rows, their first keys
	if constexpr (PREFIX) {
		live = rblk * 128 + 64 * c < rows;
		wpos0 = wpos1 = key_end - 1, wlo0 = wlo1 = kstart;
	} else {
		const int wr0 = (64 * c) / hpi;                          // the consumer's first row
		live = wr0 < nrows;                                      // it has vectors at all
		const int wr1 = min(nrows, (64 * c + 63) / hpi + 1) - 1; // its last row
		wpos0 = live ? p.positions[row0 + wr0] : 0, wpos1 = live ? p.positions[row0 + wr1] : -1;
		wlo0 = p.window > 0 ? max(0, wpos0 - p.window + 1) : 0; // the earliest first key of its rows
		wlo1 = p.window > 0 ? max(0, wpos1 - p.window + 1) : 0; // the latest
	}
	const int ta = max(t_first, wlo0 / TILE), tb = live ? min(tiles - 1, wpos1 / TILE) : -1;

	float o[ND];
#pragma unroll
	for (int e = 0; e < ND; e++) o[e] = 0.f;
	float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
	float scale_log2; // F8: K's scale folded in (the tiles hold the codes' values)
	if constexpr (PREFIX)
		scale_log2 = p.scale_log2 * (F8 ? p.k_scale : 1.f);
	else
		scale_log2 = p.scale * 1.4426950408889634f * (F8 ? p.k_scale : 1.f);
	const float vscale = F8 ? p.v_scale : 1.f; // V's, applied to the sums at the end

	// softmax turns tile t's scores s into P (pc) and the factor alpha of the rows' earlier sums, updating
	// the rows' maxima and sums; MASK: the tile crosses a row's diagonal or window start. The scores stay
	// unscaled: their maximum is scaled once (the scale is positive), and each P is 2^(s·scale − max) as one
	// FFMA and one ex2.approx.ftz (a P under 2^-126 flushes to zero, nothing beside the row's largest, 1);
	// exp2f's fix-up of subnormal results and a separate scaling multiply add instructions to the softmax,
	// which the other consumer's products must hide.
	auto softmax = [&](float (&s)[TILE / 2], int t, uint32_t (&pc)[TILE / 16][4], float (&alpha)[2], auto masked) {
		constexpr bool MASK = decltype(masked)::value;
		const int t0 = t * TILE;
		float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
		for (int j = 0; j < TILE / 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float x = s[4 * j + e];
				if (MASK) {
					const int key = t0 + 8 * j + 2 * cq + (e & 1);
					if (key > pos[e >> 1] || key < lo[e >> 1]) x = -INFINITY;
				}
				s[4 * j + e] = x;
				mx[e >> 1] = fmaxf(mx[e >> 1], x);
			}
#pragma unroll
		for (int i = 0; i < 2; i++) mx[i] = fmaxf(m[i], mx[i] * scale_log2);
		float b[2], rs[2] = {0.f, 0.f};
		prefill_rows_max(mx, m, b, alpha);
		auto ex2 = [](float x) {
			float y;
			asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
			return y;
		};
		const float nb0 = -b[0], nb1 = -b[1];
#pragma unroll
		for (int j = 0; j < TILE / 8; j++) {
			const float p0 = ex2(fmaf(s[4 * j], scale_log2, nb0)), p1 = ex2(fmaf(s[4 * j + 1], scale_log2, nb0));
			const float p2 = ex2(fmaf(s[4 * j + 2], scale_log2, nb1)), p3 = ex2(fmaf(s[4 * j + 3], scale_log2, nb1));
			rs[0] += p0 + p1;
			rs[1] += p2 + p3;
			pc[j >> 1][2 * (j & 1)] = pack2<T>(p0, p1);
			pc[j >> 1][2 * (j & 1) + 1] = pack2<T>(p2, p3);
		}
#pragma unroll
		for (int i = 0; i < 2; i++) l[i] = l[i] * alpha[i] + rs[i];
	};
	auto tile_softmax = [&](float (&s)[TILE / 2], int t, uint32_t (&pc)[TILE / 16][4], float (&alpha)[2]) {
		const int t0 = t * TILE;
		if (t0 + TILE - 1 > wpos0 || (windowed && t0 < wlo1))
			softmax(s, t, pc, alpha, std::true_type{});
		else
			softmax(s, t, pc, alpha, std::false_type{});
	};
	// S = q·Kᵀ of the tile in stage, issued on the consumer's turn.
	auto issue_s = [&](float (&sc)[TILE / 2], int stage) {
		const uint32_t kt = skv + stage * 2 * KV_BYTES;
		ph_turn_wait(1 + c);
		wgmma_fence();
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			const uint32_t koff = (kk >> 2) * 64 * 128 + (kk & 3) * 32;
			const uint32_t kofk = (kk >> 2) * TILE * 128 + (kk & 3) * 32;
			if constexpr (TILE == 64)
				PhWgmma<T>::ss64(sc, ph_desc(qt + koff, 16), ph_desc(kt + kofk, 16), kk > 0);
			else
				PhWgmma<T>::ss128(sc, ph_desc(qt + koff, 16), ph_desc(kt + kofk, 16), kk > 0);
		}
		wgmma_commit();
		ph_turn_pass(2 - c);
		wgmma_wait0();
		ph_pin(sc);
	};
	// O += P·V of the tile in stage, then the stage's release.
	auto add_pv = [&](uint32_t (&pp)[TILE / 16][4], int stage) {
		const uint32_t vt = skv + stage * 2 * KV_BYTES + KV_BYTES;
		ph_pin(o);
		wgmma_fence();
#pragma unroll
		for (int kk = 0; kk < TILE / 16; kk++) {
			const uint64_t vd = ph_desc(vt + kk * 16 * 128, TILE * 128);
			if constexpr (D == 64)
				PhWgmma<T>::rs64(o, pp[kk], vd);
			else if constexpr (D == 128)
				PhWgmma<T>::rs128(o, pp[kk], vd);
			else { // two n128 halves: nvcc 11.8 takes no asm of m64n256's 133 operands
				PhWgmma<T>::rs128(*reinterpret_cast<float(*)[64]>(o), pp[kk], vd);
				PhWgmma<T>::rs128(*reinterpret_cast<float(*)[64]>(o + 64), pp[kk],
				                  ph_desc(vt + 2 * TILE * 128 + kk * 16 * 128, TILE * 128));
			}
		}
		wgmma_commit();
		wgmma_wait0();
		ph_pin(o);
		ph_pin(pp);
		mbar_arrive(empty(stage));
	};

	// zero_v zeroes the V rows of tile t in stage whose keys are outside [kstart, key_end), for this
	// consumer's P·V (the other consumer writes the same zeros for its own).
	auto zero_v = [&](int t, int stage) {
		const uint32_t vt = skv + stage * 2 * KV_BYTES + KV_BYTES;
		for (int i = lt; i < TILE * CH; i += 128) {
			const int r = i / CH, key = t * TILE + r;
			if (key < kstart || key >= key_end)
				asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(vt + ph_off<TILE>(r, i % CH)), "r"(0) : "memory");
		}
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		asm volatile("bar.sync %0, 128;" ::"r"(3 + c) : "memory");
	};

	if (c == 1) ph_turn_pass(1); // consumer 0 takes the first turn
	int s = 0, ph = 0;
	auto advance = [&]() {
		if (++s == ST) s = 0, ph ^= 1;
	};
	auto skip = [&]() { // a tile this consumer has no rows for: its turn and the stage's release
		mbar_wait(full(s), ph);
		ph_turn_wait(1 + c);
		ph_turn_pass(2 - c);
		mbar_arrive(empty(s));
		advance();
	};
	int t = t_first;
	for (; t < tiles && t < ta; t++) skip();
	for (; t <= tb; t++) { // tb < tiles
		mbar_wait(full(s), ph);
		float sc[TILE / 2];
		issue_s(sc, s);
		uint32_t pp[TILE / 16][4];
		float alpha[2];
		tile_softmax(sc, t, pp, alpha);
		// O takes the rows' factors only where a row's maximum moved (a factor of 1 changes nothing, and in a
		// long row the maximum settles early): the warp's rows decide together, so the branch stays uniform.
		if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
#pragma unroll
			for (int e = 0; e < ND; e++) o[e] *= alpha[(e >> 1) & 1]; // 0 on the first tile, where O is 0
		if (t * TILE < kstart || t * TILE + TILE > key_end) zero_v(t, s);
		add_pv(pp, s);
		advance();
	}
	for (; t < tiles; t++) skip();
	if (c == 0) ph_turn_wait(1); // consumer 1's last pass

#pragma unroll
	for (int i = 0; i < 2; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
		if (!valid[i]) continue;
		if constexpr (PREFIX) { // the split-k partial of row (virtual, KV head, partition, row)
			const long long at = (((long long)vs * p.num_kv_heads + kvh) * p.num_partitions + part) * rows +
			                     rblk * 128 + 64 * c + 16 * warp + gq + 8 * i;
			if (cq == 0) p.part_m[at] = m[i], p.part_l[at] = l[i];
			float2 *dst = reinterpret_cast<float2 *>(p.part_acc + at * D);
#pragma unroll
			for (int j = 0; j < D / 8; j++)
				dst[(8 * j + 2 * cq) >> 1] = make_float2(o[4 * j + 2 * i] * vscale, o[4 * j + 2 * i + 1] * vscale);
		} else {
			const float inv = vscale / l[i];
			uint32_t *dst = reinterpret_cast<uint32_t *>(reinterpret_cast<T *>(p.out) + off[i]);
#pragma unroll
			for (int j = 0; j < D / 8; j++) dst[(8 * j + 2 * cq) >> 1] = pack2<T>(o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
		}
	}
}

#define PREFILL_SM90(T, TN, D)                                                                                \
	extern "C" __device__ int PrefillAttentionSM90_##TN##_d##D##_smem = ph_smem_bytes(D);                 \
	extern "C" __device__ int SharedPrefixSM90_##TN##_d##D##_smem = ph_smem_bytes(D);                     \
	extern "C" __device__ int PrefillAttentionSM90_##TN##_e4m3_d##D##_smem = ph_smem_bytes(D, true);      \
	extern "C" __device__ int SharedPrefixSM90_##TN##_e4m3_d##D##_smem = ph_smem_bytes(D, true);          \
	extern "C" __global__ void __launch_bounds__(PH_THREADS, 1) PrefillAttentionSM90_##TN##_d##D(const __grid_constant__ PhArgs<PrefillParams> a) { \
		prefill_sm90<T, D, false, false>(a);                                                              \
	} \
	extern "C" __global__ void __launch_bounds__(PH_THREADS, 1) SharedPrefixSM90_##TN##_d##D(const __grid_constant__ PhArgs<PhPrefixParams> a) { \
		prefill_sm90<T, D, true, false>(a);                                                               \
	} \
	extern "C" __global__ void __launch_bounds__(PH_THREADS, 1) PrefillAttentionSM90_##TN##_e4m3_d##D(const __grid_constant__ PhArgs<PrefillParams> a) { \
		prefill_sm90<T, D, false, true>(a);                                                               \
	} \
	extern "C" __global__ void __launch_bounds__(PH_THREADS, 1) SharedPrefixSM90_##TN##_e4m3_d##D(const __grid_constant__ PhArgs<PhPrefixParams> a) { \
		prefill_sm90<T, D, true, true>(a);                                                                \
	}
PREFILL_SM90(__nv_bfloat16, bf16, 64)
PREFILL_SM90(__nv_bfloat16, bf16, 128)
PREFILL_SM90(__half, f16, 64)
PREFILL_SM90(__half, f16, 128)
PREFILL_SM90(__nv_bfloat16, bf16, 256)
PREFILL_SM90(__half, f16, 256)
