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
// position 0 to its last row's position in tiles of PREFILL_TILE tokens: each tile's K and V rows are
// read once through the block table (converted to float into shared memory) and serve every vector of
// the program, which is what makes GQA cheap (a group's heads share the read). Per tile, each thread of a
// vector's pair scores half the tile's keys (masked causally by the row's position), the pair agrees on
// the running max with a shuffle, rescales its half of the float accumulator (D/2 registers) and adds
// P·V. Scores, max and sums are float (IEEE expf and division), so float32 caches stay float32 end to end.
//
// Shared memory (dynamic): q [64][D+1], K [32][D+1], V [32][D], P [64][33] floats (74 KB at D = 128);
// the +1 pads keep the pair-strided reads of q and K conflict-free. Head sizes 8 to 128 (every LLaMA). Not tuned for speed: prefill is
// compute-light next to the matmuls around it; decode steps with a head size the decode kernels cover
// go to those.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define PREFILL_THREADS 128
#define PREFILL_VECTORS 64
#define PREFILL_TILE 32

struct PrefillParams {
	void *out;                // [rows][num_heads·head_dim] of T
	const void *q;            // [rows][num_heads·head_dim] of T (rotated)
	const void *k_cache;      // [num_blocks][block_size][num_kv_heads][head_dim] of T
	const void *v_cache;
	const int *block_tables;  // [seqs][max_blocks]
	const int *positions;     // [rows]
	const int *items;         // [num_items][4]: seq, first row, rows, first head of the group
	float scale;
	int num_heads;
	int num_kv_heads;
	int max_blocks;
	int block_size;
	int group;
	int heads_per_item;
};

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

// prefill_smem_floats is the dynamic shared memory of one program, in floats.
__host__ __device__ constexpr int prefill_smem_floats(int d) {
	return PREFILL_VECTORS * (d + 1) + PREFILL_TILE * (d + 1) + PREFILL_TILE * d + PREFILL_VECTORS * (PREFILL_TILE + 1);
}

template <typename T, int D> __device__ __forceinline__ void prefill_attention(const PrefillParams &p) {
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
	// The keys this program needs: positions [0, last row's position].
	const int key_end = p.positions[row0 + nrows - 1] + 1;
	const int *table = p.block_tables + (long long)seq * p.max_blocks;
	const T *kc = reinterpret_cast<const T *>(p.k_cache);
	const T *vc = reinterpret_cast<const T *>(p.v_cache);
	const long long kv_row = (long long)p.num_kv_heads * D;

	float acc[HALF];
#pragma unroll
	for (int i = 0; i < HALF; i++) acc[i] = 0.f;
	float m = -INFINITY, l = 0.f;

	for (int t0 = 0; t0 < key_end; t0 += PREFILL_TILE) {
		__syncthreads(); // the previous tile's K/V (and the q fill) are done with
		for (int idx = tid; idx < PREFILL_TILE * D; idx += PREFILL_THREADS) {
			const int kk = idx / D, d = idx - kk * D;
			const int key = t0 + kk;
			float kx = 0.f, vx = 0.f;
			if (key < key_end) {
				const long long slot = (long long)table[key / p.block_size] * p.block_size + key % p.block_size;
				const long long at = slot * kv_row + (long long)kvh * D + d;
				kx = PrefillElem<T>::load(kc[at]);
				vx = PrefillElem<T>::load(vc[at]);
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
			if (t0 + part * KEYS + j > pos) s[j] = -INFINITY;
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

#define PREFILL_ATTENTION(T, TN, D)                                                                           \
	extern "C" __global__ void __launch_bounds__(PREFILL_THREADS) PrefillAttention_##TN##_d##D(const PrefillParams p) { \
		prefill_attention<T, D>(p);                                                                       \
	}
#define PREFILL_ATTENTION_ALL(T, TN)                                                                          \
	PREFILL_ATTENTION(T, TN, 8)                                                                           \
	PREFILL_ATTENTION(T, TN, 16)                                                                          \
	PREFILL_ATTENTION(T, TN, 32)                                                                          \
	PREFILL_ATTENTION(T, TN, 64)                                                                          \
	PREFILL_ATTENTION(T, TN, 128)

PREFILL_ATTENTION_ALL(float, f32)
PREFILL_ATTENTION_ALL(__nv_bfloat16, bf16)
PREFILL_ATTENTION_ALL(__half, f16)
