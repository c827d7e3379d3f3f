// The grouped decode-attention kernel: grid (sequence, KV head) — (sequence, KV head × head chunk) on the
// FMA path — each program walking its whole context once and serving every query head of the group from
// that one read of K and V. Launched by CUDAKernels.DecodeGrouped (decode_cuda.go); the algorithm and the
// tile machinery are in decode.cuh; the CPU twin is DecodeGrouped (grouped.go).
//
// Entry points: DecodeGrouped_mma_<dtype>_d<head_dim>_m<MT> (bf16/fp16, groups up to 16·MT heads),
// DecodeGrouped_mma_<dtype>_d<head_dim>_n8 (the narrow tile, groups up to 8 heads),
// DecodeGrouped_fma_<dtype>_d<head_dim>_g<GC> (any dtype, GC heads per program) and
// DecodeGroupedPersistent_mma_<dtype>_d<head_dim> and DecodeGroupedPersistent_mma_<dtype>_d<head_dim>_n8 (below).
#include "decode.cuh"

// DECODE_GROUPED_MMA's entry point is named by its tile: m<MT> for MT head tiles of 16, n8 for the narrow
// tile (MT = 0, mma_tile_n8: groups of up to 8 heads, narrowTile in decode_cuda.go).
#define DECODE_GROUPED_MMA(T, TN, D, MT, TILE_NAME)                                                           \
	extern "C" __global__ void __launch_bounds__(MmaShape<D, MT>::THREADS)                                  \
	    DecodeGrouped_mma_##TN##_d##D##_##TILE_NAME(const DecodeParams p) {                                 \
		decode_mma<T, D, MT, false>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_mma_##TN##_d##D##_##TILE_NAME##_smem = mma_smem_bytes<T, D, MT>();
#define DECODE_GROUPED_FMA(T, TN, D, GC)                                                                      \
	extern "C" __global__ void __launch_bounds__(FmaShape<D, GC>::THREADS)                                  \
	    DecodeGrouped_fma_##TN##_d##D##_g##GC(const DecodeParams p) {                                       \
		decode_fma<T, D, GC, false>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_fma_##TN##_d##D##_g##GC##_smem = fma_smem_bytes<T, D, GC>();

#define DECODE_GROUPED_ALL_MMA(T, TN, D)                                                                      \
	DECODE_GROUPED_MMA(T, TN, D, 1, m1)                                                                   \
	DECODE_GROUPED_MMA(T, TN, D, 2, m2) DECODE_GROUPED_MMA(T, TN, D, 4, m4) DECODE_GROUPED_MMA(T, TN, D, 0, n8)
#define DECODE_GROUPED_ALL_FMA(T, TN, D)                                                                      \
	DECODE_GROUPED_FMA(T, TN, D, 1)                                                                       \
	DECODE_GROUPED_FMA(T, TN, D, 2) DECODE_GROUPED_FMA(T, TN, D, 4) DECODE_GROUPED_FMA(T, TN, D, 8)

DECODE_GROUPED_ALL_MMA(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_ALL_MMA(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_ALL_MMA(__half, fp16, 64)
DECODE_GROUPED_ALL_MMA(__half, fp16, 128)

// head_dim 256 (Gemma 3), 16-bit dtypes: the narrow mma tile (groups of up to 8 heads) with two warp slices,
// a tile of 32 tokens, so that three stages of K and V (96 KiB) fit the shared memory of every GPU the fat
// binary targets; larger groups take the FMA kernels (the dispatcher's tile, dispatch.go).
#define DECODE_GROUPED_MMA_D256(T, TN)                                                                        \
	extern "C" __global__ void __launch_bounds__(MmaShape<256, 0, 2>::THREADS)                            \
	    DecodeGrouped_mma_##TN##_d256_n8(const DecodeParams p) {                                          \
		decode_mma<T, 256, 0, false, DECODE_STAGES, 2>(p);                                            \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_mma_##TN##_d256_n8_smem = mma_smem_bytes<T, 256, 0, DECODE_STAGES, 2>();
DECODE_GROUPED_MMA_D256(__nv_bfloat16, bf16)
DECODE_GROUPED_MMA_D256(__half, fp16)

DECODE_GROUPED_ALL_FMA(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_ALL_FMA(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_ALL_FMA(__half, fp16, 64)
DECODE_GROUPED_ALL_FMA(__half, fp16, 128)
DECODE_GROUPED_ALL_FMA(__nv_bfloat16, bf16, 256)
DECODE_GROUPED_ALL_FMA(__half, fp16, 256)
DECODE_GROUPED_ALL_FMA(float, fp32, 64)
DECODE_GROUPED_ALL_FMA(float, fp32, 128)

// FP8 KV pages (E4M3Code, model.KVCacheFP8) on the FMA path, 16-bit queries and output, one head chunk
// size (GC = 8: smaller groups mask the unused heads, larger ones loop): DecodeGrouped_fma_<dtype>_e4m3_d<head_dim>_g8.
// One size, not four, keeps the fat binary (embedded in every binary, carried to the GPU machine) small.
#define DECODE_GROUPED_FMA_E4M3(T, TN, D, GC)                                                                 \
	extern "C" __global__ void __launch_bounds__(FmaShape<D, GC>::THREADS)                                  \
	    DecodeGrouped_fma_##TN##_e4m3_d##D##_g##GC(const DecodeParams p) {                                  \
		decode_fma<T, D, GC, false, E4M3Code>(p);                                                     \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_fma_##TN##_e4m3_d##D##_g##GC##_smem = fma_smem_bytes<T, D, GC, E4M3Code>();

DECODE_GROUPED_FMA_E4M3(__nv_bfloat16, bf16, 64, 8)
DECODE_GROUPED_FMA_E4M3(__nv_bfloat16, bf16, 128, 8)
DECODE_GROUPED_FMA_E4M3(__nv_bfloat16, bf16, 256, 8)
DECODE_GROUPED_FMA_E4M3(__half, fp16, 64, 8)
DECODE_GROUPED_FMA_E4M3(__half, fp16, 128, 8)
DECODE_GROUPED_FMA_E4M3(__half, fp16, 256, 8)

// FP8 KV pages on the mma path, the narrow tile, head_dim 64 and 128: the stages hold the codes, which
// each lane converts to T in registers as it loads them (mma_tile_n8_f8): groups of up to 8 heads
// DecodeGrouped_mma_<dtype>_e4m3_d<head_dim>_n8, larger ones in chunks of 8 (a program a chunk, decode_mma's
// CHUNKED) DecodeGrouped_mma_<dtype>_e4m3_d<head_dim>_n8c.
#define DECODE_GROUPED_MMA_E4M3_ONE(T, TN, D, SUFFIX, CHUNKED)                                                \
	extern "C" __global__ void __launch_bounds__(MmaShape<D, 0>::THREADS)                                   \
	    DecodeGrouped_mma_##TN##_e4m3_d##D##_##SUFFIX(const DecodeParams p) {                                \
		decode_mma<T, D, 0, false, DECODE_STAGES, 4, E4M3Code, CHUNKED>(p);                               \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_mma_##TN##_e4m3_d##D##_##SUFFIX##_smem =                           \
	    mma_smem_bytes<T, D, 0, DECODE_STAGES, 4, E4M3Code>();
#define DECODE_GROUPED_MMA_E4M3(T, TN, D) DECODE_GROUPED_MMA_E4M3_ONE(T, TN, D, n8, false) DECODE_GROUPED_MMA_E4M3_ONE(T, TN, D, n8c, true)
DECODE_GROUPED_MMA_E4M3(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_MMA_E4M3(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_MMA_E4M3(__half, fp16, 64)
DECODE_GROUPED_MMA_E4M3(__half, fp16, 128)

// The persistent grouped kernel (decode_mma_persistent): grid min(items, SMs × programs per SM), groups
// of up to 16 heads (up to 8 on the narrow tile). Entry points DecodeGroupedPersistent_mma_<dtype>_d<head_dim>
// and DecodeGroupedPersistent_mma_<dtype>_d<head_dim>_n8.
// SUFFIX is empty for the 16-row tile and _n8 for the narrow one (NARROW).
#define DECODE_GROUPED_PERSISTENT(T, TN, D, NARROW, SUFFIX)                                                   \
	extern "C" __global__ void __launch_bounds__(128) DecodeGroupedPersistent_mma_##TN##_d##D##SUFFIX(const DecodeParams p) { \
		decode_mma_persistent<T, D, NARROW>(p);                                                         \
	}                                                                                                     \
	extern "C" __device__ int DecodeGroupedPersistent_mma_##TN##_d##D##SUFFIX##_smem = persistent_smem_bytes<T, D>();
#define DECODE_GROUPED_PERSISTENT_BOTH(T, TN, D)                                                              \
	DECODE_GROUPED_PERSISTENT(T, TN, D, false, ) DECODE_GROUPED_PERSISTENT(T, TN, D, true, _n8)

DECODE_GROUPED_PERSISTENT_BOTH(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_PERSISTENT_BOTH(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_PERSISTENT_BOTH(__half, fp16, 64)
DECODE_GROUPED_PERSISTENT_BOTH(__half, fp16, 128)
