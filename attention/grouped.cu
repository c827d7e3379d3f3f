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

#define DECODE_GROUPED_MMA(T, TN, D, MT)                                                                      \
	extern "C" __global__ void __launch_bounds__(MmaShape<D, MT>::THREADS)                                  \
	    DecodeGrouped_mma_##TN##_d##D##_m##MT(const DecodeParams p) {                                       \
		decode_mma<T, D, MT, false>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_mma_##TN##_d##D##_m##MT##_smem = mma_smem_bytes<T, D, MT>();
#define DECODE_GROUPED_FMA(T, TN, D, GC)                                                                      \
	extern "C" __global__ void __launch_bounds__(FmaShape<D, GC>::THREADS)                                  \
	    DecodeGrouped_fma_##TN##_d##D##_g##GC(const DecodeParams p) {                                       \
		decode_fma<T, D, GC, false>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_fma_##TN##_d##D##_g##GC##_smem = fma_smem_bytes<T, D, GC>();

// The narrow tile (MT = 0, mma_tile_n8): groups of up to 8 heads (narrowTile in decode_cuda.go). Entry
// points DecodeGrouped_mma_<dtype>_d<head_dim>_n8.
#define DECODE_GROUPED_NARROW(T, TN, D)                                                                      \
	extern "C" __global__ void __launch_bounds__(MmaShape<D, 0>::THREADS)                                  \
	    DecodeGrouped_mma_##TN##_d##D##_n8(const DecodeParams p) {                                       \
		decode_mma<T, D, 0, false>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeGrouped_mma_##TN##_d##D##_n8_smem = mma_smem_bytes<T, D, 0>();

#define DECODE_GROUPED_ALL_MMA(T, TN, D)                                                                      \
	DECODE_GROUPED_MMA(T, TN, D, 1) DECODE_GROUPED_MMA(T, TN, D, 2) DECODE_GROUPED_MMA(T, TN, D, 4)
#define DECODE_GROUPED_ALL_FMA(T, TN, D)                                                                      \
	DECODE_GROUPED_FMA(T, TN, D, 1)                                                                       \
	DECODE_GROUPED_FMA(T, TN, D, 2) DECODE_GROUPED_FMA(T, TN, D, 4) DECODE_GROUPED_FMA(T, TN, D, 8)

DECODE_GROUPED_ALL_MMA(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_ALL_MMA(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_ALL_MMA(__half, fp16, 64)
DECODE_GROUPED_ALL_MMA(__half, fp16, 128)
DECODE_GROUPED_NARROW(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_NARROW(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_NARROW(__half, fp16, 64)
DECODE_GROUPED_NARROW(__half, fp16, 128)

DECODE_GROUPED_ALL_FMA(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_ALL_FMA(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_ALL_FMA(__half, fp16, 64)
DECODE_GROUPED_ALL_FMA(__half, fp16, 128)
DECODE_GROUPED_ALL_FMA(float, fp32, 64)
DECODE_GROUPED_ALL_FMA(float, fp32, 128)

// The persistent grouped kernel (decode_mma_persistent): grid min(items, SMs × programs per SM), groups
// of up to 16 heads (up to 8 on the narrow tile). Entry points DecodeGroupedPersistent_mma_<dtype>_d<head_dim>
// and DecodeGroupedPersistent_mma_<dtype>_d<head_dim>_n8.
#define DECODE_GROUPED_PERSISTENT(T, TN, D)                                                                   \
	extern "C" __global__ void __launch_bounds__(128) DecodeGroupedPersistent_mma_##TN##_d##D(const DecodeParams p) { \
		decode_mma_persistent<T, D>(p);                                                                 \
	}                                                                                                     \
	extern "C" __device__ int DecodeGroupedPersistent_mma_##TN##_d##D##_smem = persistent_smem_bytes<T, D>();
#define DECODE_GROUPED_PERSISTENT_NARROW(T, TN, D)                                                            \
	extern "C" __global__ void __launch_bounds__(128) DecodeGroupedPersistent_mma_##TN##_d##D##_n8(const DecodeParams p) { \
		decode_mma_persistent<T, D, true>(p);                                                           \
	}                                                                                                     \
	extern "C" __device__ int DecodeGroupedPersistent_mma_##TN##_d##D##_n8_smem = persistent_smem_bytes<T, D>();

DECODE_GROUPED_PERSISTENT(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_PERSISTENT(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_PERSISTENT(__half, fp16, 64)
DECODE_GROUPED_PERSISTENT(__half, fp16, 128)
DECODE_GROUPED_PERSISTENT_NARROW(__nv_bfloat16, bf16, 64)
DECODE_GROUPED_PERSISTENT_NARROW(__nv_bfloat16, bf16, 128)
DECODE_GROUPED_PERSISTENT_NARROW(__half, fp16, 64)
DECODE_GROUPED_PERSISTENT_NARROW(__half, fp16, 128)
