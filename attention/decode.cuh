// Paged decode attention on the GPU: what the grouped kernel (grouped.cu) and the split-k kernel and its
// reduce (splitk.cu) share. The CPU twins are DecodeGrouped and DecodeSplitK in grouped.go / splitk.go;
// the Go launchers are in decode_cuda.go.
//
// Layouts (the CPU Cache's):
//   q, out          [batch][num_heads][head_dim]
//   k_cache/v_cache [num_blocks][block_size][num_kv_heads][head_dim]
//   block_tables    int32 [batch][max_blocks] (padded; only the first ceil(ctx/block_size) are read)
//   context_lens    int32 [batch]
//   split-k partials (m, l) float [batch][num_kv_heads][num_partitions][G] and
//                    acc    float [batch][num_kv_heads][num_partitions][G][head_dim]
// The G = num_heads/num_kv_heads query heads of KV head h are heads h*G .. h*G+G-1.
//
// One program (thread block) owns one (sequence, KV head[, partition]) and serves every query head of the
// group from one read of each K/V row: that is the whole point (a (sequence, query head) grid reads the
// cache G times). It walks its tokens in tiles of TILE tokens; a tile's K and V rows go to shared memory
// with 16-byte cp.async copies, STAGES tiles deep, so the next tiles are in flight while the current one
// is computed; a tile's block ids are read once (by a few threads, one tile ahead) into shared memory.
// Each warp owns 16 (mma) or 8 (FMA) tokens of every tile and keeps its own online-softmax state (m, l,
// acc) in fp32 registers; the warps' states are merged through shared memory at the end (flash-decoding's
// split inside the block). Scores are kept in log2 units (scale·log2(e) folded in) so that exp is exp2.
//
// Two compute paths:
//   mma (bf16/fp16): Q of the group is an MT·16 × D A-operand in registers (heads beyond G are zero);
//     scores S = Q·Kᵀ and acc += P·V are mma.sync m16n8k16 with fp32 accumulators, K/V fragments read
//     with ldmatrix from an XOR-swizzled tile (conflict-free). Warps = 4 token slices × MT head tiles.
//     Groups of up to 8 heads take the narrow tile (MT = 0, mma_tile_n8): the same
//     product transposed, Sᵀ = K·Qᵀ and accᵀ += Vᵀ·Pᵀ with the heads as the mma's n (8), half the mmas
//     and accumulators.
//   FMA (fp32, and any dtype for comparison): each warp's lanes split head_dim; a block serves GC heads
//     (the grid's y covers kv_heads × ceil(G/GC)); plain fp32 FMAs, so fp32 stays IEEE (never TF32).
//
// Goal: the K/V bytes once at the copy bandwidth (3.03 TB/s on the H100): decode attention is memory-bound.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

// DecodeParams is the one by-value parameter of every kernel here; decode_cuda.go mirrors it field by
// field (decodeParams). Pointers first, then 4-byte fields, so the layouts agree without padding rules.
struct DecodeParams {
	void *out;                // [batch][num_heads][head_dim], dtype of the cache (grouped, reduce)
	const void *q;            // [batch][num_heads][head_dim]
	const void *k_cache;      // [num_blocks][block_size][num_kv_heads][head_dim]
	const void *v_cache;
	const int *block_tables;  // [batch][max_blocks]
	const int *context_lens;  // [batch]
	float *part_m;            // split-k: [batch][num_kv_heads][num_partitions][G], log2 units
	float *part_l;            // split-k: same shape
	float *part_acc;          // split-k: [batch][num_kv_heads][num_partitions][G][head_dim], unnormalised
	unsigned *counters;       // split-k, fused merge: arrival counters, zero between calls (see splitk_finish)
	const float *rope_qkv;    // DECODE_FLAG_ROPE: [batch][qkv_cols] float, the Q/K/V product's unrotated output
	const int *positions;     // DECODE_FLAG_ROPE: [batch] the newest token's position (its rotation angle)
	const int *slots;         // DECODE_FLAG_ROPE: [batch] its cache slot (block id · block size + offset); < 0: none
	const float *inv_freq;    // DECODE_FLAG_ROPE: [head_dim/2]
	const float *rope_bias;   // DECODE_FLAG_ROPE: [qkv_cols] the Q/K/V product's bias, added before the rotation; null: none
	float scale_log2;         // softmax scale · log2(e)
	int num_heads;
	int num_kv_heads;
	int max_blocks;           // row stride of block_tables
	int log2_block_size;      // block_size = 1 << log2_block_size
	int partition_tokens;     // split-k partition length (a multiple of the block size); 0: whole context
	int num_partitions;       // split-k partitions (grid z)
	int group;                // G = num_heads / num_kv_heads
	int flags;                // DECODE_FLAG_* (tuning switches, see below)
	int batch;                // sequences (rows of context_lens)
	int merge_chunk;          // split-k, fused merge: partitions merged by one program at the first level
	int merge_chunks;         // ceil(num_partitions / merge_chunk): chunk counters per (sequence, program row)
	float rope_scaling;       // DECODE_FLAG_ROPE: cos and sin are multiplied by it (attention_scaling)
	int qkv_cols;             // DECODE_FLAG_ROPE: row stride of rope_qkv
	int window;               // sliding window (> 0): the newest query attends to its last window positions
	float k_scale;            // FP8 KV (the E4M3Code kernels): a stored K code c reads back as float(c) · k_scale
	float v_scale;            // and a V code as float(c) · v_scale; unused by the others
};

// DECODE_FLAG_HEADS_FAST orders the grid (KV head, sequence, partition) instead of (sequence, KV head,
// partition): programs that run at the same time then read the rows of all KV heads of the same pages
// (faster on the H100, docs/bench/attention-h100.md; the Go side sets it unless CUDATuning.SequenceMajor).
#define DECODE_FLAG_HEADS_FAST 1
// DECODE_FLAG_FUSED_MERGE has the split-k programs merge their partitions themselves (splitk_finish):
// the last program of a chunk of partitions to finish merges the chunk, the last chunk merger writes the
// output; no reduce kernel.
#define DECODE_FLAG_FUSED_MERGE 4
// DECODE_FLAG_EVICT_FIRST gives the K/V copies the L2 policy evict_first: the stream is read once, so
// its lines are the first to go when L2 needs room, and what other kernels left in L2 (dirty lines
// included, which would otherwise be written back during this kernel) stays there. Without it the copies
// carry evict_normal (the Go side's rule: DecodeDecision.EvictFirst, dispatch.go).
#define DECODE_FLAG_EVICT_FIRST 8
// DECODE_FLAG_EARLY_PROLOGUE (set with programmatic dependent launch) has an mma program read its block
// ids and context length and queue its first tiles whose rows all precede the sequence's newest position
// before its PDL wait (decode_prologue), so that they overlap the end of the kernel before.
#define DECODE_FLAG_EARLY_PROLOGUE 128
// DECODE_FLAG_ROPE has the programs do the rotary embedding and the K/V cache write of the step's newest
// token themselves (rope_prepare), reading the Q/K/V product's float output instead of q: no RoPE kernel
// between that product and this one.
#define DECODE_FLAG_ROPE 256
#ifdef DECODE_DIAG
// DECODE_FLAG_DIAG_* cut the mma programs short, for benchmarks' diagnostics only (the output
// is wrong; the time is the step's without that part): return right after the PDL wait, after the tile
// loop (no partial, no merge), or after storing the partial (no merge).
#define DECODE_FLAG_DIAG_ENTRY 16
#define DECODE_FLAG_DIAG_LOOP 32
#define DECODE_FLAG_DIAG_NOMERGE 64
// They exist only in the gollmdiag build's fat binary (compiled with DECODE_DIAG; attention/diag_on.go).
#endif

#define DECODE_WARP 32
#define DECODE_STAGES 3

// Programmatic dependent launch (sm_90; CUDADecodeArgs.Dependent): a kernel launched with the attribute
// may start while the previous kernel on the stream still runs, so every decode kernel first waits for
// it (griddepcontrol.wait: a no-op when launched without the attribute), then lets the next kernel
// launch early (its own wait keeps it correct). Compiled to nothing below sm_90, where the Go side never
// asks for it.
__device__ __forceinline__ void decode_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// window_lo is the first key the newest query of a context of ctx tokens attends to.
__device__ __forceinline__ int window_lo(const DecodeParams &p, int ctx) { return p.window > 0 ? max(0, ctx - p.window) : 0; }

// window_base is the first token of window_lo's page: where the pages a decode reads begin.
__device__ __forceinline__ int window_base(const DecodeParams &p, int ctx) {
	return (window_lo(p, ctx) >> p.log2_block_size) << p.log2_block_size;
}

// ---------------------------------------------------------------------------------------------------
// Element types.

template <typename T> struct Elem;
template <> struct Elem<__nv_bfloat16> {
	static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
	static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
	static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
		__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
		return *reinterpret_cast<uint32_t *>(&v);
	}
};
template <> struct Elem<__half> {
	static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
	static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
	static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
		__half2 v = __floats2half2_rn(lo, hi);
		return *reinterpret_cast<uint32_t *>(&v);
	}
};
template <> struct Elem<float> {
	static __device__ __forceinline__ float to_float(float x) { return x; }
	static __device__ __forceinline__ float from_float(float x) { return x; }
};

// E4M3Code is the KV element type of an FP8 KV cache: an OCP e4m3 code, one byte (model.KVCacheFP8). The
// FMA kernels take it as their KV template parameter (decode_fma); the mma and persistent kernels do
// not (the dispatcher runs FP8 pages on the FMA path).
typedef uint8_t E4M3Code;

// E4M3Load converts a lane's V consecutive e4m3 codes (V bytes, V-byte aligned) to float, exactly:
// every e4m3 value is an f16 value (cvt.rn.f16x2.e4m3x2 on compute capability 8.9 and newer, which the
// backend requires for an FP8 KV cache). NaN codes stay NaN.
template <int V> struct E4M3Load {
	static __device__ __forceinline__ float2 pair(unsigned short c) {
		const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)c, __NV_E4M3));
		return __half22float2(h);
	}
	static __device__ __forceinline__ void load(const uint8_t *p, float (&x)[V]) {
		static_assert(V == 2 || V == 4 || V == 8, "2, 4 or 8 codes a lane");
		unsigned short c[V / 2];
		if constexpr (V == 2) {
			c[0] = *reinterpret_cast<const unsigned short *>(p);
		} else if constexpr (V == 4) {
			const uint32_t w = *reinterpret_cast<const uint32_t *>(p);
			c[0] = (unsigned short)w, c[1] = (unsigned short)(w >> 16);
		} else {
			const uint2 w = *reinterpret_cast<const uint2 *>(p);
			c[0] = (unsigned short)w.x, c[1] = (unsigned short)(w.x >> 16);
			c[2] = (unsigned short)w.y, c[3] = (unsigned short)(w.y >> 16);
		}
#pragma unroll
		for (int i = 0; i < V / 2; i++) {
			const float2 f = pair(c[i]);
			x[2 * i] = f.x, x[2 * i + 1] = f.y;
		}
	}
};

// ---------------------------------------------------------------------------------------------------
// PTX wrappers.

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
	return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp_async16 copies 16 bytes global→shared, bypassing L1 (.cg: read once into shared memory; the
// persistent kernel's queries); when valid is false it writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// cp_async16_hint is cp_async16 with an L2 cache policy (createpolicy).
__device__ __forceinline__ void cp_async16_hint(uint32_t dst, const void *src, bool valid, uint64_t policy) {
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(n),
	             "l"(policy));
}

// copy_policy is the L2 cache policy of the K/V copies (createpolicy): evict_first with
// DECODE_FLAG_EVICT_FIRST, else evict_normal. Every copy carries one, so that the tile loader is one
// path (a switch among copy kinds per 16-byte copy, or per tile, made the kernels' code larger and the
// model's decode step slower on the H100).
__device__ __forceinline__ uint64_t copy_policy(int flags) {
	uint64_t policy;
	if (flags & DECODE_FLAG_EVICT_FIRST)
		asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
	else
		asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
	return policy;
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
	             : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
	             : "r"(addr));
}

// movmatrix_trans transposes an 8×8 matrix of 16-bit elements held across the warp in the mma fragment
// layout (lane l: row l/4, columns 2·(l%4) and 2·(l%4)+1, the lower column in the low half).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
	uint32_t d;
	asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(x));
	return d;
}

// mma16816 is D = A·B + D for one m16n8k16 tile with fp32 accumulators.
template <typename T> __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------------------------------------------
// The tile pipeline: block ids and K/V rows of TILE tokens into shared memory, STAGES deep.
//
// A tile's rows are stored [TILE][ROW_CHUNKS] 16-byte chunks with chunk c of row r at c ^ (r & 7): the 8
// rows one ldmatrix reads then hit 8 different bank groups.

template <typename T, int D, int TILE, int THREADS> struct TileLoader {
	static constexpr int ROW_CHUNKS = D * (int)sizeof(T) / 16;
	static constexpr int TILE_CHUNKS = TILE * ROW_CHUNKS;
	static_assert(TILE_CHUNKS % THREADS == 0, "threads must divide a tile's chunks");
	static constexpr int PER_THREAD = TILE_CHUNKS / THREADS;
	static constexpr int TILE_BYTES = TILE_CHUNKS * 16;          // K or V of one tile
	static constexpr int STAGE_BYTES = 2 * TILE_BYTES;           // K and V
	static constexpr int MAX_PAGES = TILE / 8 + 1;               // pages a tile can touch (block size >= 8)
	static_assert(MAX_PAGES <= THREADS, "one thread per block id");

	static __device__ __forceinline__ int swizzle(int row, int chunk) {
		return ROW_CHUNKS >= 8 ? (chunk ^ (row & 7)) : chunk;
	}

	// load_ids reads, by thread tid < MAX_PAGES, the block id of the tile at token t0 that this thread
	// is responsible for (0 past the sequence's last page).
	static __device__ __forceinline__ int load_id(const int *table, int t0, int end, int lbs, int tid) {
		int page = (t0 >> lbs) + tid;
		int last = (end - 1) >> lbs;
		return (tid < MAX_PAGES && t0 < end && page <= last) ? __ldg(table + page) : 0;
	}

	// load_id_early is load_id before the context length is known: it reads any id of the padded table
	// row (page < max_blocks), so that the first tiles' ids are fetched in parallel with the context
	// length instead of after it. Ids past the sequence are never used for a copy (issue zero-fills
	// rows past end without reading them).
	static __device__ __forceinline__ int load_id_early(const int *table, int t0, int max_blocks, int lbs, int tid) {
		int page = (t0 >> lbs) + tid;
		return (tid < MAX_PAGES && page < max_blocks) ? __ldg(table + page) : 0;
	}

	// issue queues the cp.async copies of the tile at token t0 (rows past end are zero-filled). Thread
	// tid copies chunk tid % ROW_CHUNKS of rows tid / ROW_CHUNKS + i·THREADS/ROW_CHUNKS; a copy's address
	// costs one 32×32→64-bit multiply-add (slot · row bytes): with one program an SM (a batch-1 split,
	// the model's batch-1 step) no other warp hides this code's latency, so the instructions per copy
	// bound the program's streaming rate. A row past end reads nothing (its address is the cache's slot
	// 0, never one from an id past the sequence's pages).
	static __device__ __forceinline__ void issue(uint8_t *stage, const int *ids, const T *kc, const T *vc,
	                                             int t0, int end, int lbs, long long row_stride, int kvh, int tid,
	                                             uint64_t policy) {
		const uint8_t *kb = reinterpret_cast<const uint8_t *>(kc + (long long)kvh * D);
		const uint8_t *vb = reinterpret_cast<const uint8_t *>(vc + (long long)kvh * D);
		const uint32_t row_bytes = (uint32_t)row_stride * (uint32_t)sizeof(T);
		const uint32_t ks = smem_addr(stage);
		const int page0 = t0 >> lbs;
		const int bs_mask = (1 << lbs) - 1;
#pragma unroll
		for (int i = 0; i < PER_THREAD; i++) {
			const int c = tid + i * THREADS;
			const int row = c / ROW_CHUNKS, chunk = c % ROW_CHUNKS;
			const int tok = t0 + row;
			const bool valid = tok < end;
			const uint32_t slot = valid ? ((uint32_t)ids[(tok >> lbs) - page0] << lbs) | (uint32_t)(tok & bs_mask) : 0u;
			const uint64_t off = (uint64_t)slot * row_bytes + (uint32_t)(chunk * 16);
			const uint32_t dst = ks + (row * ROW_CHUNKS + swizzle(row, chunk)) * 16;
			cp_async16_hint(dst, kb + off, valid, policy);
			cp_async16_hint(dst + TILE_BYTES, vb + off, valid, policy);
		}
	}
};

// ---------------------------------------------------------------------------------------------------
// The merge of per-warp states: warp w of head tile r left m, l (log2 units, l a full sum) and acc[D] for
// each of its ROWS rows in shared memory; the block combines them by log-sum-exp and writes either the
// normalised output (grouped) or the partition's (m, l, acc) (split-k).

template <int D, int ROWS, int SLICES> struct MergeSmem {
	float m[SLICES][ROWS];
	float l[SLICES][ROWS];
	float acc[SLICES][ROWS][D + 4]; // +4 floats: rows start in different banks
	// merge_store reads acc in float4: it and its rows start 16-byte aligned (the struct sits at the
	// 128-byte aligned start of the dynamic shared memory).
	static_assert((2 * SLICES * ROWS) % 4 == 0 && (D + 4) % 4 == 0, "acc rows 16-byte aligned");
};

// store4 writes four floats as T to o: one 8- or 16-byte store where o is aligned to it, else four.
template <typename T> __device__ __forceinline__ void store4(T *o, float a, float b, float c, float d) {
	if constexpr (sizeof(T) == 2) {
		if ((reinterpret_cast<uintptr_t>(o) & 7) == 0) {
			*reinterpret_cast<uint2 *>(o) = make_uint2(Elem<T>::pack(a, b), Elem<T>::pack(c, d));
			return;
		}
	} else if constexpr (sizeof(T) == 4) {
		if ((reinterpret_cast<uintptr_t>(o) & 15) == 0) {
			*reinterpret_cast<float4 *>(o) = make_float4(a, b, c, d);
			return;
		}
	}
	o[0] = Elem<T>::from_float(a), o[1] = Elem<T>::from_float(b), o[2] = Elem<T>::from_float(c),
	o[3] = Elem<T>::from_float(d);
}

// PartialRun is count split-k partials of one query head, at slots first, first+stride, … of (m, l,
// acc): what the reduce merges for a sequence. run_max and run_sum are the log-sum-exp merge over runs,
// thread d owning element d:
//   M = max m_p,  L = Σ l_p·2^(m_p−M),  out = Σ acc_p·2^(m_p−M) / L.
struct PartialRun {
	const float *m, *l, *acc;
	long long first, stride;
	int count;
};
__device__ __forceinline__ float run_max(const PartialRun &r, float mx) {
	for (int i = 0; i < r.count; i++) mx = fmaxf(mx, r.m[r.first + i * r.stride]);
	return mx;
}
template <int D> __device__ __forceinline__ void run_sum(const PartialRun &r, float mx, int d, float &l, float &a) {
	for (int i = 0; i < r.count; i++) {
		const long long at = r.first + i * r.stride;
		const float w = exp2f(r.m[at] - mx);
		l += r.l[at] * w;
		a += r.acc[at * D + d] * w;
	}
}

// merge_store: a thread combines four consecutive elements of one row (float4 reads of the slices'
// acc, one 16-byte store of the partial): the merge sits on the split-k call's critical path.
template <typename T, int D, int ROWS, int SLICES, int THREADS, bool SPLIT>
__device__ __forceinline__ void merge_store(const MergeSmem<D, ROWS, SLICES> &sm, const DecodeParams &p, int seq,
                                            int kvh, int head0, int heads, int part, int tid) {
	constexpr int Q = D / 4;
	for (int idx = tid; idx < heads * Q; idx += THREADS) {
		const int r = idx / Q, d4 = idx % Q;
		float mx = -INFINITY;
#pragma unroll
		for (int w = 0; w < SLICES; w++) mx = fmaxf(mx, sm.m[w][r]);
		const float mref = mx == -INFINITY ? 0.f : mx;
		float l = 0.f;
		float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
		for (int w = 0; w < SLICES; w++) {
			const float wt = exp2f(sm.m[w][r] - mref);
			const float4 x = *reinterpret_cast<const float4 *>(&sm.acc[w][r][d4 * 4]);
			l += sm.l[w][r] * wt;
			a.x += x.x * wt, a.y += x.y * wt, a.z += x.z * wt, a.w += x.w * wt;
		}
		const int head = head0 + r; // within the group
		if (SPLIT) {
			const long long i = (((long long)seq * p.num_kv_heads + kvh) * p.num_partitions + part) * p.group + head;
			reinterpret_cast<float4 *>(p.part_acc + i * D)[d4] = a;
			if (d4 == 0) {
				p.part_m[i] = mx;
				p.part_l[i] = l;
			}
		} else {
			const long long o = ((long long)seq * p.num_heads + (long long)kvh * p.group + head) * D + d4 * 4;
			const float inv = 1.f / l;
			store4<T>(reinterpret_cast<T *>(p.out) + o, a.x * inv, a.y * inv, a.z * inv, a.w * inv);
		}
	}
}

// ---------------------------------------------------------------------------------------------------
// The fused split-k merge. A context of P = ceil(ctx/partition_tokens) partitions is merged in at most two
// levels, by the programs themselves (no reduce kernel, no second launch): partitions are grouped in
// chunks of C = merge_chunk; the last program of a chunk to finish (found with an arrival counter that it
// resets to zero) merges the chunk's partials into the chunk's first slot; the last chunk merger of the
// (sequence, program row) merges the chunks and writes the normalised output. With one chunk (P <= C) the
// chunk merger writes the output directly. Two levels keep every merge short (C or P/C partials) where
// one program merging all P partials would stream them alone at the end of the call.
//
// Counters: [batch][ny] for the chunks' mergers, then [batch][ny][merge_chunks] for the chunks, where ny
// is the grid's program rows per sequence (KV heads × head chunks); they are zero before the call (the
// Go side zeroes a workspace's counters the first time it sees it) and zero after it.

// merge_partials merges count partials of slots first, first+stride, … of program row (seq, kvh, heads
// head0 … head0+heads-1) by log-sum-exp; it writes either the normalised output (final) or the merged
// state into slot first. A thread owns 8 floats of one head's acc (two float4) and reads the partials in
// batches of MERGE_BATCH, every load of a batch issued before any arithmetic on it, so that a merge of up
// to MERGE_BATCH partials costs one round trip to L2 (the merge sits on the call's critical path: the
// last program to finish runs it while every other SM is idle). Reads bypass L1 (the partials were
// written by other SMs). scratch is 128 floats of the program's dynamic shared memory, past its MergeSmem
// (not a static array: a kernel's static shared memory counts against the SM's carve-out, see patch_row).
constexpr int MERGE_BATCH = 8;
template <typename T, int D, int THREADS>
__device__ __forceinline__ void merge_partials(const DecodeParams &p, int seq, int kvh, int head0, int heads,
                                               int first, int stride, int count, bool final, float *scratch, int tid) {
	float *s_m = scratch, *s_l = scratch + 64;
	constexpr int Q = D / 8; // 8-float pieces of a head's acc
	const long long row0 = ((long long)seq * p.num_kv_heads + kvh) * p.num_partitions;
	for (int idx = tid; idx < heads * Q; idx += THREADS) {
		const int g = idx / Q, d8 = idx % Q;
		const int head = head0 + g;
		float M = -INFINITY, L = 0.f;
		float A[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
		for (int k0 = 0; k0 < count; k0 += MERGE_BATCH) {
			float m[MERGE_BATCH], l[MERGE_BATCH];
			float4 a[MERGE_BATCH][2];
#pragma unroll
			for (int b = 0; b < MERGE_BATCH; b++) {
				if (k0 + b < count) {
					const long long i = (row0 + first + (long long)(k0 + b) * stride) * p.group + head;
					const float4 *src = reinterpret_cast<const float4 *>(p.part_acc + i * D) + 2 * d8;
					m[b] = __ldcg(p.part_m + i);
					l[b] = __ldcg(p.part_l + i);
					a[b][0] = __ldcg(src);
					a[b][1] = __ldcg(src + 1);
				} else {
					m[b] = -INFINITY;
					l[b] = 0.f;
					a[b][0] = a[b][1] = make_float4(0.f, 0.f, 0.f, 0.f);
				}
			}
			float mn = M;
#pragma unroll
			for (int b = 0; b < MERGE_BATCH; b++) mn = fmaxf(mn, m[b]);
			const float mu = mn == -INFINITY ? 0.f : mn;
			const float wo = exp2f(M - mu);
			L *= wo;
#pragma unroll
			for (int e = 0; e < 8; e++) A[e] *= wo;
#pragma unroll
			for (int b = 0; b < MERGE_BATCH; b++) {
				const float w = exp2f(m[b] - mu);
				L += l[b] * w;
				A[0] += a[b][0].x * w, A[1] += a[b][0].y * w, A[2] += a[b][0].z * w, A[3] += a[b][0].w * w;
				A[4] += a[b][1].x * w, A[5] += a[b][1].y * w, A[6] += a[b][1].z * w, A[7] += a[b][1].w * w;
			}
			M = mn;
		}
		if (final) {
			T *o = reinterpret_cast<T *>(p.out) + ((long long)seq * p.num_heads + (long long)kvh * p.group + head) * D + d8 * 8;
			const float inv = 1.f / L;
			store4<T>(o, A[0] * inv, A[1] * inv, A[2] * inv, A[3] * inv);
			store4<T>(o + 4, A[4] * inv, A[5] * inv, A[6] * inv, A[7] * inv);
		} else {
			const long long i = (row0 + first) * p.group + head;
			// Only this thread reads and writes these eight floats of slot first.
			float4 *dst = reinterpret_cast<float4 *>(p.part_acc + i * D) + 2 * d8;
			dst[0] = make_float4(A[0], A[1], A[2], A[3]);
			dst[1] = make_float4(A[4], A[5], A[6], A[7]);
			if (d8 == 0) {
				s_m[g] = M;
				s_l[g] = L;
			}
		}
	}
	if (!final) {
		__syncthreads(); // every thread has read slot first's m and l
		if (tid < heads) {
			const long long i = (row0 + first) * p.group + head0 + tid;
			p.part_m[i] = s_m[tid];
			p.part_l[i] = s_l[tid];
		}
	}
}

// arrive counts this program in *counter and returns, to every thread, whether it came last of n; the
// last one resets the counter to zero. The pattern of a split-k semaphore (CUTLASS's GenericBarrier):
// the barrier orders every thread's partial writes before thread 0's count, whose release (acq_rel,
// gpu scope, cumulative over what the barrier ordered before it) publishes them; in the last program
// its acquire, and the barrier after it, order the other programs' partials before this program's
// reads. One fence by one thread instead of a fence.sc by every thread and again by every thread of the
// last program.
__device__ __forceinline__ bool arrive(unsigned *counter, int n, int tid) {
	__shared__ int s_last;
	__syncthreads();
	if (tid == 0) {
		unsigned old;
		asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
		const bool last = old == (unsigned)(n - 1);
		if (last) atomicExch(counter, 0u);
		s_last = last;
	}
	__syncthreads();
	return s_last;
}

// splitk_finish runs after a split-k program stored its partial (merge_store): with the fused merge on,
// it counts the program and, when it is the last of its chunk and then of its row, merges (above).
// y is the program's row within its sequence, of ny rows (KV heads × head chunks).
template <typename T, int D, int THREADS>
__device__ __forceinline__ void splitk_finish(const DecodeParams &p, int seq, int ctx, int kvh, int y, int ny,
                                              int head0, int heads, int part, float *scratch, int tid) {
	if (!(p.flags & DECODE_FLAG_FUSED_MERGE)) return;
	const int span = ctx - window_base(p, ctx); // the tokens the partitions cover
	const int P = (span + p.partition_tokens - 1) / p.partition_tokens;
	const int C = p.merge_chunk;
	const int chunks = (P + C - 1) / C;
	const int c = part / C, in_chunk = min(C, P - c * C);
	const long long row = (long long)seq * ny + y;
	if (in_chunk > 1) {
		unsigned *cc = p.counters + (long long)p.batch * ny + row * p.merge_chunks + c;
		if (!arrive(cc, in_chunk, tid)) return;
		if (chunks == 1) {
			merge_partials<T, D, THREADS>(p, seq, kvh, head0, heads, 0, 1, in_chunk, true, scratch, tid);
			return;
		}
		merge_partials<T, D, THREADS>(p, seq, kvh, head0, heads, c * C, 1, in_chunk, false, scratch, tid);
	} else if (chunks == 1) { // a single partition: normalise it
		// Its partial was stored by the block's other threads (merge_store maps threads to elements
		// differently from merge_partials): without this barrier a thread could read another's element
		// before it was written (a race compute-sanitizer exposed: stale or uninitialised partials).
		__threadfence();
		__syncthreads();
		merge_partials<T, D, THREADS>(p, seq, kvh, head0, heads, 0, 1, 1, true, scratch, tid);
		return;
	}
	if (!arrive(p.counters + row, chunks, tid)) return;
	merge_partials<T, D, THREADS>(p, seq, kvh, head0, heads, 0, C, chunks, true, scratch, tid);
}

// program_ids returns the (sequence, y, partition) of this program under the grid order of p.flags.
__device__ __forceinline__ void program_ids(const DecodeParams &p, int &seq, int &y, int &part) {
	if (p.flags & DECODE_FLAG_HEADS_FAST) {
		y = blockIdx.x;
		seq = blockIdx.y;
	} else {
		seq = blockIdx.x;
		y = blockIdx.y;
	}
	part = blockIdx.z;
}

// ---------------------------------------------------------------------------------------------------
// The token range of a program: the whole context (grouped) or one partition (split-k); returns the
// sequence's context length (read once: later uses take it from here).
//
// With a sliding window (p.window > 0) the newest query, at position ctx − 1, attends to keys [lo, ctx),
// lo = max(0, ctx − window): the range then starts at lo's page (base, a multiple of the block size), the
// split-k partitions are laid from base (the CPU twin's decodeSpan), and the keys of that page before lo
// are masked (mma_tile's and the FMA loop's lo). The pages before base are never read: a KV pool may
// have given them back (their block-table entries −1).

__device__ __forceinline__ int token_range(const DecodeParams &p, int seq, int part, bool split, int &start, int &end,
                                           int &lo) {
	const int ctx = p.context_lens[seq];
	lo = window_lo(p, ctx);
	const int base = (lo >> p.log2_block_size) << p.log2_block_size;
	if (split) {
		start = base + part * p.partition_tokens;
		end = min(ctx, start + p.partition_tokens);
	} else {
		start = base;
		end = ctx;
	}
	return ctx;
}

// rope_prepare (DECODE_FLAG_ROPE; after the PDL wait) does for its program what the RoPE kernel
// (model/kernels/rope.cu) would have done: it rotates the program's query heads head0 … head0+heads−1
// (heads ≤ MAXH) of KV head kvh, read from sequence seq's float Q/K/V row (HF LLaMA's rotate-half; the
// angle inv_freq[i]·position in float32, evaluated in double, cos and sin times rope_scaling: rope.cu's
// arithmetic), and rounds them to T into sq ([heads][D], shared memory). A program whose tokens hold the
// newest position (holder) also rotates the KV head's k row and puts it and the v row into kv ([2][D] of
// T, shared memory) for patch_row, and with store set writes them into the caches at the sequence's slot
// (nothing when the slot is negative: a padding row) for the steps after this one: nothing in this kernel
// reads them back from there. Thread tid owns pair index i = tid mod D/2 of every head it touches, so it
// computes one angle, and it issues all its loads before any arithmetic. Ends with a barrier: sq and kv
// are then visible to every warp.
template <typename T, int D, int THREADS, int MAXH>
__device__ __forceinline__ void rope_prepare_row(const DecodeParams &p, int seq, int kvh, int head0, int heads, bool holder,
                                                 bool store, T *sq, T *kv, int tid) {
	constexpr int HALF = D / 2;
	static_assert(THREADS % HALF == 0 && THREADS >= D, "a thread owns one pair index; the v row fits the block");
	constexpr int HSTEP = THREADS / HALF;              // heads rotated side by side
	constexpr int PER = (MAXH + HSTEP - 1) / HSTEP;    // heads per thread at most
	const int i = tid % HALF, g0 = tid / HALF;
	const float *row = p.rope_qkv + (long long)seq * p.qkv_cols;
	const int pos = p.positions[seq];
	const float freq = p.inv_freq[i];
	// The Q/K/V product's bias (Qwen2's), where there is one, is added as the row is read, so the product
	// needs no kernel of its own for it; the bias has the row's columns.
	const float *bias = p.rope_bias;
	const long long qoff = ((long long)kvh * p.group + head0) * D;
	const float *qr = row + qoff;
	float qa[PER], qb[PER];
#pragma unroll
	for (int k = 0; k < PER; k++) {
		const int g = g0 + k * HSTEP;
		qa[k] = g < heads ? qr[g * D + i] + (bias ? bias[qoff + g * D + i] : 0.f) : 0.f;
		qb[k] = g < heads ? qr[g * D + i + HALF] + (bias ? bias[qoff + g * D + i + HALF] : 0.f) : 0.f;
	}
	long long slot = -1;
	float ka = 0.f, kb = 0.f, vv = 0.f;
	if (holder) {
		if (store) slot = p.slots[seq];
		const long long koff = ((long long)p.num_heads + kvh) * D, voff = ((long long)p.num_heads + p.num_kv_heads + kvh) * D;
		const float *kr = row + koff, *vr = row + voff;
		if (tid < HALF) {
			ka = kr[i] + (bias ? bias[koff + i] : 0.f);
			kb = kr[i + HALF] + (bias ? bias[koff + i + HALF] : 0.f);
		}
		if (tid < D) vv = vr[tid] + (bias ? bias[voff + tid] : 0.f);
	}
	double s, c;
	sincos((double)(freq * (float)pos), &s, &c);
	const float cf = (float)c * p.rope_scaling, sf = (float)s * p.rope_scaling;
#pragma unroll
	for (int k = 0; k < PER; k++) {
		const int g = g0 + k * HSTEP;
		if (g < heads) {
			sq[g * D + i] = Elem<T>::from_float(qa[k] * cf - qb[k] * sf);
			sq[g * D + i + HALF] = Elem<T>::from_float(qb[k] * cf + qa[k] * sf);
		}
	}
	if (holder) {
		const T klo = Elem<T>::from_float(ka * cf - kb * sf), khi = Elem<T>::from_float(kb * cf + ka * sf);
		const T v = Elem<T>::from_float(vv);
		if (tid < HALF) {
			kv[i] = klo;
			kv[i + HALF] = khi;
		}
		if (tid < D) kv[D + tid] = v;
		if (slot >= 0) {
			const long long off = (slot * p.num_kv_heads + kvh) * D;
			T *kd = reinterpret_cast<T *>(const_cast<void *>(p.k_cache)) + off;
			T *vd = reinterpret_cast<T *>(const_cast<void *>(p.v_cache)) + off;
			if (tid < HALF) {
				kd[i] = klo;
				kd[i + HALF] = khi;
			}
			if (tid < D) vd[tid] = v;
		}
	}
	__syncthreads();
}

// A kernel whose block is smaller than a head (head_dim 256) has no RoPE path: the dispatcher never asks
// it for one (DecodeDecision.FoldsRoPE), and a call that did would stop here.
template <typename T, int D, int THREADS, int MAXH>
__device__ __forceinline__ void rope_prepare(const DecodeParams &p, int seq, int kvh, int head0, int heads, bool holder,
                                             bool store, T *sq, T *kv, int tid) {
	if constexpr (THREADS % (D / 2) != 0 || THREADS < D) {
		__trap();
	} else {
		rope_prepare_row<T, D, THREADS, MAXH>(p, seq, kvh, head0, heads, holder, store, sq, kv, tid);
	}
}

// patch_row writes the newest K and V row (kv, from rope_prepare) into row `row` of a landed tile's stage,
// whose copies skipped it (DECODE_FLAG_ROPE: the copies end before the newest position); the caller
// places barriers around it (after the tile landed, before it is read). kv is a static shared array of the
// kernel, so the kernels keep their other static arrays small: a few hundred more bytes of static shared
// memory a block can keep two programs of 96 KiB from fitting an SM's carve-out (the decode step was
// slower), hence merge_partials' scratch in dynamic shared memory.
template <typename L, typename T, int THREADS>
__device__ __forceinline__ void patch_row(uint8_t *stage, int row, const T *kv, int tid) {
	static_assert(2 * L::ROW_CHUNKS <= THREADS, "one 16-byte chunk a thread");
	if (tid < 2 * L::ROW_CHUNKS) {
		const int which = tid / L::ROW_CHUNKS, c = tid % L::ROW_CHUNKS;
		const uint4 v = reinterpret_cast<const uint4 *>(kv)[which * L::ROW_CHUNKS + c];
		*reinterpret_cast<uint4 *>(stage + which * L::TILE_BYTES + (row * L::ROW_CHUNKS + L::swizzle(row, c)) * 16) = v;
	}
}

// decode_prologue queues a program's first STAGES−1 tiles (block ids already in sids) around its PDL
// wait and after_wait(). The tiles whose rows all precede fresh (the sequence's newest position, whose K/V
// row the kernel before may be writing: the Q/K/V product's RoPE epilogue) go first when
// DECODE_FLAG_EARLY_PROLOGUE or DECODE_FLAG_ROPE is set: with the early prologue before the wait, so that
// their copies overlap the end of the kernel before, and in any case before after_wait, so that they are
// in flight while it runs; the others after after_wait. Safe tiles form a prefix, so the commit groups
// keep their order. Everything read before the wait is the step's metadata (block tables, context
// lengths) or K/V written by earlier steps. Under DECODE_FLAG_ROPE the callers' copies end before the
// newest row (end is theirs, patch_row puts the row in) and fresh is no bound. Callers without the early
// prologue have waited already (the wait here is then a no-op).
template <typename L, int STAGES, int TILE, typename T, typename AfterWait>
__device__ __forceinline__ void decode_prologue(const DecodeParams &p, uint8_t *smem, int (*sids)[L::MAX_PAGES],
                                                const T *kc, const T *vc, int start, int end, int fresh, int ntiles,
                                                int lbs, long long row_stride, int kvh, int tid, uint64_t pf,
                                                AfterWait after_wait) {
	int pre = 0;
	if (p.flags & (DECODE_FLAG_EARLY_PROLOGUE | DECODE_FLAG_ROPE)) {
#pragma unroll
		for (int s = 0; s < STAGES - 1; s++)
			if (pre == s && s < ntiles && min(end, start + (s + 1) * TILE) <= fresh) {
				L::issue(smem + s * L::STAGE_BYTES, sids[s], kc, vc, start + s * TILE, end, lbs, row_stride, kvh, tid, pf);
				cp_async_commit();
				pre++;
			}
	}
	decode_pdl_enter();
	after_wait();
#pragma unroll
	for (int s = 0; s < STAGES - 1; s++)
		if (s >= pre) {
			if (s < ntiles)
				L::issue(smem + s * L::STAGE_BYTES, sids[s], kc, vc, start + s * TILE, end, lbs, row_stride, kvh, tid, pf);
			cp_async_commit();
		}
}

// ---------------------------------------------------------------------------------------------------
// The mma program. Grid (seq, kv_head, partition); 4·MT warps (4 for the narrow tile, MT = 0); TILE = 64
// tokens, 16 per warp slice.

template <int D, int MT, int SLICES_ = 4> struct MmaShape {
	static constexpr int SLICES = SLICES_; // warps along the tokens of a tile, 16 tokens each
	static constexpr int TILE = 16 * SLICES;
	// MT = 0 is the narrow tile (mma_tile_n8): up to 8 heads as the mma's n, one warp per slice.
	static constexpr int HEAD_TILES = MT == 0 ? 1 : MT;
	static constexpr int ROWS = MT == 0 ? 8 : 16 * MT; // query heads a program serves
	static constexpr int THREADS = SLICES * HEAD_TILES * DECODE_WARP;
};

// mma_tile is one K/V tile of the mma path for one warp (the grouped, split-k and persistent kernels
// share it): S = Q·Kᵀ over the warp's 16 tokens of the tile (t0 its first token, end the range's end:
// tokens past it, and before the window's first key lo, are masked), the online softmax of rows r0 and
// r0+8 (log2 units; m and l per row), and acc += P·V with P straight from the score fragments. ks and vs are the stage's K and V in shared memory;
// mi, mr the lane's ldmatrix roles, c0 its column pair.
template <typename T, int D, typename L>
__device__ __forceinline__ void mma_tile(uint32_t ks, uint32_t vs, int slice, int mi, int mr, int c0, int t0, int lo, int end,
                                         float scale_log2, const uint32_t (&qa)[D / 16][4], float (&acc)[D / 8][4],
                                         float &m0, float &m1, float &l0, float &l1) {
	// S = Q·Kᵀ for the warp's 16 tokens: two n-tiles of 8 tokens.
	float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
	{
		const int row = slice * 16 + (mi / 2) * 8 + mr;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			int chunk = kk * 2 + (mi % 2);
			uint32_t b0, b1, b2, b3;
			ldmatrix_x4(ks + (row * L::ROW_CHUNKS + L::swizzle(row, chunk)) * 16, b0, b1, b2, b3);
			mma16816<T>(s[0], qa[kk], b0, b1);
			mma16816<T>(s[1], qa[kk], b2, b3);
		}
	}

	// Online softmax, rows r0 (s[n][0..1]) and r0+8 (s[n][2..3]).
	float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
	for (int n = 0; n < 2; n++) {
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int tok = t0 + n * 8 + c0 + e;
			const bool ok = tok >= lo && tok < end;
			s[n][e] = ok ? s[n][e] * scale_log2 : -INFINITY;
			s[n][2 + e] = ok ? s[n][2 + e] * scale_log2 : -INFINITY;
			mx0 = fmaxf(mx0, s[n][e]);
			mx1 = fmaxf(mx1, s[n][2 + e]);
		}
	}
	mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
	mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
	mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
	mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
	const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
	const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
	const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
	m0 = mn0;
	m1 = mn1;
	float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
	for (int n = 0; n < 2; n++) {
#pragma unroll
		for (int e = 0; e < 2; e++) {
			s[n][e] = exp2f(s[n][e] - mu0);
			s[n][2 + e] = exp2f(s[n][2 + e] - mu1);
			ps0 += s[n][e];
			ps1 += s[n][2 + e];
		}
	}
	l0 = l0 * al0 + ps0;
	l1 = l1 * al1 + ps1;
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		acc[n][0] *= al0;
		acc[n][1] *= al0;
		acc[n][2] *= al1;
		acc[n][3] *= al1;
	}

	// acc += P·V: P (16 heads × 16 tokens) is the A operand straight from the score fragments.
	uint32_t pa[4];
	pa[0] = Elem<T>::pack(s[0][0], s[0][1]);
	pa[1] = Elem<T>::pack(s[0][2], s[0][3]);
	pa[2] = Elem<T>::pack(s[1][0], s[1][1]);
	pa[3] = Elem<T>::pack(s[1][2], s[1][3]);
	{
		const int row = slice * 16 + (mi % 2) * 8 + mr;
#pragma unroll
		for (int dp = 0; dp < D / 16; dp++) {
			int chunk = dp * 2 + mi / 2;
			uint32_t b0, b1, b2, b3;
			ldmatrix_x4_trans(vs + (row * L::ROW_CHUNKS + L::swizzle(row, chunk)) * 16, b0, b1, b2, b3);
			mma16816<T>(acc[2 * dp], pa, b0, b1);
			mma16816<T>(acc[2 * dp + 1], pa, b2, b3);
		}
	}
}

// n8_scores is S^T = K·Q^T of the narrow tile for the warp's 16 tokens (mma_tile_n8 and mma_tile_n8_f8):
// frag(kk, a) gives k-step kk's K fragment (the A operand); two accumulators (even and odd k-steps)
// halve the chain of mmas.
template <typename T, int D, typename Frag>
__device__ __forceinline__ void n8_scores(const uint32_t (&qb)[D / 16][2], float (&s)[4], float (&s2)[4], Frag frag) {
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) {
		uint32_t a[4];
		frag(kk, a);
		if (kk % 2 == 0)
			mma16816<T>(s, a, qb[kk][0], qb[kk][1]);
		else
			mma16816<T>(s2, a, qb[kk][0], qb[kk][1]);
	}
}

// n8_softmax is the narrow tile's online softmax (mma_tile_n8 and mma_tile_n8_f8): S^T's two partial
// accumulators s and s2 summed, scaled and masked (tokens t0 + gq and t0 + gq + 8 of [lo, end)), the
// state of heads h0 and h0+1 updated, acc rescaled, and P^T (16 tokens × 8 heads) returned as the
// B operand of acc^T += V^T·P^T (b0, b1: the transposes of the score tile's halves).
template <typename T, int D>
__device__ __forceinline__ void n8_softmax(float (&s)[4], const float (&s2)[4], int gq, int t0, int lo, int end,
                                           float scale_log2, float (&acc)[D / 16][4], float &m0, float &m1, float &l0,
                                           float &l1, uint32_t &b0, uint32_t &b1) {
	const bool ok0 = t0 + gq >= lo && t0 + gq < end, ok1 = t0 + gq + 8 >= lo && t0 + gq + 8 < end;
	s[0] = ok0 ? (s[0] + s2[0]) * scale_log2 : -INFINITY;
	s[1] = ok0 ? (s[1] + s2[1]) * scale_log2 : -INFINITY;
	s[2] = ok1 ? (s[2] + s2[2]) * scale_log2 : -INFINITY;
	s[3] = ok1 ? (s[3] + s2[3]) * scale_log2 : -INFINITY;
	float mx0 = fmaxf(s[0], s[2]), mx1 = fmaxf(s[1], s[3]);
#pragma unroll
	for (int o = 4; o < 32; o *= 2) {
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
	}
	const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
	const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
	const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
	m0 = mn0;
	m1 = mn1;
	s[0] = exp2f(s[0] - mu0);
	s[2] = exp2f(s[2] - mu0);
	s[1] = exp2f(s[1] - mu1);
	s[3] = exp2f(s[3] - mu1);
	l0 = l0 * al0 + s[0] + s[2];
	l1 = l1 * al1 + s[1] + s[3];
#pragma unroll
	for (int dt = 0; dt < D / 16; dt++) {
		acc[dt][0] *= al0;
		acc[dt][1] *= al1;
		acc[dt][2] *= al0;
		acc[dt][3] *= al1;
	}
	b0 = movmatrix_trans(Elem<T>::pack(s[0], s[1]));
	b1 = movmatrix_trans(Elem<T>::pack(s[2], s[3]));
}

// mma_tile_n8 is mma_tile for groups of at most 8 heads, transposed: the tokens are the mma's m and the
// heads its n, so that a warp's 16 tokens × 8 heads take one m16n8k16 per k-step where mma_tile's 16
// heads × 16 tokens take two (12 of its 16 rows are padding at G = 4, 15 at G = 1), and acc^T (D × 8) half
// the registers. S^T = K·Q^T with K the A operand (ldmatrix) and Q^T the B operand (qb, registers); the
// online softmax per head (a lane holds heads h0 = 2·(lane%4) and h0+1 at tokens lane/4 and lane/4+8,
// reduced over the 8 lanes of each head); P^T for acc^T += V^T·P^T is the score tile's two 8×8 halves
// transposed in registers (movmatrix), V^T the A operand (ldmatrix.trans). m0/l0 are head h0's state,
// m1/l1 head h0+1's (l per lane until the end, as in mma_tile); acc[dt] holds acc^T rows dt·16 + lane/4
// (elements 0, 1: heads h0, h0+1) and dt·16 + lane/4 + 8 (elements 2, 3).
template <typename T, int D, typename L>
__device__ __forceinline__ void mma_tile_n8(uint32_t ks, uint32_t vs, int slice, int mi, int mr, int gq, int t0, int lo, int end,
                                            float scale_log2, const uint32_t (&qb)[D / 16][2], float (&acc)[D / 16][4],
                                            float &m0, float &m1, float &l0, float &l1) {
	float s[4] = {0.f, 0.f, 0.f, 0.f}, s2[4] = {0.f, 0.f, 0.f, 0.f};
	{
		const int row = slice * 16 + (mi % 2) * 8 + mr;
		n8_scores<T, D>(qb, s, s2, [&](int kk, uint32_t(&a)[4]) {
			const int chunk = kk * 2 + mi / 2;
			ldmatrix_x4(ks + (row * L::ROW_CHUNKS + L::swizzle(row, chunk)) * 16, a[0], a[1], a[2], a[3]);
		});
	}
	uint32_t b0, b1;
	n8_softmax<T, D>(s, s2, gq, t0, lo, end, scale_log2, acc, m0, m1, l0, l1, b0, b1);
	{
		const int row = slice * 16 + (mi / 2) * 8 + mr;
#pragma unroll
		for (int dt = 0; dt < D / 16; dt++) {
			const int chunk = dt * 2 + mi % 2;
			uint32_t a[4];
			ldmatrix_x4_trans(vs + (row * L::ROW_CHUNKS + L::swizzle(row, chunk)) * 16, a[0], a[1], a[2], a[3]);
			mma16816<T>(acc[dt], a, b0, b1);
		}
	}
}

// e4m3_to_t16 converts two e4m3 codes (c, lowest byte first) to a pair of T (bf16 or f16), exactly:
// every e4m3 value is an f16 value and a bf16 value.
template <typename T> __device__ __forceinline__ uint32_t e4m3_to_t16(unsigned short c) {
	const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)c, __NV_E4M3);
	if constexpr (std::is_same<T, __half>::value) {
		return (uint32_t)h.x | ((uint32_t)h.y << 16);
	} else {
		const float2 f = __half22float2(__half2(h));
		return Elem<T>::pack(f.x, f.y);
	}
}

// convert_tile writes a stage of e4m3 K and V rows (LC's layout: 16 codes a chunk) as T rows in L's
// layout (8 a chunk, swizzled as the mma tiles read them) at conv: the FP8 pages' tile, ready for the
// unchanged mma_tile. Thread tid converts chunks tid, tid + THREADS, … of K and then of V.
template <typename T, typename LC, typename L, int THREADS>
__device__ __forceinline__ void convert_tile(const uint8_t *stage, uint8_t *conv, int tid) {
	static_assert(L::ROW_CHUNKS == 2 * LC::ROW_CHUNKS, "a code chunk is two T chunks");
#pragma unroll
	for (int i = tid; i < 2 * LC::TILE_CHUNKS; i += THREADS) {
		const int which = i / LC::TILE_CHUNKS, c = i % LC::TILE_CHUNKS;
		const int row = c / LC::ROW_CHUNKS, ch = c % LC::ROW_CHUNKS;
		const uint4 v = *reinterpret_cast<const uint4 *>(stage + which * LC::TILE_BYTES +
		                                                 (row * LC::ROW_CHUNKS + LC::swizzle(row, ch)) * 16);
		const uint32_t w[4] = {v.x, v.y, v.z, v.w};
		uint8_t *dst = conv + which * L::TILE_BYTES + row * L::ROW_CHUNKS * 16;
		*reinterpret_cast<uint4 *>(dst + L::swizzle(row, 2 * ch) * 16) =
		    make_uint4(e4m3_to_t16<T>(w[0] & 0xffffu), e4m3_to_t16<T>(w[0] >> 16), e4m3_to_t16<T>(w[1] & 0xffffu),
		               e4m3_to_t16<T>(w[1] >> 16));
		*reinterpret_cast<uint4 *>(dst + L::swizzle(row, 2 * ch + 1) * 16) =
		    make_uint4(e4m3_to_t16<T>(w[2] & 0xffffu), e4m3_to_t16<T>(w[2] >> 16), e4m3_to_t16<T>(w[3] & 0xffffu),
		               e4m3_to_t16<T>(w[3] >> 16));
	}
}

// mma_tile_n8_f8 is mma_tile_n8 over a stage of e4m3 codes (LC's layout, ks and vs its K and V
// tiles): each lane loads the codes its fragments hold with 16-byte shared loads and converts them in
// registers (e4m3_to_t16), so no converted tile is written or read back. Two permutations make a lane's
// fragments contiguous codes:
//   - Q·Kᵀ's k (head_dim): k-step kk's lane column pair 2c, 2c+1 is d = KB·c + 4·kk + {0, 1} and 2c+8,
//     2c+9 is d + 2 (KB = D/4), so lane c's codes of a token are bytes [KB·c, KB·c + KB) of its row and
//     one 32-bit word a k-step; the queries (qb) are loaded in the same order (decode_mma).
//   - accᵀ's rows (head_dim): row g of m-tile dt is d = rho_n8<D>(dt, g) = VB·g + 2·dt and row g+8 is
//     d + 1 (VB = D/8), so lane g reads bytes [VB·g, VB·g + VB) of its four token rows (2c, 2c+1, 2c+8,
//     2c+9) and a byte permute pairs two tokens' codes of one d; decode_mma's merge writes the rows back
//     in order.
// The chunks a lane reads are conflict-free under the layout's swizzle at D = 128 (a quarter warp's eight
// 16-byte loads cover the eight chunk positions). K's and V's scales are the caller's, as in decode_mma.
template <int D> __device__ __forceinline__ int rho_n8(int dt, int g) { return (D / 8) * g + 2 * dt; }

template <typename T, int D, typename LC>
__device__ __forceinline__ void mma_tile_n8_f8(const uint8_t *ks, const uint8_t *vs, int slice, int lane, int t0, int lo,
                                               int end, float scale_log2, const uint32_t (&qb)[D / 16][2],
                                               float (&acc)[D / 16][4], float &m0, float &m1, float &l0, float &l1) {
	static_assert(D == 64 || D == 128, "a lane's K codes are whole chunks and its V codes 8 or 16 bytes");
	constexpr int KSTEPS = D / 16, KB = D / 4, VB = D / 8;
	const int g = lane / 4, c = lane % 4;
	// K: rows g and g+8 of the warp's 16 tokens, KB codes each (a word a k-step).
	uint32_t ka[KSTEPS], kb[KSTEPS];
#pragma unroll
	for (int i = 0; i < KB / 16; i++) {
		const int chunk = (KB / 16) * c + i, ra = slice * 16 + g, rb = ra + 8;
		const uint4 va = *reinterpret_cast<const uint4 *>(ks + (ra * LC::ROW_CHUNKS + LC::swizzle(ra, chunk)) * 16);
		const uint4 vb = *reinterpret_cast<const uint4 *>(ks + (rb * LC::ROW_CHUNKS + LC::swizzle(rb, chunk)) * 16);
		ka[4 * i] = va.x, ka[4 * i + 1] = va.y, ka[4 * i + 2] = va.z, ka[4 * i + 3] = va.w;
		kb[4 * i] = vb.x, kb[4 * i + 1] = vb.y, kb[4 * i + 2] = vb.z, kb[4 * i + 3] = vb.w;
	}
	// V: tokens 2c, 2c+1, 2c+8, 2c+9 (v[t]), VB codes each from byte VB·g of the row; loaded before the
	// scores' mmas so that their latency hides behind them.
	uint32_t v[4][VB / 4];
#pragma unroll
	for (int t = 0; t < 4; t++) {
		const int row = slice * 16 + 2 * c + (t & 1) + 8 * (t >> 1);
		const int chunk = VB * g / 16, inner = VB * g % 16;
		const uint8_t *src = vs + (row * LC::ROW_CHUNKS + LC::swizzle(row, chunk)) * 16 + inner;
		if constexpr (VB == 16) {
			const uint4 x = *reinterpret_cast<const uint4 *>(src);
			v[t][0] = x.x, v[t][1] = x.y, v[t][2] = x.z, v[t][3] = x.w;
		} else {
			const uint2 x = *reinterpret_cast<const uint2 *>(src);
			v[t][0] = x.x, v[t][1] = x.y;
		}
	}

	float s[4] = {0.f, 0.f, 0.f, 0.f}, s2[4] = {0.f, 0.f, 0.f, 0.f};
	n8_scores<T, D>(qb, s, s2, [&](int kk, uint32_t(&a)[4]) {
		a[0] = e4m3_to_t16<T>(ka[kk] & 0xffffu), a[1] = e4m3_to_t16<T>(kb[kk] & 0xffffu);
		a[2] = e4m3_to_t16<T>(ka[kk] >> 16), a[3] = e4m3_to_t16<T>(kb[kk] >> 16);
	});
	uint32_t b0, b1;
	n8_softmax<T, D>(s, s2, g, t0, lo, end, scale_log2, acc, m0, m1, l0, l1, b0, b1);
#pragma unroll
	for (int dt = 0; dt < KSTEPS; dt++) {
		// Bytes 2·(dt%2) and 2·(dt%2)+1 of word dt/2 are d = rho and rho+1: pair each with the next token's.
		const uint32_t sel = dt % 2 ? 0x7362u : 0x5140u;
		const uint32_t p01 = __byte_perm(v[0][dt / 2], v[1][dt / 2], sel);
		const uint32_t p89 = __byte_perm(v[2][dt / 2], v[3][dt / 2], sel);
		const uint32_t a[4] = {e4m3_to_t16<T>(p01 & 0xffffu), e4m3_to_t16<T>(p01 >> 16), e4m3_to_t16<T>(p89 & 0xffffu),
		                       e4m3_to_t16<T>(p89 >> 16)};
		mma16816<T>(acc[dt], a, b0, b1);
	}
}

// KV is the pages' element type: T, or E4M3Code for an FP8 KV cache (F8, the narrow tile only). With F8
// the stages hold the codes (LC, half the bytes of T rows) and mma_tile_n8_f8 converts them in registers
// as it loads them, its head_dim permutations matched by the queries' load and the merge's stores; K's
// scale is folded into the scores' scale and V's into the accumulators at the end; there is no RoPE path
// (the dispatcher never asks for it over FP8 pages). CHUNKED (the narrow tile over FP8 pages, for
// groups of more than ROWS heads) serves a group in chunks of ROWS heads: grid row y is KV head
// y / chunks, heads [ROWS·(y % chunks), …) of its group (DecodeCall.grid), each chunk reading the KV
// head's tiles (the later ones mostly from L2). It is an entry point of its own so that the unchunked
// kernels carry none of its arithmetic (a run-time chunk count cost them 3-9% at short split-k
// partitions).
template <typename T, int D, int MT, bool SPLIT, int STAGES = DECODE_STAGES, int SLICES_ = 4, typename KV = T,
          bool CHUNKED = false>
__device__ __forceinline__ void decode_mma(const DecodeParams &p) {
	using S = MmaShape<D, MT, SLICES_>;
	constexpr int TILE = S::TILE, THREADS = S::THREADS, SLICES = S::SLICES, ROWS = S::ROWS;
	using L = TileLoader<T, D, TILE, THREADS>;   // the mma tiles' layout
	using LC = TileLoader<KV, D, TILE, THREADS>; // the stages' (L itself unless F8)
	constexpr bool F8 = sizeof(KV) == 1;
	constexpr bool NARROW = MT == 0; // mma_tile_n8
	constexpr int KSTEPS = D / 16;  // k-steps of Q·Kᵀ
	constexpr int NTILES = NARROW ? D / 16 : D / 8; // acc's fragments: m-tiles of accᵀ (narrow), n-tiles of acc

	extern __shared__ __align__(128) uint8_t smem[];
	__shared__ int sids[STAGES][L::MAX_PAGES];

	// Without DECODE_FLAG_EARLY_PROLOGUE the PDL wait comes first (decode_prologue's is then a no-op).
	if (!(p.flags & DECODE_FLAG_EARLY_PROLOGUE)) decode_pdl_enter();
#ifdef DECODE_DIAG
	if (p.flags & DECODE_FLAG_DIAG_ENTRY) {
		decode_pdl_enter();
		return;
	}
#endif
	int seq, kvh, part;
	program_ids(p, seq, kvh, part);
	// CHUNKED: this program's chunk of the group, heads [head0, head0 + heads) (otherwise one program
	// serves the whole group: the dispatcher's tile holds it).
	static_assert(!CHUNKED || NARROW, "the narrow tile's chunks");
	int y = kvh, chunks = 1, head0 = 0, heads = 0;
	if constexpr (CHUNKED) {
		chunks = (p.group + ROWS - 1) / ROWS;
		kvh = y / chunks;
		head0 = (y - kvh * chunks) * ROWS;
		heads = min(p.group - head0, ROWS);
	}
	const uint64_t pf = copy_policy(p.flags);
	const int tid = threadIdx.x, lane = tid % DECODE_WARP, warp = tid / DECODE_WARP;
	const int slice = warp % SLICES, mtile = warp / SLICES;
	const int lbs = p.log2_block_size;
	const int *table = p.block_tables + (long long)seq * p.max_blocks;
	// Prologue: block ids of the first STAGES-1 tiles, loaded while the context length is in flight.
	const int start0 = SPLIT ? part * p.partition_tokens : 0;
	int first_ids[STAGES - 1];
#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) first_ids[s] = LC::load_id_early(table, start0 + s * TILE, p.max_blocks, lbs, tid);
	int start, end, lo;
	const int ctx = token_range(p, seq, part, SPLIT, start, end, lo);
	if (start >= end) return; // an empty partition: the reduce does not read it
	if (p.window > 0) { // the range starts at the window's page, not where the early loads assumed
#pragma unroll
		for (int s = 0; s < STAGES - 1; s++) first_ids[s] = LC::load_id(table, start + s * TILE, end, lbs, tid);
	}

	const KV *kc = reinterpret_cast<const KV *>(p.k_cache);
	const KV *vc = reinterpret_cast<const KV *>(p.v_cache);
	const long long row_stride = (long long)p.num_kv_heads * D;
	const int ntiles = (end - start + TILE - 1) / TILE;

#pragma unroll
	for (int s = 0; s < STAGES - 1; s++)
		if (tid < L::MAX_PAGES) sids[s][tid] = first_ids[s];
	__syncthreads();
	// With DECODE_FLAG_ROPE the queries come rotated from rope_prepare through the last stage, which the
	// prologue leaves free and the loop fills only after its first barrier.
	// The program holding the newest row copies its tiles without it and patches it in from rope_kv, so
	// no copy waits for the rotation.
	T *rope_q = reinterpret_cast<T *>(smem + (STAGES - 1) * LC::STAGE_BYTES);
	static_assert(F8 || ROWS * D * (int)sizeof(T) <= L::STAGE_BYTES, "rotated queries fit a stage");
	__shared__ __align__(16) T rope_kv[2 * D];
	const bool rope = !F8 && (p.flags & DECODE_FLAG_ROPE);
	const int newest = ctx - 1;
	const bool holds = rope && start <= newest && newest < end;
	const int copy_end = rope ? min(end, newest) : end;
	const int patch_tile = holds ? (newest - start) / TILE : -1;
	decode_prologue<LC, STAGES, TILE>(p, smem, sids, kc, vc, start, copy_end, rope ? INT_MAX : newest, ntiles, lbs,
	                                 row_stride, kvh, tid, pf, [&] {
		                                 if (rope)
			                                 rope_prepare<T, D, THREADS, ROWS>(p, seq, kvh, 0, min(p.group, ROWS), holds,
			                                                                   true, rope_q, rope_kv, tid);
	                                 });
	int next_id = LC::load_id(table, start + (STAGES - 1) * TILE, end, lbs, tid);

	// Q fragments: the A operand (row-major 16×16 per k-step: rows r0 = lane/4 and r0+8 of this head
	// tile), or with the narrow tile the B operand (Qᵀ, 16×8 per k-step: head r0, columns c0, c0+1 and
	// c0+8, c0+9).
	const int r0 = lane / 4, c0 = (lane % 4) * 2;
	uint32_t qa[KSTEPS][NARROW ? 2 : 4];
	{
		const int h0 = mtile * 16 + r0, h1 = h0 + 8;
		// F8: k-step kk's columns c0, c0+1 are d = (D/4)·(lane%4) + 4·kk + {0, 1} and c0+8, c0+9 the next
		// two (mma_tile_n8_f8's permutation).
		// Two copies of the loads, one from shared memory and one from global memory, so that each is
		// compiled for its own space (a pointer to either would make them generic loads).
		auto load = [&](const T *qg) {
#pragma unroll
			for (int kk = 0; kk < KSTEPS; kk++) {
				const int col = F8 ? (D / 4) * (lane % 4) + 4 * kk : kk * 16 + c0;
				qa[kk][0] = h0 < (CHUNKED ? heads : p.group) ? *reinterpret_cast<const uint32_t *>(qg + (long long)h0 * D + col) : 0u;
				if constexpr (NARROW) {
					qa[kk][1] = h0 < (CHUNKED ? heads : p.group) ? *reinterpret_cast<const uint32_t *>(qg + (long long)h0 * D + col + (F8 ? 2 : 8)) : 0u;
				} else {
					qa[kk][1] = h1 < p.group ? *reinterpret_cast<const uint32_t *>(qg + (long long)h1 * D + col) : 0u;
					qa[kk][2] = h0 < p.group ? *reinterpret_cast<const uint32_t *>(qg + (long long)h0 * D + col + 8) : 0u;
					qa[kk][3] = h1 < p.group ? *reinterpret_cast<const uint32_t *>(qg + (long long)h1 * D + col + 8) : 0u;
				}
			}
		};
		if (rope)
			load(rope_q);
		else
			load(reinterpret_cast<const T *>(p.q) + ((long long)seq * p.num_heads + (long long)kvh * p.group + (CHUNKED ? head0 : 0)) * D);
	}

	float acc[NTILES][4];
#pragma unroll
	for (int n = 0; n < NTILES; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
	// Rows r0 and r0+8 (narrow: heads c0 and c0+1); l per lane until the end.
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

	// ldmatrix lane roles: matrix lane/8, row lane%8.
	const int mi = lane / 8, mr = lane % 8;

	for (int j = 0; j < ntiles; j++) {
		if (tid < LC::MAX_PAGES) sids[(j + STAGES - 1) % STAGES][tid] = next_id;
		cp_async_wait<STAGES - 2>();
		__syncthreads(); // tile j landed; tile j-1's stage is free; the ids above are visible
		{
			int jn = j + STAGES - 1;
			if (jn < ntiles)
				LC::issue(smem + (jn % STAGES) * LC::STAGE_BYTES, sids[jn % STAGES], kc, vc,
				          start + jn * TILE, copy_end, lbs, row_stride, kvh, tid, pf);
			cp_async_commit();
			next_id = LC::load_id(table, start + (jn + 1) * TILE, end, lbs, tid);
		}
		if (!F8 && j == patch_tile) {
			patch_row<L, T, THREADS>(smem + (j % STAGES) * L::STAGE_BYTES, newest - start - j * TILE, rope_kv, tid);
			__syncthreads();
		}

		const uint8_t *stage = smem + (j % STAGES) * LC::STAGE_BYTES;
		const uint32_t ks = smem_addr(stage), vs = ks + L::TILE_BYTES;
		const int t0 = start + j * TILE + slice * 16; // this warp's first token

		if constexpr (F8) {
			static_assert(NARROW, "FP8 pages take the narrow tile");
			mma_tile_n8_f8<T, D, LC>(stage, stage + LC::TILE_BYTES, slice, lane, t0, lo, end, p.scale_log2 * p.k_scale, qa,
			                         acc, m0, m1, l0, l1);
		} else if constexpr (NARROW)
			mma_tile_n8<T, D, L>(ks, vs, slice, mi, mr, r0, t0, lo, end, p.scale_log2, qa, acc, m0, m1, l0, l1);
		else
			mma_tile<T, D, L>(ks, vs, slice, mi, mr, c0, t0, lo, end, p.scale_log2, qa, acc, m0, m1, l0, l1);
	}
	if constexpr (F8) { // V's scale, once: acc = Σ p·code, the values being code · v_scale
#pragma unroll
		for (int n = 0; n < NTILES; n++) acc[n][0] *= p.v_scale, acc[n][1] *= p.v_scale, acc[n][2] *= p.v_scale, acc[n][3] *= p.v_scale;
	}

	// Merge the SLICES warps of each head tile.
	cp_async_wait<0>();
#ifdef DECODE_DIAG
	if (p.flags & DECODE_FLAG_DIAG_LOOP) {
		if (acc[0][0] == 12345.f) reinterpret_cast<float *>(p.out)[tid] = acc[0][1]; // keep the loop
		return;
	}
#endif
	__syncthreads(); // all warps are done with the stages; reuse the memory
	auto &ms = *reinterpret_cast<MergeSmem<D, ROWS, SLICES> *>(smem);
	if constexpr (NARROW) {
#pragma unroll
		for (int o = 4; o < 32; o *= 2) {
			l0 += __shfl_xor_sync(0xffffffffu, l0, o);
			l1 += __shfl_xor_sync(0xffffffffu, l1, o);
		}
		// Only the group's heads; accᵀ row d = dt·16 + r0 (+8), with F8 rho_n8(dt, r0) (+1).
		auto put = [&](int h, float m, float l, int e) { // head h's state: acc[·][e], acc[·][e + 2]
			if (h >= (CHUNKED ? heads : p.group)) return;
			if (r0 == 0) ms.m[slice][h] = m, ms.l[slice][h] = l;
#pragma unroll
			for (int dt = 0; dt < NTILES; dt++) {
				const int d0 = F8 ? rho_n8<D>(dt, r0) : dt * 16 + r0, d1 = F8 ? d0 + 1 : d0 + 8;
				ms.acc[slice][h][d0] = acc[dt][e];
				ms.acc[slice][h][d1] = acc[dt][e + 2];
			}
		};
		put(c0, m0, l0, 0);
		put(c0 + 1, m1, l1, 1);
	} else {
		l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
		l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
		l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
		l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
		// Only the group's rows: the padding rows of the head tile (12 of 16 at G = 4) are never read.
		const int rA = mtile * 16 + r0, rB = rA + 8;
		auto put = [&](int r, float m, float l, int e) { // row r's state: acc[·][e], acc[·][e + 1]
			if (r >= p.group) return;
			if (lane % 4 == 0) ms.m[slice][r] = m, ms.l[slice][r] = l;
#pragma unroll
			for (int n = 0; n < NTILES; n++) {
				ms.acc[slice][r][n * 8 + c0] = acc[n][e];
				ms.acc[slice][r][n * 8 + c0 + 1] = acc[n][e + 1];
			}
		};
		put(rA, m0, l0, 0);
		put(rB, m1, l1, 2);
	}
	__syncthreads();
	merge_store<T, D, ROWS, SLICES, THREADS, SPLIT>(ms, p, seq, kvh, CHUNKED ? head0 : 0,
	                                                CHUNKED ? heads : min(p.group, ROWS), part, tid);
#ifdef DECODE_DIAG
	if (p.flags & DECODE_FLAG_DIAG_NOMERGE) return;
#endif
	if (SPLIT)
		splitk_finish<T, D, THREADS>(p, seq, ctx, kvh, CHUNKED ? y : kvh, p.num_kv_heads * chunks,
		                             CHUNKED ? head0 : 0, CHUNKED ? heads : min(p.group, ROWS), part,
		                             reinterpret_cast<float *>(smem + sizeof(MergeSmem<D, ROWS, SLICES>)), tid);
}

template <typename T, int D, int MT, int STAGES = DECODE_STAGES, int SLICES_ = 4, typename KV = T> constexpr int mma_smem_bytes() {
	using S = MmaShape<D, MT, SLICES_>;
	using LC = TileLoader<KV, D, S::TILE, S::THREADS>;
	constexpr int pipe = STAGES * LC::STAGE_BYTES;
	constexpr int merge = (int)sizeof(MergeSmem<D, S::ROWS, S::SLICES>) + 128 * 4; // + merge_partials' scratch
	return pipe > merge ? pipe : merge;
}

// ---------------------------------------------------------------------------------------------------
// The FMA program. Grid (seq, kv_head · ceil(G/GC), partition); 4 warps; TILE = 32 tokens, 8 per warp.
// Lane l holds elements [l·V, l·V+V) of head_dim (V = D/32) of the GC queries and accumulators.

template <int D, int GC> struct FmaShape {
	static constexpr int SLICES = 4;
	static constexpr int TOKENS = 8; // per warp per tile
	static constexpr int TILE = SLICES * TOKENS;
	static constexpr int THREADS = SLICES * DECODE_WARP;
	static constexpr int V = D / DECODE_WARP;
};

template <typename T, int V> struct VecLoad;
template <typename T> struct VecLoad<T, 2> {
	static __device__ __forceinline__ void load(const uint8_t *p, float (&x)[2]) {
		if constexpr (sizeof(T) == 4) {
			float2 v = *reinterpret_cast<const float2 *>(p);
			x[0] = v.x, x[1] = v.y;
		} else {
			T v[2];
			*reinterpret_cast<uint32_t *>(v) = *reinterpret_cast<const uint32_t *>(p);
			x[0] = Elem<T>::to_float(v[0]), x[1] = Elem<T>::to_float(v[1]);
		}
	}
};
template <typename T> struct VecLoad<T, 8> { // head_dim 256, 16-bit T: one 16-byte chunk
	static __device__ __forceinline__ void load(const uint8_t *p, float (&x)[8]) {
		static_assert(sizeof(T) == 2, "8 elements fit one chunk");
		T v[8];
		*reinterpret_cast<uint4 *>(v) = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
		for (int i = 0; i < 8; i++) x[i] = Elem<T>::to_float(v[i]);
	}
};
template <typename T> struct VecLoad<T, 4> {
	static __device__ __forceinline__ void load(const uint8_t *p, float (&x)[4]) {
		if constexpr (sizeof(T) == 4) {
			float4 v = *reinterpret_cast<const float4 *>(p);
			x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
		} else {
			T v[4];
			*reinterpret_cast<uint2 *>(v) = *reinterpret_cast<const uint2 *>(p);
#pragma unroll
			for (int i = 0; i < 4; i++) x[i] = Elem<T>::to_float(v[i]);
		}
	}
};

// KV is the pages' element type: T, or E4M3Code for an FP8 KV cache (F8), whose codes are read back as
// float(code) · scale: K's scale folded into the queries (q · (c·ks) = (q·ks) · c up to float
// rounding), V's applied to each value as it is loaded. F8 has no RoPE path (the dispatcher never
// asks it for one: the RoPE kernel quantizes the newest row into the pages before this kernel reads
// it). A template parameter, so that the 16-bit and float32 kernels are compiled as before.
template <typename T, int D, int GC, bool SPLIT, typename KV = T>
__device__ __forceinline__ void decode_fma(const DecodeParams &p) {
	using S = FmaShape<D, GC>;
	constexpr int TILE = S::TILE, THREADS = S::THREADS, SLICES = S::SLICES, TOK = S::TOKENS, V = S::V;
	constexpr bool F8 = sizeof(KV) == 1;
	using L = TileLoader<KV, D, TILE, THREADS>;
	static_assert(V * (int)sizeof(KV) <= 16 && (V * (int)sizeof(KV)) % (F8 ? 2 : 4) == 0, "lane vector within one chunk");

	extern __shared__ __align__(128) uint8_t smem[];
	__shared__ int sids[DECODE_STAGES][L::MAX_PAGES];

	decode_pdl_enter();
	const int chunks = (p.group + GC - 1) / GC;
	int seq, y, part;
	program_ids(p, seq, y, part);
	const int kvh = y / chunks, chunk = y % chunks;
	const uint64_t pf = copy_policy(p.flags);
	const int head0 = chunk * GC, heads = min(GC, p.group - head0);
	const int tid = threadIdx.x, lane = tid % DECODE_WARP, slice = tid / DECODE_WARP;
	const int lbs = p.log2_block_size;
	const int *table = p.block_tables + (long long)seq * p.max_blocks;
	const int start0 = SPLIT ? part * p.partition_tokens : 0;
	int first_ids[DECODE_STAGES - 1];
#pragma unroll
	for (int s = 0; s < DECODE_STAGES - 1; s++)
		first_ids[s] = L::load_id_early(table, start0 + s * TILE, p.max_blocks, lbs, tid);
	int start, end, lo;
	const int ctx = token_range(p, seq, part, SPLIT, start, end, lo);
	if (start >= end) return;
	if (p.window > 0) { // the range starts at the window's page, not where the early loads assumed
#pragma unroll
		for (int s = 0; s < DECODE_STAGES - 1; s++) first_ids[s] = L::load_id(table, start + s * TILE, end, lbs, tid);
	}

	const KV *kc = reinterpret_cast<const KV *>(p.k_cache);
	const KV *vc = reinterpret_cast<const KV *>(p.v_cache);
	const long long row_stride = (long long)p.num_kv_heads * D;
	const int ntiles = (end - start + TILE - 1) / TILE;

#pragma unroll
	for (int s = 0; s < DECODE_STAGES - 1; s++)
		if (tid < L::MAX_PAGES) sids[s][tid] = first_ids[s];
	__syncthreads();
	// DECODE_FLAG_ROPE: rotated queries through the last stage (free until the loop's first barrier); every
	// head chunk's program of the partition holding the newest row patches it in from rope_kv, the first
	// one also stores it.
	T *rope_q = reinterpret_cast<T *>(smem + (DECODE_STAGES - 1) * L::STAGE_BYTES);
	static_assert(F8 || GC * D * (int)sizeof(T) <= L::STAGE_BYTES, "rotated queries fit a stage");
	__shared__ __align__(16) T rope_kv[2 * D];
	const bool rope = !F8 && (p.flags & DECODE_FLAG_ROPE);
	const int newest = ctx - 1;
	const bool holds = rope && start <= newest && newest < end;
	const int copy_end = rope ? min(end, newest) : end;
	const int patch_tile = holds ? (newest - start) / TILE : -1;
	decode_prologue<L, DECODE_STAGES, TILE>(p, smem, sids, kc, vc, start, copy_end, rope ? INT_MAX : newest, ntiles,
	                                        lbs, row_stride, kvh, tid, pf, [&] {
		                                        if constexpr (!F8)
			                                        if (rope)
				                                        rope_prepare<T, D, THREADS, GC>(p, seq, kvh, head0, heads, holds,
				                                                                        chunk == 0, rope_q, rope_kv, tid);
	                                        });
	int next_id = L::load_id(table, start + (DECODE_STAGES - 1) * TILE, end, lbs, tid);

	// Queries, pre-multiplied by the scale (in log2 units; with F8 also by K's scale), fp32.
	float q[GC][V];
	{
		const float qscale = F8 ? p.scale_log2 * p.k_scale : p.scale_log2;
		auto load = [&](const T *qg) { // one copy for each memory space, as in the mma path
#pragma unroll
			for (int g = 0; g < GC; g++)
#pragma unroll
				for (int v = 0; v < V; v++)
					q[g][v] = g < heads ? Elem<T>::to_float(qg[(long long)g * D + lane * V + v]) * qscale : 0.f;
		};
		if (rope)
			load(rope_q);
		else
			load(reinterpret_cast<const T *>(p.q) + ((long long)seq * p.num_heads + (long long)kvh * p.group + head0) * D);
	}
	float acc[GC][V], m[GC], l[GC];
#pragma unroll
	for (int g = 0; g < GC; g++) {
		m[g] = -INFINITY;
		l[g] = 0.f;
#pragma unroll
		for (int v = 0; v < V; v++) acc[g][v] = 0.f;
	}
	// Byte offset of this lane's vector inside a row, before the swizzle.
	const int lane_byte = lane * V * (int)sizeof(KV);

	for (int j = 0; j < ntiles; j++) {
		if (tid < L::MAX_PAGES) sids[(j + DECODE_STAGES - 1) % DECODE_STAGES][tid] = next_id;
		cp_async_wait<DECODE_STAGES - 2>();
		__syncthreads();
		{
			int jn = j + DECODE_STAGES - 1;
			if (jn < ntiles)
				L::issue(smem + (jn % DECODE_STAGES) * L::STAGE_BYTES, sids[jn % DECODE_STAGES], kc, vc,
				         start + jn * TILE, copy_end, lbs, row_stride, kvh, tid, pf);
			cp_async_commit();
			next_id = L::load_id(table, start + (jn + 1) * TILE, end, lbs, tid);
		}
		if constexpr (!F8)
			if (j == patch_tile) {
				patch_row<L, T, THREADS>(smem + (j % DECODE_STAGES) * L::STAGE_BYTES, newest - start - j * TILE, rope_kv, tid);
				__syncthreads();
			}
		const uint8_t *ks = smem + (j % DECODE_STAGES) * L::STAGE_BYTES, *vs = ks + L::TILE_BYTES;
		const int t0 = start + j * TILE + slice * TOK;

		float s[GC][TOK];
#pragma unroll
		for (int t = 0; t < TOK; t++) {
			const int row = slice * TOK + t;
			const uint8_t *src = ks + (row * L::ROW_CHUNKS + L::swizzle(row, lane_byte / 16)) * 16 + lane_byte % 16;
			float k[V];
			if constexpr (F8)
				E4M3Load<V>::load(src, k);
			else
				VecLoad<T, V>::load(src, k);
#pragma unroll
			for (int g = 0; g < GC; g++) {
				float d = 0.f;
#pragma unroll
				for (int v = 0; v < V; v++) d = fmaf(q[g][v], k[v], d);
				s[g][t] = d;
			}
		}
		// Sum each dot product across the warp's lanes.
#pragma unroll
		for (int g = 0; g < GC; g++)
#pragma unroll
			for (int t = 0; t < TOK; t++) {
				float d = s[g][t];
#pragma unroll
				for (int o = 16; o > 0; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
				s[g][t] = t0 + t >= lo && t0 + t < end ? d : -INFINITY;
			}
#pragma unroll
		for (int g = 0; g < GC; g++) {
			float mx = s[g][0];
#pragma unroll
			for (int t = 1; t < TOK; t++) mx = fmaxf(mx, s[g][t]);
			float mn = fmaxf(m[g], mx);
			float mu = mn == -INFINITY ? 0.f : mn;
			float al = exp2f(m[g] - mu);
			m[g] = mn;
			float sum = 0.f;
#pragma unroll
			for (int t = 0; t < TOK; t++) {
				s[g][t] = exp2f(s[g][t] - mu);
				sum += s[g][t];
			}
			l[g] = l[g] * al + sum;
#pragma unroll
			for (int v = 0; v < V; v++) acc[g][v] *= al;
		}
#pragma unroll
		for (int t = 0; t < TOK; t++) {
			const int row = slice * TOK + t;
			const uint8_t *src = vs + (row * L::ROW_CHUNKS + L::swizzle(row, lane_byte / 16)) * 16 + lane_byte % 16;
			float x[V];
			if constexpr (F8) {
				E4M3Load<V>::load(src, x);
#pragma unroll
				for (int v = 0; v < V; v++) x[v] *= p.v_scale;
			} else {
				VecLoad<T, V>::load(src, x);
			}
#pragma unroll
			for (int g = 0; g < GC; g++)
#pragma unroll
				for (int v = 0; v < V; v++) acc[g][v] = fmaf(s[g][t], x[v], acc[g][v]);
		}
	}

	cp_async_wait<0>();
	__syncthreads();
	auto &ms = *reinterpret_cast<MergeSmem<D, GC, SLICES> *>(smem);
#pragma unroll
	for (int g = 0; g < GC; g++) {
		if (lane == 0) {
			ms.m[slice][g] = m[g];
			ms.l[slice][g] = l[g];
		}
#pragma unroll
		for (int v = 0; v < V; v++) ms.acc[slice][g][lane * V + v] = acc[g][v];
	}
	__syncthreads();
	merge_store<T, D, GC, SLICES, THREADS, SPLIT>(ms, p, seq, kvh, head0, heads, part, tid);
	if (SPLIT)
		splitk_finish<T, D, THREADS>(p, seq, ctx, kvh, y, p.num_kv_heads * chunks, head0, heads, part,
		                             reinterpret_cast<float *>(smem + sizeof(MergeSmem<D, GC, SLICES>)), tid);
}

template <typename T, int D, int GC, typename KV = T> constexpr int fma_smem_bytes() {
	using S = FmaShape<D, GC>;
	using L = TileLoader<KV, D, S::TILE, S::THREADS>;
	constexpr int pipe = DECODE_STAGES * L::STAGE_BYTES;
	constexpr int merge = (int)sizeof(MergeSmem<D, GC, S::SLICES>) + 128 * 4; // + merge_partials' scratch
	return pipe > merge ? pipe : merge;
}

// ---------------------------------------------------------------------------------------------------
// The persistent grouped program (mma path, one head tile: G <= 16; NARROW: the narrow tile, G <= 8).
// Grid: min(items, SMs × programs per SM) programs; items are the (sequence, KV head) pairs, KV head fastest, and program b takes items b,
// b + gridDim.x, … . Its tiles form one stream through the cp.async pipeline across item boundaries, so
// the pipeline never drains between items and no program pays a start (context length, block ids, the
// first tile's latency) per item. The issuing side walks a cursor over (item, tile) and records each
// stage's item, first token, end and first/last flags in shared memory for the computing side; an item's
// queries travel with its first tile (a Q slot per stage). At an item's last tile the warps merge their
// states through that tile's stage (free until the next issue after the loop-top barrier) and write the
// item's output.

struct PersistMeta {
	int seq, kvh, t0, lo, end, flags; // flags: 1 valid, 2 first tile of its item, 4 last tile of its item
};

template <typename T, int D> struct PersistShape {
	using S = MmaShape<D, 1>;
	using L = TileLoader<T, D, S::TILE, S::THREADS>;
	static constexpr int Q_BYTES = 16 * D * (int)sizeof(T);   // 16 query rows of one head tile
	static constexpr int STAGE = L::STAGE_BYTES + Q_BYTES;      // K, V, Q
	static constexpr int SMEM = DECODE_STAGES * STAGE;
	static constexpr int MAX_G = STAGE / (S::SLICES * (D + 4) * 4); // merge rows that fit a stage
	static_assert(MAX_G >= 16, "the merge of a full head tile fits one stage");
};

// PersistCursor walks one program's (item, tile) stream: an item's tiles run from its window's page
// (start; 0 without a window) to its context's end, keys before lo masked.
struct PersistCursor {
	int item, seq, kvh, t0, start, lo, end, next_end;
	const int *table;
	bool valid;
};

__device__ __forceinline__ void persist_enter(const DecodeParams &p, PersistCursor &c, int item, int nitems, int end) {
	c.item = item;
	c.valid = item < nitems;
	if (!c.valid) return;
	c.seq = item / p.num_kv_heads;
	c.kvh = item % p.num_kv_heads;
	c.lo = window_lo(p, end);
	c.start = (c.lo >> p.log2_block_size) << p.log2_block_size;
	c.t0 = c.start;
	c.end = end;
	c.table = p.block_tables + (long long)c.seq * p.max_blocks;
	const int nx = item + gridDim.x;
	c.next_end = nx < nitems ? p.context_lens[nx / p.num_kv_heads] : 0; // prefetched for the next item
}

template <typename T, int D, bool NARROW = false>
__device__ __forceinline__ void decode_mma_persistent(const DecodeParams &p) {
	using PS = PersistShape<T, D>;
	using S = typename PS::S;
	using L = typename PS::L;
	constexpr int TILE = S::TILE, THREADS = S::THREADS, SLICES = S::SLICES, STAGES = DECODE_STAGES;
	constexpr int KSTEPS = D / 16, NTILES = NARROW ? D / 16 : D / 8; // as in decode_mma
	static_assert(THREADS == 128, "one head tile");

	extern __shared__ __align__(128) uint8_t smem[];
	__shared__ int sids[STAGES][L::MAX_PAGES];
	__shared__ PersistMeta meta[STAGES];
	__shared__ float mm[SLICES][16], ml[SLICES][16];

	decode_pdl_enter();
	const uint64_t pf = copy_policy(p.flags);
	const int tid = threadIdx.x, lane = tid % DECODE_WARP, slice = tid / DECODE_WARP;
	const int lbs = p.log2_block_size;
	const int G = p.group;
	const int nitems = p.batch * p.num_kv_heads;
	const T *kc = reinterpret_cast<const T *>(p.k_cache);
	const T *vc = reinterpret_cast<const T *>(p.v_cache);
	const long long row_stride = (long long)p.num_kv_heads * D;

	PersistCursor c;
	{
		const int item = blockIdx.x;
		if (item >= nitems) return;
		persist_enter(p, c, item, nitems, p.context_lens[item / p.num_kv_heads]);
	}
	// issue_tile queues the cursor's tile into stage s (with the item's queries when it is its first
	// tile), records it in meta[s], and advances the cursor.
	auto issue_tile = [&](int s) {
		uint8_t *stage = smem + s * PS::STAGE;
		if (!c.valid) {
			if (tid == 0) meta[s].flags = 0;
			return;
		}
		L::issue(stage, sids[s], kc, vc, c.t0, c.end, lbs, row_stride, c.kvh, tid, pf);
		const bool first = c.t0 == c.start, last = c.t0 + TILE >= c.end;
		if (first) {
			constexpr int QCH = D * (int)sizeof(T) / 16; // 16-byte chunks per query row
			const uint8_t *qg = reinterpret_cast<const uint8_t *>(p.q) +
			                    ((long long)c.seq * p.num_heads + (long long)c.kvh * G) * D * (long long)sizeof(T);
			const uint32_t qs = smem_addr(stage + L::STAGE_BYTES);
			for (int i = tid; i < G * QCH; i += THREADS) cp_async16(qs + i * 16, qg + i * 16, true);
		}
		if (tid == 0) meta[s] = PersistMeta{c.seq, c.kvh, c.t0, c.lo, c.end, 1 | (first ? 2 : 0) | (last ? 4 : 0)};
		if (last) {
			persist_enter(p, c, c.item + gridDim.x, nitems, c.next_end);
		} else {
			c.t0 += TILE;
		}
	};
	auto cursor_id = [&]() { return c.valid ? L::load_id(c.table, c.t0, c.end, lbs, tid) : 0; };

	// Prologue: the first STAGES-1 tiles (their block ids read directly).
#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		int id = cursor_id();
		if (tid < L::MAX_PAGES) sids[s][tid] = id;
		__syncthreads();
		issue_tile(s);
		cp_async_commit();
	}
	int next_id = cursor_id();

	const int r0 = lane / 4, c0 = (lane % 4) * 2;
	const int mi = lane / 8, mr = lane % 8;
	uint32_t qa[KSTEPS][NARROW ? 2 : 4];
	float acc[NTILES][4];
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

	for (int j = 0;; j++) {
		if (tid < L::MAX_PAGES) sids[(j + STAGES - 1) % STAGES][tid] = next_id;
		cp_async_wait<STAGES - 2>();
		__syncthreads(); // tile j landed; tile j-1's stage is free (also after a merge in it); ids visible
		const PersistMeta mt = meta[j % STAGES];
		if (!(mt.flags & 1)) break;
		issue_tile((j + STAGES - 1) % STAGES);
		cp_async_commit();
		next_id = cursor_id();

		const uint8_t *stage = smem + (j % STAGES) * PS::STAGE;
		const uint32_t ks = smem_addr(stage), vs = ks + L::TILE_BYTES;
		if (mt.flags & 2) { // an item's first tile: its queries, fresh state
			const T *qsm = reinterpret_cast<const T *>(stage + L::STAGE_BYTES);
			const int h0 = r0, h1 = r0 + 8;
#pragma unroll
			for (int kk = 0; kk < KSTEPS; kk++) {
				int col = kk * 16 + c0;
				qa[kk][0] = h0 < G ? *reinterpret_cast<const uint32_t *>(qsm + h0 * D + col) : 0u;
				if constexpr (NARROW) {
					qa[kk][1] = h0 < G ? *reinterpret_cast<const uint32_t *>(qsm + h0 * D + col + 8) : 0u;
				} else {
					qa[kk][1] = h1 < G ? *reinterpret_cast<const uint32_t *>(qsm + h1 * D + col) : 0u;
					qa[kk][2] = h0 < G ? *reinterpret_cast<const uint32_t *>(qsm + h0 * D + col + 8) : 0u;
					qa[kk][3] = h1 < G ? *reinterpret_cast<const uint32_t *>(qsm + h1 * D + col + 8) : 0u;
				}
			}
#pragma unroll
			for (int n = 0; n < NTILES; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
			m0 = m1 = -INFINITY;
			l0 = l1 = 0.f;
		}
		const int t0 = mt.t0 + slice * 16, end = mt.end;

		if constexpr (NARROW)
			mma_tile_n8<T, D, L>(ks, vs, slice, mi, mr, r0, t0, mt.lo, end, p.scale_log2, qa, acc, m0, m1, l0, l1);
		else
			mma_tile<T, D, L>(ks, vs, slice, mi, mr, c0, t0, mt.lo, end, p.scale_log2, qa, acc, m0, m1, l0, l1);

		if (mt.flags & 4) { // the item's last tile: merge the warps' states through this stage, write out
			__syncthreads(); // every warp is done reading this stage's K and V
			float *ma = reinterpret_cast<float *>(smem + (j % STAGES) * PS::STAGE); // [SLICES][G][D+4]
			if constexpr (NARROW) {
				float L0 = l0, L1 = l1;
#pragma unroll
				for (int o = 4; o < 32; o *= 2) {
					L0 += __shfl_xor_sync(0xffffffffu, L0, o);
					L1 += __shfl_xor_sync(0xffffffffu, L1, o);
				}
				const int hA = c0, hB = c0 + 1; // accᵀ rows dt·16 + r0 (+8)
				if (r0 == 0) {
					mm[slice][hA] = m0;
					ml[slice][hA] = L0;
					mm[slice][hB] = m1;
					ml[slice][hB] = L1;
				}
				if (hA < G) {
#pragma unroll
					for (int dt = 0; dt < NTILES; dt++) {
						ma[(slice * G + hA) * (D + 4) + dt * 16 + r0] = acc[dt][0];
						ma[(slice * G + hA) * (D + 4) + dt * 16 + r0 + 8] = acc[dt][2];
					}
				}
				if (hB < G) {
#pragma unroll
					for (int dt = 0; dt < NTILES; dt++) {
						ma[(slice * G + hB) * (D + 4) + dt * 16 + r0] = acc[dt][1];
						ma[(slice * G + hB) * (D + 4) + dt * 16 + r0 + 8] = acc[dt][3];
					}
				}
			} else {
				float L0 = l0 + __shfl_xor_sync(0xffffffffu, l0, 1);
				L0 += __shfl_xor_sync(0xffffffffu, L0, 2);
				float L1 = l1 + __shfl_xor_sync(0xffffffffu, l1, 1);
				L1 += __shfl_xor_sync(0xffffffffu, L1, 2);
				const int rA = r0, rB = r0 + 8;
				if (lane % 4 == 0) {
					mm[slice][rA] = m0;
					ml[slice][rA] = L0;
					mm[slice][rB] = m1;
					ml[slice][rB] = L1;
				}
				if (rA < G) {
#pragma unroll
					for (int n = 0; n < NTILES; n++) {
						ma[(slice * G + rA) * (D + 4) + n * 8 + c0] = acc[n][0];
						ma[(slice * G + rA) * (D + 4) + n * 8 + c0 + 1] = acc[n][1];
					}
				}
				if (rB < G) {
#pragma unroll
					for (int n = 0; n < NTILES; n++) {
						ma[(slice * G + rB) * (D + 4) + n * 8 + c0] = acc[n][2];
						ma[(slice * G + rB) * (D + 4) + n * 8 + c0 + 1] = acc[n][3];
					}
				}
			}
			__syncthreads();
			for (int idx = tid; idx < G * D; idx += THREADS) {
				const int r = idx / D, d = idx % D;
				float mx = -INFINITY;
#pragma unroll
				for (int w = 0; w < SLICES; w++) mx = fmaxf(mx, mm[w][r]);
				const float mref = mx == -INFINITY ? 0.f : mx;
				float l = 0.f, a = 0.f;
#pragma unroll
				for (int w = 0; w < SLICES; w++) {
					const float wt = exp2f(mm[w][r] - mref);
					l += ml[w][r] * wt;
					a += ma[(w * G + r) * (D + 4) + d] * wt;
				}
				const long long o = ((long long)mt.seq * p.num_heads + (long long)mt.kvh * G + r) * D + d;
				reinterpret_cast<T *>(p.out)[o] = Elem<T>::from_float(a / l);
			}
			// The next loop-top barrier orders these reads before the stage is refilled.
		}
	}
	cp_async_wait<0>();
}

template <typename T, int D> constexpr int persistent_smem_bytes() { return PersistShape<T, D>::SMEM; }
