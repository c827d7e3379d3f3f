// Hopper (sm_90a) helpers of the kernels compiled by the PTX route (gemm_sm90.cu,
// ../../attention/prefill_sm90.cu): mbarriers in shared memory and the wgmma group fences. Needs PTX ISA
// 8.0; build.sh's compile_sm90 raises the version nvcc 11.8 writes.
#pragma once
#include <stdint.h>

// TmaDesc is a CUtensorMap (cuda.h of CUDA 12; 11.8 has none): 128 opaque bytes, 64-byte aligned, encoded
// on the host (cuda.Device.EncodeTiled) and passed in a __grid_constant__ parameter.
struct __align__(64) TmaDesc {
	unsigned long long v[16];
};

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
	asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, unsigned bytes) {
	asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
	asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
	asm volatile("{\n\t.reg .pred p;\n"
	             "GB_WAIT:\n\t"
	             "mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n\t"
	             "@!p bra GB_WAIT;\n}" ::"r"(bar),
	             "r"(parity)
	             : "memory");
}
// wgmma_fence orders the warpgroup's register and shared-memory writes before the wgmma products that
// follow; wgmma_commit closes a group of issued products; wgmma_wait0 waits for every group to land.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
