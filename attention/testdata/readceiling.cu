// readceiling.cu: the read-only kernel of BenchmarkCUDAReadCeiling (decode_cuda_bench_test.go). It reads
// every page of a decode call's K and V pools through the call's block table and does nothing with the
// bytes but fold them into one word. gollm_read_pages reads whole pages (all KV heads of the page,
// contiguous in the pool) at a time: the fastest any kernel can read those bytes in that placement, with
// no attention arithmetic, no per-(sequence, head) program structure and no merge. gollm_read_heads reads
// them the way the decode kernels do, one program per (KV head, sequence) walking its head's rows of the
// sequence's pages, 8 or 16 pages' rows of K and V at a time (32 or 64 KB in flight a program at
// head_dim 128; a decode program has up to two 32 KB tiles in flight). Regenerate the PTX beside it (the benchmark loads
// it through the driver) with:
//
//	nvcc -ptx -arch=compute_90 -O3 -o readceiling.ptx readceiling.cu
#include <stdint.h>

__device__ __forceinline__ uint4 load_stream(const uint4 *p) {
	uint4 r;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
		     : "l"(p));
	return r;
}

// ReadParams is the kernel's one parameter (cuda.Launch passes a Go struct of the same layout).
struct ReadParams {
	const uint4 *k, *v;
	const int *table;
	int pages, pageVecs;
	unsigned *out;
};

// gollm_read_pages: program b reads pages b, b + gridDim.x, … of the block table (pages entries), each
// page pageVecs 16-byte vectors of K at k + table[i]·pageVecs and as many of V; UNROLL loads of each
// pool in flight per thread. out gets one word only if the fold hits a value random data never gives, so
// that the loads are not optimised away.
#define UNROLL 4
extern "C" __global__ void __launch_bounds__(512) gollm_read_pages(const ReadParams p) {
	const uint4 *__restrict__ k = p.k;
	const uint4 *__restrict__ v = p.v;
	const int *__restrict__ table = p.table;
	const int pages = p.pages, pageVecs = p.pageVecs;
	uint32_t fold = 0;
	for (int i = blockIdx.x; i < pages; i += gridDim.x) {
		const long base = (long)table[i] * pageVecs;
		const uint4 *kp = k + base, *vp = v + base;
		for (int j = threadIdx.x; j < pageVecs; j += UNROLL * blockDim.x) {
			uint4 a[UNROLL], b[UNROLL];
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				const int o = j + u * blockDim.x;
				if (o < pageVecs) {
					a[u] = load_stream(kp + o);
					b[u] = load_stream(vp + o);
				} else {
					a[u] = b[u] = make_uint4(0, 0, 0, 0);
				}
			}
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				fold ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
		}
	}
	if (fold == 0x9e3779b9u)
		p.out[0] = fold;
}

// HeadParams is the gollm_read_heads kernels' parameter.
struct HeadParams {
	const uint4 *k, *v;
	const int *table; // [batch][max_blocks], every sequence max_blocks full pages
	int maxBlocks;
	int rowStride; // 16-byte vectors between consecutive token rows (kv_heads · head_dim · elem / 16)
	int rowVecs;   // 16-byte vectors of one head's row (head_dim · elem / 16)
	int lbs;       // log2 of the page size
	unsigned *out;
};

// read_heads: grid (kv_heads, batch), 128 threads; program (h, s) reads head h's rows of the pages of
// sequence s (256-byte pieces kv_heads · 256 bytes apart at head_dim 128), PAGES pages at a time, all
// their loads issued before any is used.
template <int PAGES> __device__ __forceinline__ void read_heads(const HeadParams &p) {
	const int h = blockIdx.x, s = blockIdx.y;
	const int *__restrict__ table = p.table + (long)s * p.maxBlocks;
	const int bs = 1 << p.lbs, pageVecs = bs * p.rowVecs;
	uint32_t fold = 0;
	for (int pg = 0; pg < p.maxBlocks; pg += PAGES) {
		int ids[PAGES];
#pragma unroll
		for (int u = 0; u < PAGES; u++) ids[u] = pg + u < p.maxBlocks ? table[pg + u] : -1;
		for (int e = threadIdx.x; e < pageVecs; e += blockDim.x) {
			const int row = e / p.rowVecs, c = e - row * p.rowVecs;
			uint4 a[PAGES], b[PAGES];
#pragma unroll
			for (int u = 0; u < PAGES; u++) {
				if (ids[u] >= 0) {
					const long off = ((long)ids[u] * bs + row) * p.rowStride + (long)h * p.rowVecs + c;
					a[u] = load_stream(p.k + off);
					b[u] = load_stream(p.v + off);
				} else {
					a[u] = b[u] = make_uint4(0, 0, 0, 0);
				}
			}
#pragma unroll
			for (int u = 0; u < PAGES; u++)
				fold ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
		}
	}
	if (fold == 0x9e3779b9u)
		p.out[0] = fold;
}

extern "C" __global__ void __launch_bounds__(128) gollm_read_heads(const HeadParams p) { read_heads<8>(p); }
extern "C" __global__ void __launch_bounds__(128) gollm_read_heads16(const HeadParams p) { read_heads<16>(p); }
