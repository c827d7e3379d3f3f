// The split-k (flash-decoding) decode-attention kernel and its reduce. The partition kernel's grid is
// (sequence, KV head, partition): each program walks partition_tokens tokens of one context exactly like
// the grouped kernel and leaves the partial state (m, l, acc) of every query head of its group. The
// reduce's grid is (sequence, query head), head_dim threads, merging a context's ceil(ctx/partition)
// partitions by log-sum-exp:  M = max m_p,  L = Σ l_p·2^(m_p−M),  out = Σ acc_p·2^(m_p−M) / L.
// A batch of one long sequence thus spreads over every SM instead of num_kv_heads of them.
// Launched by CUDAKernels.DecodeSplitK (decode_cuda.go); the CPU twin is DecodeSplitK (splitk.go).
//
// Entry points: DecodeSplitK_mma_<dtype>_d<head_dim>_m<MT>, DecodeSplitK_mma_<dtype>_d<head_dim>_n8 (groups
// up to 8 heads), DecodeSplitK_fma_<dtype>_d<head_dim>_g<GC>,
// DecodeSplitKReduce_<dtype>_d<head_dim>.
#include "decode.cuh"

// DECODE_SPLITK_MMA's entry point is named by its tile: m<MT> for MT head tiles of 16, n8 for the narrow
// tile (MT = 0, mma_tile_n8: groups of up to 8 heads).
#define DECODE_SPLITK_MMA(T, TN, D, MT, TILE_NAME)                                                            \
	extern "C" __global__ void __launch_bounds__(MmaShape<D, MT>::THREADS)                                  \
	    DecodeSplitK_mma_##TN##_d##D##_##TILE_NAME(const DecodeParams p) {                                  \
		decode_mma<T, D, MT, true>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeSplitK_mma_##TN##_d##D##_##TILE_NAME##_smem = mma_smem_bytes<T, D, MT>();
#define DECODE_SPLITK_FMA(T, TN, D, GC)                                                                       \
	extern "C" __global__ void __launch_bounds__(FmaShape<D, GC>::THREADS)                                  \
	    DecodeSplitK_fma_##TN##_d##D##_g##GC(const DecodeParams p) {                                        \
		decode_fma<T, D, GC, true>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeSplitK_fma_##TN##_d##D##_g##GC##_smem = fma_smem_bytes<T, D, GC>();

#define DECODE_SPLITK_ALL_MMA(T, TN, D)                                                                       \
	DECODE_SPLITK_MMA(T, TN, D, 1, m1)                                                                    \
	DECODE_SPLITK_MMA(T, TN, D, 2, m2) DECODE_SPLITK_MMA(T, TN, D, 4, m4) DECODE_SPLITK_MMA(T, TN, D, 0, n8)
#define DECODE_SPLITK_ALL_FMA(T, TN, D)                                                                       \
	DECODE_SPLITK_FMA(T, TN, D, 1)                                                                        \
	DECODE_SPLITK_FMA(T, TN, D, 2) DECODE_SPLITK_FMA(T, TN, D, 4) DECODE_SPLITK_FMA(T, TN, D, 8)

DECODE_SPLITK_ALL_MMA(__nv_bfloat16, bf16, 64)
DECODE_SPLITK_ALL_MMA(__nv_bfloat16, bf16, 128)
DECODE_SPLITK_ALL_MMA(__half, fp16, 64)
DECODE_SPLITK_ALL_MMA(__half, fp16, 128)

// head_dim 256 (Gemma 3), 16-bit dtypes: the narrow mma tile (groups of up to 8 heads) with two warp slices,
// a tile of 32 tokens, so that three stages of K and V (96 KiB) fit the shared memory of every GPU the fat
// binary targets; larger groups take the FMA kernels (the dispatcher's tile, dispatch.go).
#define DECODE_SPLITK_MMA_D256(T, TN)                                                                         \
	extern "C" __global__ void __launch_bounds__(MmaShape<256, 0, 2>::THREADS)                            \
	    DecodeSplitK_mma_##TN##_d256_n8(const DecodeParams p) {                                           \
		decode_mma<T, 256, 0, true, DECODE_STAGES, 2>(p);                                             \
	}                                                                                                     \
	extern "C" __device__ int DecodeSplitK_mma_##TN##_d256_n8_smem = mma_smem_bytes<T, 256, 0, DECODE_STAGES, 2>();
DECODE_SPLITK_MMA_D256(__nv_bfloat16, bf16)
DECODE_SPLITK_MMA_D256(__half, fp16)

DECODE_SPLITK_ALL_FMA(__nv_bfloat16, bf16, 64)
DECODE_SPLITK_ALL_FMA(__nv_bfloat16, bf16, 128)
DECODE_SPLITK_ALL_FMA(__half, fp16, 64)
DECODE_SPLITK_ALL_FMA(__half, fp16, 128)
DECODE_SPLITK_ALL_FMA(__nv_bfloat16, bf16, 256)
DECODE_SPLITK_ALL_FMA(__half, fp16, 256)
DECODE_SPLITK_ALL_FMA(float, fp32, 64)
DECODE_SPLITK_ALL_FMA(float, fp32, 128)

// FP8 KV pages (E4M3Code, model.KVCacheFP8) on the FMA path, 16-bit queries and output, one head chunk
// size (GC = 8: smaller groups mask the unused heads, larger ones loop): DecodeSplitK_fma_<dtype>_e4m3_d<head_dim>_g8.
// One size, not four, keeps the fat binary (embedded in every binary, carried to the GPU machine) small.
#define DECODE_SPLITK_FMA_E4M3(T, TN, D, GC)                                                                 \
	extern "C" __global__ void __launch_bounds__(FmaShape<D, GC>::THREADS)                                  \
	    DecodeSplitK_fma_##TN##_e4m3_d##D##_g##GC(const DecodeParams p) {                                  \
		decode_fma<T, D, GC, true, E4M3Code>(p);                                                     \
	}                                                                                                     \
	extern "C" __device__ int DecodeSplitK_fma_##TN##_e4m3_d##D##_g##GC##_smem = fma_smem_bytes<T, D, GC, E4M3Code>();

DECODE_SPLITK_FMA_E4M3(__nv_bfloat16, bf16, 64, 8)
DECODE_SPLITK_FMA_E4M3(__nv_bfloat16, bf16, 128, 8)
DECODE_SPLITK_FMA_E4M3(__nv_bfloat16, bf16, 256, 8)
DECODE_SPLITK_FMA_E4M3(__half, fp16, 64, 8)
DECODE_SPLITK_FMA_E4M3(__half, fp16, 128, 8)
DECODE_SPLITK_FMA_E4M3(__half, fp16, 256, 8)

// FP8 KV pages on the mma path, the narrow tile, head_dim 64 and 128: the stages hold the codes, which
// each lane converts to T in registers as it loads them (mma_tile_n8_f8): groups of up to 8 heads
// DecodeSplitK_mma_<dtype>_e4m3_d<head_dim>_n8, larger ones in chunks of 8 (a program a chunk, decode_mma's
// CHUNKED) DecodeSplitK_mma_<dtype>_e4m3_d<head_dim>_n8c.
#define DECODE_SPLITK_MMA_E4M3_ONE(T, TN, D, SUFFIX, CHUNKED)                                                \
	extern "C" __global__ void __launch_bounds__(MmaShape<D, 0>::THREADS)                                   \
	    DecodeSplitK_mma_##TN##_e4m3_d##D##_##SUFFIX(const DecodeParams p) {                                \
		decode_mma<T, D, 0, true, DECODE_STAGES, 4, E4M3Code, CHUNKED>(p);                               \
	}                                                                                                     \
	extern "C" __device__ int DecodeSplitK_mma_##TN##_e4m3_d##D##_##SUFFIX##_smem =                           \
	    mma_smem_bytes<T, D, 0, DECODE_STAGES, 4, E4M3Code>();
#define DECODE_SPLITK_MMA_E4M3(T, TN, D) DECODE_SPLITK_MMA_E4M3_ONE(T, TN, D, n8, false) DECODE_SPLITK_MMA_E4M3_ONE(T, TN, D, n8c, true)
DECODE_SPLITK_MMA_E4M3(__nv_bfloat16, bf16, 64)
DECODE_SPLITK_MMA_E4M3(__nv_bfloat16, bf16, 128)
DECODE_SPLITK_MMA_E4M3(__half, fp16, 64)
DECODE_SPLITK_MMA_E4M3(__half, fp16, 128)

// splitk_reduce: one program per (sequence, query head), thread d owns output element d.
template <typename T, int D> __device__ __forceinline__ void splitk_reduce(const DecodeParams &p) {
	decode_pdl_enter();
	const int seq = blockIdx.x, hq = blockIdx.y, d = threadIdx.x;
	const int kvh = hq / p.group, head = hq % p.group;
	const int ctx = p.context_lens[seq];
	const int span = ctx - window_base(p, ctx); // the tokens the partitions cover
	const PartialRun run = {p.part_m, p.part_l, p.part_acc,
	                        (((long long)seq * p.num_kv_heads + kvh) * p.num_partitions) * p.group + head, p.group,
	                        (span + p.partition_tokens - 1) / p.partition_tokens};
	float l = 0.f, a = 0.f;
	const float mx = run_max(run, -INFINITY);
	run_sum<D>(run, mx, d, l, a);
	reinterpret_cast<T *>(p.out)[((long long)seq * p.num_heads + hq) * D + d] = Elem<T>::from_float(a / l);
}

#define DECODE_SPLITK_REDUCE(T, TN, D)                                                                        \
	extern "C" __global__ void __launch_bounds__(D) DecodeSplitKReduce_##TN##_d##D(const DecodeParams p) {    \
		splitk_reduce<T, D>(p);                                                                           \
	}

DECODE_SPLITK_REDUCE(__nv_bfloat16, bf16, 64)
DECODE_SPLITK_REDUCE(__nv_bfloat16, bf16, 128)
DECODE_SPLITK_REDUCE(__half, fp16, 64)
DECODE_SPLITK_REDUCE(__half, fp16, 128)
DECODE_SPLITK_REDUCE(float, fp32, 64)
DECODE_SPLITK_REDUCE(float, fp32, 128)
DECODE_SPLITK_REDUCE(__nv_bfloat16, bf16, 256)
DECODE_SPLITK_REDUCE(__half, fp16, 256)
