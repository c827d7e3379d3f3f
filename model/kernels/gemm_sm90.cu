// Skinny GEMM for decode steps of 9-64 token rows on the H100 (sm_90, PTX ISA 8.0): y[m][row] (+)=
// Σ_k x[m][k] · w[row][k], w [n][k] and x [m][k] of T, y float. Bound by reading w once. T is bf16, f16,
// or E4M3 (FP8 weights: e4m3 codes of w and of the quantized input rows, y[m][row] = Σ · sx[m] · sw[row]
// + bias[row]; see "FP8" below).
//
// Why this design (docs/bench/gemm-h100.md): copies through cp.async (LDGSTS) top out at 2.2-2.4 TB/s on
// the H100, weights loaded straight into registers leave the mma in the loads' warps, unhidden, and 1-D
// bulk copies of 128-byte row chunks reach only 0.5 TB/s (one request per row). Here the tensor-memory
// accelerator (cp.async.bulk.tensor, Hopper) streams 2-D tiles, one request a tile, and the warps that
// multiply never load from global memory:
//   - one producer thread walks the block's k range in chunks of 64 elements; for each it waits for the
//     ring slot to be free (empty barrier), announces the slot's bytes (expect_tx) and queues one tile copy
//     of the weights (64·WG rows × 64) and one of the activations (16·NT tokens × 64; rows past n or m are
//     zero-filled by the copy engine);
//   - WG consumer warpgroups (4 warps each) own 64 weight rows each; for each chunk they wait for its
//     bytes (full barrier), multiply with wgmma (m64nNk16, N = 16·NT tokens: weights as A and activations
//     as B, both read by the tensor cores straight from the swizzled tiles through matrix descriptors,
//     accumulators in registers), wait for the multiplies and release the slot. (Keeping one chunk's
//     multiplies in flight, two tile copies a slot, a tensor-map prefetch and an early dependent launch
//     were slower together: docs/bench/gemm-h100.md.)
// The first slots' weight copies go out before pdl_wait (weights never change), their activation copies
// after it. With the SwiGLU epilogue (flags 16, whole k) the weight map is 4-D (k, 8 rows, gate or up half,
// group of 8 gate rows: gemm_cuda.go), so that a block's tile, one box, interleaves 8 gate rows with their
// 8 up rows: a thread's fragment then holds gate (e = 0, 1) and up (e = 2, 3) of the same rows and tokens,
// and the block writes silu(gate)·up in T for the down product from its registers (no float gate/up
// output, no SwiGLU kernel, no exchange between warpgroups). With the argmax epilogue (flags 32, whole k:
// the LM head of a greedy step) the block leaves, for each token, the (largest logit, its row) of its rows
// instead of the logits, which ArgmaxPartials (argmax.cu) finishes: the float logits are never written.
//
// Split k over a thread-block cluster of ks blocks (gridDim.y = ks, cluster (1, ks, 1)): each block leaves
// its partial tile in its shared memory (a thread's fragments as float4s, in thread order), and block r
// sums fragments f ≡ r (mod ks) over the cluster's blocks through distributed shared memory in the fixed
// order 0 … ks-1 (deterministic) and writes them.
//
// FP8 (T = E4M3): a ring slot's rows are the same 128 bytes, 128 codes, and each wgmma (k32) takes the
// same 32 bytes of a row as the 16-bit k16 one, so the ring, the tensor maps' boxes in bytes and the
// descriptors do not change. The tensor cores add an e4m3 wgmma's products with a limited alignment
// precision (about 13 fraction bits of the largest, as cuBLASLt's e4m3 GEMM and fp8_sm90.cu's mma), so
// each chunk's four wgmma accumulate into a fresh register tile that is then added in float32 to the
// thread's sums (DeepSeek-V3's promotion, every 128 columns). The scales and the bias apply once, where
// the sums leave (k split included); the FP8 product neither accumulates nor runs an epilogue of SwiGLU
// or argmax (its input rows are quantized by the op before it, which needs whole rows).
//
// This file needs PTX ISA 8.0 (cp.async.bulk.tensor, mbarrier expect_tx), newer than nvcc 11.8 emits:
// build.sh compiles it to PTX for compute_90 and raises the PTX's version; the driver compiles it at
// load (PTX target sm_90a: wgmma). The tensor maps are encoded on the host (cuda.Device.EncodeTiled).
#include "common.cuh"
#include "sm90.cuh"

struct GemmParams {
	TmaDesc wmap;   // w [n][k] of T, box 128 bytes × 64·WG, 128-byte swizzle (SwiGLU: 4-D, box 64 × 8 × 2 × 4·WG)
	TmaDesc xmap;   // x [m][k] of T, box 128 bytes × 16·NT, 128-byte swizzle
	float *y;       // [m][n]; argmax: the partial maxima [m][gridDim.x]
	void *act;      // SwiGLU: [m][n/2] of T, written instead of y; argmax: their rows, int [m][gridDim.x]
	int m, n, k;
	int accumulate; // 1: y += x · wᵀ (the residual stream), 0: y = x · wᵀ
	int stages;     // ring slots (shared memory: 1024 + stages · ((64·WG + 16·NT) · 128 + 16))
	int flags;      // 8: weights' L2 policy evict_first; 16: SwiGLU epilogue; 32: argmax epilogue
	                // (k whole, not accumulating); diagnostics (wrong results):
	                // 1 no activation copies, 2 no mma, 4 no k-split sum, 1024 no output written
	const float *sx;   // E4M3: [m] the input rows' scales
	const float *sw;   // E4M3: [≥ n] the weight rows' scales
	const float *bias; // E4M3: [n], or null
};

// E4M3 is the element type of FP8 operands: one e4m3 code.
struct E4M3 {
	unsigned char code;
};

constexpr int GB_ROW = 128;  // bytes of a ring slot's tile row (the 128-byte swizzle's)
constexpr int GB_CHUNK = 64; // k elements a ring slot of 16-bit operands (one 128-byte row); E4M3: 128
constexpr int GB_MAX_CLUSTER = 8;

// tma_load2d queues the copy of the tile at (column c, row r) of the tensor map at desc (a kernel
// parameter's generic address) into shared dst, completing on bar.
__device__ __forceinline__ void tma_load2d(uint32_t dst, const TmaDesc *desc, int c, int r, uint32_t bar) {
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
	             "l"(reinterpret_cast<uint64_t>(desc)), "r"(c), "r"(r), "r"(bar)
	             : "memory");
}
__device__ __forceinline__ void tma_load2d_hint(uint32_t dst, const TmaDesc *desc, int c, int r, uint32_t bar,
                                                uint64_t policy) {
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
	             "l"(reinterpret_cast<uint64_t>(desc)), "r"(c), "r"(r), "r"(bar), "l"(policy)
	             : "memory");
}
// tma_load4d queues the copy of the box at (c, 0, 0, g) of a 4-D tensor map (the SwiGLU weights), with
// the L2 cache policy when hint is set.
__device__ __forceinline__ void tma_load4d(uint32_t dst, const TmaDesc *desc, int c, int g, uint32_t bar,
                                                uint64_t policy, bool hint) {
	if (hint)
		asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %3, %4}], [%5], %6;" ::"r"(dst),
		             "l"(reinterpret_cast<uint64_t>(desc)), "r"(c), "r"(0), "r"(g), "r"(bar), "l"(policy)
		             : "memory");
	else
		asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %3, %4}], [%5];" ::"r"(dst),
		             "l"(reinterpret_cast<uint64_t>(desc)), "r"(c), "r"(0), "r"(g), "r"(bar)
		             : "memory");
}
// gmma_desc is the matrix descriptor of a K-major tile of 128-byte rows in the 128-byte swizzle starting at
// shared address addr (the tile on a 1024-byte boundary, addr past it by the k offset): start address,
// leading byte offset 16 (unused by this layout), stride 1024 bytes between groups of 8 rows, swizzle
// mode 1 (128 bytes).
__device__ __forceinline__ uint64_t gmma_desc(uint32_t addr) {
	return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

// Wgmma<T, NT>::run is d += A·B for a 64-row A (descriptor a) and a 16·NT-column B (descriptor b), k 16,
// fp32 accumulators in the m64nN layout: d[4i + e] holds row 16·warp + lane/4 (+ 8 for e ≥ 2) and column
// 8i + 2·(lane % 4) + (e & 1), warp of the warpgroup.
template <typename T, int NT> struct Wgmma;
// WGMMA(T, TN) specialises Wgmma for dtype T, named TN in PTX (bf16, f16).
#define WGMMA(T, TN) \
template <> struct Wgmma<T, 1> { \
	static __device__ __forceinline__ void run(float (&d)[8], uint64_t a, uint64_t b) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n16k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
		             : "l"(a), "l"(b)); \
	} \
}; \
template <> struct Wgmma<T, 2> { \
	static __device__ __forceinline__ void run(float (&d)[16], uint64_t a, uint64_t b) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n32k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
		             : "l"(a), "l"(b)); \
	} \
}; \
template <> struct Wgmma<T, 3> { \
	static __device__ __forceinline__ void run(float (&d)[24], uint64_t a, uint64_t b) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n48k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, %24, %25, p, 1, 1, 0, 0;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]) \
		             : "l"(a), "l"(b)); \
	} \
}; \
template <> struct Wgmma<T, 4> { \
	static __device__ __forceinline__ void run(float (&d)[32], uint64_t a, uint64_t b) { \
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
		             "wgmma.mma_async.sync.aligned.m64n64k16.f32." TN "." TN " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
		             : "l"(a), "l"(b)); \
	} \
};
WGMMA(__nv_bfloat16, "bf16")
WGMMA(__half, "f16")

// Wgmma<E4M3, NT>::run is d += A·B of e4m3 operands, k 32 (the 32 bytes a 16-bit k16 step reads), in the
// same layout. Both operands are K-major, the only form e4m3 has (no transpose immediates).
template <> struct Wgmma<E4M3, 1> {
	static __device__ __forceinline__ void run(float (&d)[8], uint64_t a, uint64_t b) {
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t"
		             "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
		             : "l"(a), "l"(b));
	}
};
template <> struct Wgmma<E4M3, 2> {
	static __device__ __forceinline__ void run(float (&d)[16], uint64_t a, uint64_t b) {
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t"
		             "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n}"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
		             : "l"(a), "l"(b));
	}
};
template <> struct Wgmma<E4M3, 3> {
	static __device__ __forceinline__ void run(float (&d)[24], uint64_t a, uint64_t b) {
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t"
		             "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, %24, %25, p, 1, 1;\n}"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
		             : "l"(a), "l"(b));
	}
};
template <> struct Wgmma<E4M3, 4> {
	static __device__ __forceinline__ void run(float (&d)[32], uint64_t a, uint64_t b) {
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t"
		             "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
		             : "l"(a), "l"(b));
	}
};

__device__ __forceinline__ unsigned gb_cluster_rank() {
	unsigned r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}
__device__ __forceinline__ unsigned gb_cluster_size() {
	unsigned n;
	asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
	return n;
}
__device__ __forceinline__ void gb_cluster_sync() {
	asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
__device__ __forceinline__ float4 gb_cluster_load4(uint32_t addr, unsigned rank) {
	float4 v;
	uint32_t remote;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
	asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote));
	return v;
}

// Block (blockIdx.x, blockIdx.y): weight rows [64·WG·blockIdx.x, +64·WG) (SwiGLU: gate rows [32·WG·blockIdx.x,
// +32·WG) and their up rows, interleaved by 8), k chunks of split blockIdx.y.
// Warps 0 … 4·WG-1 multiply (warpgroups), warp 4·WG copies; blockDim.x = 128·WG + 32.
template <typename T, int NT> __device__ __forceinline__ void gemm_bulk(const GemmParams &p) {
	extern __shared__ __align__(1024) unsigned char gb_smem[];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int cw = (blockDim.x >> 5) - 1; // consumer warps: 4 a warpgroup
	const int rows = 16 * cw, row0 = rows * blockIdx.x;
	const int stages = p.stages;
	const unsigned ks = gb_cluster_size(), rank = gb_cluster_rank();
	constexpr bool F8 = sizeof(T) == 1;
	constexpr int CHUNK = GB_ROW / sizeof(T); // k elements a slot
	// E4M3: k need not fill the last chunk (the copy engine zero-fills past the tensors' edges).
	const int chunks = F8 ? (p.k + CHUNK - 1) / CHUNK : p.k / CHUNK;
	const int c0 = (int)(rank * chunks / ks), steps = (int)((rank + 1) * chunks / ks) - c0;

	// A slot: the weight tile (rows × 128 bytes), then the activation tile (16·NT × 128 bytes); the swizzle
	// repeats every 1024 bytes, and every tile starts on such a boundary.
	const uint32_t smem = ((uint32_t)__cvta_generic_to_shared(gb_smem) + 1023) & ~1023u;
	const uint32_t w_bytes = rows * GB_ROW, slot_bytes = w_bytes + 16 * NT * GB_ROW;
	const uint32_t bars = smem + stages * slot_bytes; // full[stages], then empty[stages]
	auto full = [&](int s) { return bars + 8 * s; };
	auto empty = [&](int s) { return bars + 8 * (stages + s); };
	if (threadIdx.x == 0) {
		for (int s = 0; s < stages; s++) {
			mbar_init(full(s), 1);
			mbar_init(empty(s), cw);
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();

	float acc[8 * NT]; // a consumer thread's share of its warpgroup's 64 × 16·NT tile (see Wgmma)
#pragma unroll
	for (int e = 0; e < 8 * NT; e++) acc[e] = 0.f;
	if (warp == cw) { // the producer: one thread
		if (lane == 0) {
			const bool no_x = p.flags & 1;
			const unsigned bytes = slot_bytes - (no_x ? 16 * NT * GB_ROW : 0);
			uint64_t policy = 0;
			if (p.flags & 8) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
			// SwiGLU: the block's tile is the groups [cw·blockIdx.x, +cw) of 8 gate rows and their 8 up rows.
			const bool swiglu = p.flags & 16, hint = p.flags & 8;
			auto weights = [&](int i) {
				const int s = i % stages;
				const uint32_t dst = smem + s * slot_bytes;
				mbar_expect(full(s), bytes);
				if (swiglu)
					tma_load4d(dst, &p.wmap, (c0 + i) * CHUNK, cw * blockIdx.x, full(s), policy, hint);
				else if (hint)
					tma_load2d_hint(dst, &p.wmap, (c0 + i) * CHUNK, row0, full(s), policy);
				else
					tma_load2d(dst, &p.wmap, (c0 + i) * CHUNK, row0, full(s));
			};
			auto acts = [&](int i) {
				if (!no_x) tma_load2d(smem + (i % stages) * slot_bytes + w_bytes, &p.xmap, (c0 + i) * CHUNK, 0, full(i % stages));
			};
			const int first = min(stages, steps);
			for (int i = 0; i < first; i++) weights(i);
			pdl_wait();
			for (int i = 0; i < first; i++) acts(i);
			for (int i = first; i < steps; i++) {
				mbar_wait(empty(i % stages), ((i / stages) - 1) & 1);
				weights(i);
				acts(i);
			}
		}
		__syncwarp();
		pdl_wait(); // the whole warp, which writes output below
	} else { // a consumer warpgroup: tile rows [64·(warp / 4), +64)
		const uint32_t a_tile = 64 * (warp >> 2) * 128;
		for (int i = 0; i < steps; i++) {
			const int s = i % stages;
			mbar_wait(full(s), (i / stages) & 1);
			const uint32_t slot = smem + s * slot_bytes;
			if (!(p.flags & 2)) {
				if constexpr (F8) { // the chunk's sums in a fresh tile, then promoted (see the head)
					float t[8 * NT];
#pragma unroll
					for (int e = 0; e < 8 * NT; e++) t[e] = 0.f;
					wgmma_fence();
#pragma unroll
					for (int kk = 0; kk < GB_ROW / 32; kk++)
						Wgmma<T, NT>::run(t, gmma_desc(slot + a_tile + 32 * kk), gmma_desc(slot + w_bytes + 32 * kk));
					wgmma_commit();
					wgmma_wait0();
#pragma unroll
					for (int e = 0; e < 8 * NT; e++) acc[e] += t[e];
				} else {
					wgmma_fence();
#pragma unroll
					for (int kk = 0; kk < GB_CHUNK / 16; kk++)
						Wgmma<T, NT>::run(acc, gmma_desc(slot + a_tile + 32 * kk), gmma_desc(slot + w_bytes + 32 * kk));
					wgmma_commit();
					wgmma_wait0();
				}
			}
			__syncwarp();
			if (lane == 0) mbar_arrive(empty(s));
		}
		pdl_wait(); // (returned long ago in the producer) before writing what an earlier kernel may read
	}

	// Fragment f (0 … 2·NT-1) of a consumer thread: acc[4f … 4f+3], rows row0 + 16·warp + lane/4 (e = 0, 1)
	// and + 8 (e = 2, 3), tokens 8f + 2·(lane % 4) + (e & 1).
	constexpr int FRAGS = 2 * NT;
	// out is the output of the sum v of token tok and row row (in range): E4M3's scaled, plus its bias.
	auto out = [&](int tok, int row, float v) {
		if constexpr (F8) {
			v *= p.sx[tok] * p.sw[row];
			if (p.bias != nullptr) v += p.bias[row];
		}
		return v;
	};
	auto put = [&](int f, int e, float v) {
		const int row = row0 + 16 * warp + (lane >> 2) + (e >= 2 ? 8 : 0);
		const int tok = 8 * f + 2 * (lane & 3) + (e & 1);
		if (tok < p.m && row < p.n && !(p.flags & 1024)) {
			float *dst = p.y + (long long)tok * p.n + row;
			v = out(tok, row, v);
			*dst = p.accumulate ? *dst + v : v;
		}
	};
	// The output leaves through shared memory (the ring, done once every consumer has waited for its last
	// slot): the consumers put their fragments into a tile of [16·NT tokens][rows], and then every thread
	// writes whole 16-byte pieces of each token's contiguous run of rows. Stored straight from the
	// fragments, a warp's store would touch 4 tokens' rows in 16- or 32-byte pieces: partial sectors, and
	// the block's last act (docs/bench/gemm-h100.md: a large share of the 8B gate/up product's epilogue).
	auto flush = [&](auto *out, const auto *tile, int pitch, int width, int r0, int n) {
		using O = typename std::remove_pointer<decltype(out)>::type;
		constexpr int V = 16 / sizeof(O); // elements a piece
		const int per = width / V;
		const bool whole = n % V == 0;
		for (int i = threadIdx.x; i < p.m * per; i += blockDim.x) {
			const int tok = i / per, c = (i % per) * V, row = r0 + c;
			O *dst = out + (long long)tok * n + row;
			const O *src = tile + tok * pitch + c;
			if constexpr (std::is_same<O, float>::value) { // y, maybe accumulating
				if (whole && row + V <= n) {
					float4 v = *reinterpret_cast<const float4 *>(src);
					if (p.accumulate) {
						const float4 o = *reinterpret_cast<const float4 *>(dst);
						v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
					}
					*reinterpret_cast<float4 *>(dst) = v;
				} else {
					for (int q = 0; q < V && row + q < n; q++) dst[q] = p.accumulate ? dst[q] + src[q] : src[q];
				}
			} else if (whole && row + V <= n) { // act, written
				*reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
			} else {
				for (int q = 0; q < V && row + q < n; q++) dst[q] = src[q];
			}
		}
	};
	if constexpr (!F8) if (p.flags & 16) { // SwiGLU (k whole): warp w's rows are gate rows 8·w + lane/4 (e < 2) and their up rows
		__syncthreads(); // every warpgroup is done with the ring: it carries the act tile [16·NT][pitch] now
		const int half = rows / 2, pitch = half + 8;
		T *tile = reinterpret_cast<T *>(gb_smem + (smem - (uint32_t)__cvta_generic_to_shared(gb_smem)));
		if (warp < cw) {
#pragma unroll
			for (int f = 0; f < FRAGS; f++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const int tok = 8 * f + 2 * (lane & 3) + e;
					tile[tok * pitch + 8 * warp + (lane >> 2)] = Num<T>::store(silu_mul<T>(acc[4 * f + e], acc[4 * f + 2 + e]));
				}
		}
		__syncthreads();
		if (!(p.flags & 1024)) flush(reinterpret_cast<T *>(p.act), tile, pitch, half, half * blockIdx.x, p.n / 2);
		return;
	}
	if (ks == 1 || (p.flags & 4)) {
		__syncthreads(); // the ring is done: it carries the output tile [16·NT][pitch] of floats now
		const int pitch = rows + 4;
		float *tile = reinterpret_cast<float *>(gb_smem + (smem - (uint32_t)__cvta_generic_to_shared(gb_smem)));
		if (warp < cw) {
#pragma unroll
			for (int e = 0; e < 8 * NT; e++) {
				const int r = 16 * warp + (lane >> 2) + ((e & 2) ? 8 : 0), tok = 8 * (e / 4) + 2 * (lane & 3) + (e & 1);
				if constexpr (F8) // scales read in range: the tile's rows and tokens past the product's are never written out
					tile[tok * pitch + r] = out(min(tok, p.m - 1), min(row0 + r, p.n - 1), acc[e]);
				else
					tile[tok * pitch + r] = acc[e];
			}
		}
		__syncthreads();
		if constexpr (!F8) if (p.flags & 32) { // argmax: a warp a token scans the block's rows (ascending within a lane)
			for (int tok = warp; tok < p.m; tok += cw + 1) {
				float v = -INFINITY;
				int i = 0x7fffffff;
				bool bad = false; // a NaN: the partial is NaN then (argmax.cu's ArgmaxPartials gives −1)
				for (int r = lane; r < rows && row0 + r < p.n; r += 32) { // −∞ and NaN never win (argmax.cu)
					const float x = tile[tok * pitch + r];
					bad |= x != x;
					if (x > -INFINITY) argmax_keep(v, i, x, row0 + r);
				}
				bad = __any_sync(0xffffffffu, bad);
				for (int o = 16; o > 0; o >>= 1) {
					const float ov = __shfl_xor_sync(0xffffffffu, v, o);
					const int oi = __shfl_xor_sync(0xffffffffu, i, o);
					argmax_keep(v, i, ov, oi);
				}
				if (lane == 0 && !(p.flags & 1024)) {
					p.y[(long long)tok * gridDim.x + blockIdx.x] = bad ? NAN : v;
					reinterpret_cast<int *>(p.act)[(long long)tok * gridDim.x + blockIdx.x] = i;
				}
			}
			return;
		}
		if (!(p.flags & 1024)) flush(p.y, static_cast<const float *>(tile), pitch, rows, row0, p.n);
		return;
	}
	// The ring is done (every copy landed before its slot was consumed): it holds the partial tiles now,
	// [thread][FRAGS float4s + 1] (the padding float4 spreads a quarter-warp's accesses over all banks).
	__syncthreads();
	constexpr int STRIDE = 4 * (FRAGS + 1);
	float *part = reinterpret_cast<float *>(gb_smem + (smem - (uint32_t)__cvta_generic_to_shared(gb_smem))) + threadIdx.x * STRIDE;
	if (warp < cw) {
#pragma unroll
		for (int f = 0; f < FRAGS; f++)
			*reinterpret_cast<float4 *>(part + 4 * f) = make_float4(acc[4 * f], acc[4 * f + 1], acc[4 * f + 2], acc[4 * f + 3]);
	}
	gb_cluster_sync();
	if (warp < cw) {
		const uint32_t base = (uint32_t)__cvta_generic_to_shared(part);
		for (int f = rank; f < FRAGS; f += ks) {
			float4 v[GB_MAX_CLUSTER];
#pragma unroll
			for (int r = 0; r < GB_MAX_CLUSTER; r++)
				if (r < (int)ks) v[r] = gb_cluster_load4(base + 16 * f, r);
			float4 sum = v[0];
#pragma unroll
			for (int r = 1; r < GB_MAX_CLUSTER; r++)
				if (r < (int)ks) sum.x += v[r].x, sum.y += v[r].y, sum.z += v[r].z, sum.w += v[r].w;
			put(f, 0, sum.x);
			put(f, 1, sum.y);
			put(f, 2, sum.z);
			put(f, 3, sum.w);
		}
	}
	gb_cluster_sync(); // no block leaves while another still reads its shared memory
}

// Entry points GemmBulk_<dtype>_nt<NT> (dtype bf16, f16 or e4m3) for up to 16, 32, 48 and 64 token rows; blocks of 1-4 warpgroups
// and the producer warp.
#define GEMM_BULK(T, TN, NT)                                                                                  \
	extern "C" __global__ void __launch_bounds__(544, 1) GemmBulk_##TN##_nt##NT(const __grid_constant__ GemmParams p) { \
		gemm_bulk<T, NT>(p);                                                                                 \
	}
#define GEMM_BULK_ALL(T, TN) GEMM_BULK(T, TN, 1) GEMM_BULK(T, TN, 2) GEMM_BULK(T, TN, 3) GEMM_BULK(T, TN, 4)
GEMM_BULK_ALL(__nv_bfloat16, bf16)
GEMM_BULK_ALL(__half, f16)
GEMM_BULK_ALL(E4M3, e4m3)
