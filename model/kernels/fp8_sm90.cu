// The FP8 product at up to 64 token rows on Hopper with the tensor cores' own e4m3 instruction,
// mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32: fp8.cu's MatMulE4M3_nt1 with no conversion at all. There
// the f16 conversions of the weight codes (one instruction for two codes, sixteen a lane per k-block)
// hold the product below the copy bandwidth: the stream waits on issue, not on memory. nvcc 11.8 does
// not know the e4m3 mma (PTX ISA 8.4), so build.sh compiles this file to PTX for compute_90, raises the
// PTX's version, and the driver compiles it at load, as for gemm_sm90.cu; a device or driver that cannot
// load it keeps MatMulE4M3_nt1.
//
// Fragments: a lane's 16 codes of weight rows lo and hi and of its token row, as four 4-code words each
// (fp8.cuh's layout), feed two mma of 32 columns: words 0 and 1 are logical k 4c..4c+3 and 16+4c..16+4c+3
// of the first (A registers a0 = row lo's word 0, a1 = row hi's, a2, a3 the same for word 1; B b0, b1 the
// token row's words 0 and 1), words 2 and 3 the second, A and B alike, so each mma sums 32 distinct
// columns. Products of two e4m3 values are exact; the tensor cores add the 32 of one mma with a limited
// alignment precision (about 13 fraction bits of the largest, as for cuBLASLt's e4m3 GEMM), so each
// k-block's two mma accumulate into a fresh register tile that is then added in float32 to the lane's
// sums (DeepSeek-V3's promotion, at 64 columns): the error stays within that of one 64-term partial sum,
// which TestCUDAFP8MatMul bounds by cuda.LtE4M3Tolerance of Σ|terms|.
#include "fp8.cuh"

struct E4M3Mma {
	static constexpr bool x16_one_tile = false;
	template <int NT, bool X16>
	static __device__ __forceinline__ void run(float (&acc)[NT][4], const uint4 &wl, const uint4 &wh,
	                                           const uint4 (&xv)[NT][1]) {
#pragma unroll
		for (int j = 0; j < NT; j++) {
			float t[4] = {0.f, 0.f, 0.f, 0.f};
			mma(t, wl.x, wh.x, wl.y, wh.y, xv[j][0].x, xv[j][0].y);
			mma(t, wl.z, wh.z, wl.w, wh.w, xv[j][0].z, xv[j][0].w);
#pragma unroll
			for (int e = 0; e < 4; e++) acc[j][e] += t[e];
		}
	}
	static __device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
	                                           uint32_t b0, uint32_t b1) {
		asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		             "{%0,%1,%2,%3};"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
	}
};

// One token tile: three blocks an SM, as fp8.cu's MatMulE4M3_nt1; 2-8 tiles (9-64 rows) with fp8.cu's
// unrolling for the same tiles, their inputs e4m3 codes as the weights' (no f16 conversion anywhere).
extern "C" __global__ void __launch_bounds__(256, 3) MatMulE4M3mma_nt1(const MatMulE4M3Params p) {
	matmul_e4m3<1, 4, E4M3Mma>(p);
}
#define FP8_MMA(NT, U)                                                                                        \
	extern "C" __global__ void __launch_bounds__(256) MatMulE4M3mma_nt##NT(const MatMulE4M3Params p) {     \
		matmul_e4m3<NT, U, E4M3Mma>(p);                                                                    \
	}
FP8_MMA(2, 4)
FP8_MMA(4, 2)
FP8_MMA(8, 1)
