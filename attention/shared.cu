// Shared-prefix (cascade) decode attention: the kernels it adds to the split-k kernels it runs for the
// suffixes. A step's groups of sequences that share their first pages are packed into virtual sequences
// of up to `members` members each (SharedLayout, shared.go), whose query rows of KV head h are the
// members' G heads of h one after another (members·G rows: 128 at G = 4 and 32 members). The prefix pass
// is a prefix kernel (SharedPrefixR16 or SharedPrefix, below; the split-k partition kernel run on the
// virtual sequences for the shapes they do not cover), which reads a partition of the shared pages once
// for all those rows; the suffix pass is the split-k partition kernel run on every sequence's own pages
// (block tables from the end of its shared prefix); the merge combines a sequence's prefix and suffix
// partials by log-sum-exp, as the split-k reduce does (a warp a query head: shared_merge). Launched by
// CUDAKernels.DecodeShared (shared_cuda.go); the CPU twin is DecodeShared (shared.go).
//
//   SharedGather:             grid (virtual·members), up to num_heads·row_bytes/16 threads: the virtual
//                             sequences' queries, [virtual][num_kv_heads][members][G][head_dim], copied
//                             16 bytes a thread from q [batch][num_heads][head_dim], a member's row a
//                             block.
//   SharedMerge_<dtype>_d<D>: grid (batch, ⌈num_heads/4⌉), 128 threads: a warp merges one query head's
//                             prefix partials (when its sequence is in a group) and suffix partials
//                             and writes the normalised output (shared_merge, below).
// Both are a few hundred KiB of traffic against the megabytes of K/V the passes stream.
#include "decode.cuh"

// SharedParams is the one by-value parameter of the kernels here; shared_cuda.go mirrors it field by
// field (sharedParams). Pointers first, then 4-byte fields.
struct SharedParams {
	void *out;                 // [batch][num_heads][D] (merge)
	const void *q;             // [batch][num_heads][D] (gather)
	void *vq;                  // [virtual][num_kv_heads][members][G][D] (gather's output)
	const int *virtual_seqs;   // [virtual][members]: decode index of each member slot
	const int *seq_slot;       // [batch]: v·members + slot, or −1 (no group)
	const int *virtual_lens;   // [virtual]: shared tokens
	const int *suffix_lens;    // [batch]: tokens from the end of the shared prefix
	const float *pre_m;        // prefix partials [virtual][num_kv_heads][prefix_partitions][members·G]
	const float *pre_l;
	const float *pre_acc;      // … [members·G][D]
	const float *suf_m;        // suffix partials [batch][num_kv_heads][suffix_partitions][G]
	const float *suf_l;
	const float *suf_acc;      // … [G][D]
	int num_heads;
	int num_kv_heads;
	int group;                 // G
	int members;
	int row_bytes;             // D · sizeof(T)
	int prefix_partition_tokens;
	int prefix_partitions;
	int suffix_partition_tokens;
	int suffix_partitions;
};

extern "C" __global__ void SharedGather(const SharedParams p) {
	const int vm = blockIdx.x;
	const int v = vm / p.members, m = vm % p.members;
	const int n = p.row_bytes / 16;
	const uint4 *s = reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(p.q) +
	                                                 (long long)p.virtual_seqs[vm] * p.num_heads * p.row_bytes);
	uint4 *d = reinterpret_cast<uint4 *>(p.vq);
	for (int i = threadIdx.x; i < p.num_heads * n; i += blockDim.x) {
		const int hq = i / n, kvh = hq / p.group, head = hq % p.group;
		const long long dst = (((long long)v * p.num_kv_heads + kvh) * p.members + m) * p.group + head;
		d[dst * n + i % n] = s[i];
	}
}

// shared_merge: a warp a query head (SHARED_MERGE_HEADS heads a block), lane j owning elements
// j·E … j·E+E−1 (E = D/32). A head's partials are its prefix run (when its sequence is in a group) and
// its suffix run, n = n0 + n1 in all, taken 32 partitions at a time: lane i reads partition i's m and l,
// and the warp reads the acc rows (32·E contiguous floats each) of the chunk's partitions B at a time,
// the first B before the chunk's maximum is known, since they do not depend on it. The maximum grows
// chunk by chunk (acc and l rescaled by 2^(M_old−M_new)), and each partition's weight 2^(m−M) reaches the
// lanes by a shuffle. So a head costs three rounds of dependent loads for up to B partitions (its group,
// its prefix length, then m, l and acc together), where a thread walking the partitions one load after
// another was bound by their latency. Every warp of a block runs the same n (the heads of one sequence),
// and a warp past num_heads runs head 0's partials without storing them, so that the full warp's
// shuffles are well defined.
#define SHARED_MERGE_HEADS 4
template <int E> struct MergeVec;
template <> struct MergeVec<2> {
	float v[2];
	__device__ __forceinline__ void load(const float *a) {
		const float2 x = *reinterpret_cast<const float2 *>(a);
		v[0] = x.x, v[1] = x.y;
	}
};
template <> struct MergeVec<4> {
	float v[4];
	__device__ __forceinline__ void load(const float *a) {
		const float4 x = *reinterpret_cast<const float4 *>(a);
		v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
	}
};
template <> struct MergeVec<8> {
	float v[8];
	__device__ __forceinline__ void load(const float *a) {
		const float4 x = reinterpret_cast<const float4 *>(a)[0], y = reinterpret_cast<const float4 *>(a)[1];
		v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
	}
};

template <typename T, int D> __device__ __forceinline__ void shared_merge(const SharedParams &p) {
	constexpr int E = D / DECODE_WARP;
	constexpr int B = 64 / E; // acc rows a batch: 64 floats of registers a lane
	const int seq = blockIdx.x, lane = threadIdx.x % DECODE_WARP;
	const int hq0 = blockIdx.y * SHARED_MERGE_HEADS + threadIdx.x / DECODE_WARP;
	const bool live = hq0 < p.num_heads;
	const int hq = live ? hq0 : 0;
	const int kvh = hq / p.group, head = hq % p.group;
	// Partition i of the head: the prefix run's i-th (i < n0), else the suffix run's (i − n0)-th.
	const int slot = p.seq_slot[seq], n1 = (p.suffix_lens[seq] + p.suffix_partition_tokens - 1) / p.suffix_partition_tokens;
	long long f0 = 0, s0 = 0;
	int n0 = 0;
	if (slot >= 0) {
		const int v = slot / p.members, m = slot % p.members;
		const int rows = p.members * p.group;
		f0 = (((long long)v * p.num_kv_heads + kvh) * p.prefix_partitions) * rows + m * p.group + head;
		s0 = rows;
		n0 = (p.virtual_lens[v] + p.prefix_partition_tokens - 1) / p.prefix_partition_tokens;
	}
	const long long f1 = (((long long)seq * p.num_kv_heads + kvh) * p.suffix_partitions) * p.group + head;
	const int n = n0 + n1;
	auto at = [&](int i) { return i < n0 ? f0 + i * s0 : f1 + (long long)(i - n0) * p.group; };
	auto acc_row = [&](int i) { return (i < n0 ? p.pre_acc : p.suf_acc) + at(i) * D + lane * E; };
	float mx = -INFINITY, l = 0.f, a[E];
#pragma unroll
	for (int e = 0; e < E; e++) a[e] = 0.f;
	for (int c = 0; c < n; c += DECODE_WARP) {
		const int i = c + lane, count = min(DECODE_WARP, n - c);
		float mi = -INFINITY, li = 0.f;
		if (i < n) {
			const long long x = at(i);
			mi = (i < n0 ? p.pre_m : p.suf_m)[x];
			li = (i < n0 ? p.pre_l : p.suf_l)[x];
		}
		MergeVec<E> batch[B];
#pragma unroll
		for (int j = 0; j < B; j++)
			if (j < count) batch[j].load(acc_row(c + j));
		float cm = mi;
		for (int o = DECODE_WARP / 2; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
		const float nm = fmaxf(mx, cm), ref = nm == -INFINITY ? 0.f : nm;
		const float rescale = exp2f(mx - ref); // 0 while nothing is summed (mx = −∞)
		l *= rescale;
#pragma unroll
		for (int e = 0; e < E; e++) a[e] *= rescale;
		mx = nm;
		const float w = exp2f(mi - ref);
		l += li * w;
#pragma unroll
		for (int j = 0; j < B; j++) {
			const float wj = __shfl_sync(0xffffffffu, w, j);
			if (j < count) {
#pragma unroll
				for (int e = 0; e < E; e++) a[e] += batch[j].v[e] * wj;
			}
		}
		for (int j0 = B; j0 < count; j0 += B) {
#pragma unroll
			for (int j = 0; j < B; j++)
				if (j0 + j < count) batch[j].load(acc_row(c + j0 + j));
#pragma unroll
			for (int j = 0; j < B; j++) {
				const float wj = __shfl_sync(0xffffffffu, w, (j0 + j) % DECODE_WARP);
				if (j0 + j < count) {
#pragma unroll
					for (int e = 0; e < E; e++) a[e] += batch[j].v[e] * wj;
				}
			}
		}
	}
	for (int o = DECODE_WARP / 2; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
	if (!live) return;
	T *out = reinterpret_cast<T *>(p.out) + ((long long)seq * p.num_heads + hq) * D + lane * E;
#pragma unroll
	for (int e = 0; e < E; e++) out[e] = Elem<T>::from_float(a[e] / l);
}

// ---------------------------------------------------------------------------------------------------
// The prefix kernel: SharedPrefix_<dtype>_d<D> (bf16/fp16, head_dim 64 and 128; other shapes run the
// prefix pass on the split-k partition kernel). A group's shared pages are as much arithmetic as bytes
// once they are read once (tens of query rows per key), so this is a dense attention kernel, tiled for
// the tensor cores rather than for decode's few rows:
//
//   grid (virtual · row_blocks, num_kv_heads, prefix_partitions), PREFIX_THREADS threads; a program
//   serves PREFIX_ROWS query rows (members·G rows of one virtual sequence and KV head, row block
//   blockIdx.x % row_blocks) over one partition of the shared pages, and writes the split-k partial
//   (m, l, acc) of every row, in the layout shared_merge reads.
//   Warp w owns rows w·32 .. w·32+31 (two m16 tiles); a warp whose rows are all past the virtual
//   sequence's rows only copies. Q (the rows, [ROWS][D]) is copied into shared memory once and read
//   as mma A fragments with ldmatrix at every k-step, so each K fragment serves both m-tiles and each Q
//   fragment a whole tile of keys. K/V tiles of PREFIX_TILE tokens are gathered page by page through
//   the virtual sequence's block table with cp.async (TileLoader), PREFIX_STAGES deep, into
//   XOR-swizzled rows (conflict-free ldmatrix). Per tile: S = Q·Kᵀ (mma.sync m16n8k16, fp32), the
//   online softmax of each row in registers (log2 units, the scale folded into the exponent), and
//   acc += P·V with P re-packed from the score accumulators as the A operand and V read with
//   ldmatrix.trans. The partial's m and l are in log2 units, acc unnormalised: the split-k convention.
//
// Rows are members·G of a virtual sequence; a virtual sequence of more rows than PREFIX_ROWS takes
// several row blocks (the same pages, read by neighbouring programs, so from L2 after the first).

#define PREFIX_WARPS 4
#define PREFIX_MT 2 // m16 tiles per warp
#define PREFIX_ROWS (PREFIX_WARPS * PREFIX_MT * 16)
#define PREFIX_THREADS (PREFIX_WARPS * DECODE_WARP)
#define PREFIX_TILE 64
#define PREFIX_STAGES 2
#define PREFIX_KEYS 32 // keys of one softmax step: S of two m-tiles × 32 keys beside acc fits the registers

// PrefixProgram is what both prefix kernels (SharedPrefix, SharedPrefixR16) do around their arithmetic,
// for a program of THREADS threads that serves ROWS rows: where it works (the virtual sequence, row
// block, KV head and partition of its block index) and its K/V pipeline of STAGES stages of PREFIX_TILE
// tokens. A kernel calls place, returns on an empty partition, then calls setup and prologue, and
// advance at every tile. Every step is inlined into the kernel, which compiles as if written out there.
// KV is the pages' element type: T, or E4M3Code for an FP8 KV cache, whose stages then hold the tiles'
// codes (L's rows, half T's bytes) and Q rows of T (LQ's).
template <typename T, int D, int ROWS, int THREADS, int STAGES, typename KV = T> struct PrefixProgram {
	using L = TileLoader<KV, D, PREFIX_TILE, THREADS>;
	using LQ = TileLoader<T, D, PREFIX_TILE, THREADS>;
	uint8_t *smem;             // the dynamic shared memory from a 1024-byte boundary: the stages first
	int (*sids)[L::MAX_PAGES]; // [STAGES]: the block ids of each stage's pages (the kernel's __shared__)
	int rows;                  // members·G rows of a virtual sequence and KV head
	int v, rb, kvh, part;      // virtual sequence, row block, KV head, partition
	int start, end, ntiles;    // the partition's tokens [start, end) and its tiles
	int tid, lane, warp, lbs;
	int row0, nrows;           // the block's first row of the virtual sequence, and its rows
	long long slot0;           // (virtual, KV head)
	const int *table;          // the virtual sequence's block table
	const KV *kc, *vc;
	long long row_stride;
	uint64_t pf;
	int next_id; // the block id this thread loads for the next tile to queue

	// place waits for the kernel before (PDL) and finds the program's virtual sequence, row block, KV
	// head and tokens [start, end), empty for a partition past the sequence's shared tokens (the program
	// then does nothing: the merge does not read it). The kernel, not place, returns there: an exit
	// inside the helper compiles to other code (a branch merged after the call).
	__device__ __forceinline__ void place(const DecodeParams &p, uint8_t *smem_raw, int (*ids)[L::MAX_PAGES]) {
		smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
		sids = ids;
		decode_pdl_enter();
		rows = p.group;
		const int row_blocks = (rows + ROWS - 1) / ROWS;
		v = blockIdx.x / row_blocks, rb = blockIdx.x % row_blocks;
		kvh = blockIdx.y, part = blockIdx.z;
		start = part * p.partition_tokens;
		end = min(start + p.partition_tokens, __ldg(p.context_lens + v));
	}

	// setup reads the rest of a non-empty partition's parameters.
	__device__ __forceinline__ void setup(const DecodeParams &p) {
		tid = threadIdx.x, lane = tid % DECODE_WARP, warp = tid / DECODE_WARP;
		lbs = p.log2_block_size;
		table = p.block_tables + (long long)v * p.max_blocks;
		pf = copy_policy(p.flags);
		kc = reinterpret_cast<const KV *>(p.k_cache);
		vc = reinterpret_cast<const KV *>(p.v_cache);
		row_stride = (long long)p.num_kv_heads * D;
		ntiles = (end - start + PREFIX_TILE - 1) / PREFIX_TILE;
		row0 = rb * ROWS;
		nrows = min(ROWS, rows - row0);
		slot0 = (long long)v * p.num_kv_heads + kvh;
	}

	// prologue queues the first tile's block ids, Q's rows into qstage ([ROWS] swizzled rows; rows past
	// nrows zero-filled) and the first STAGES-1 tiles, one commit group each (Q rides with tile 0).
	__device__ __forceinline__ void prologue(const DecodeParams &p, uint8_t *qstage) {
		constexpr int RC = LQ::ROW_CHUNKS;
		if (tid < L::MAX_PAGES) sids[0][tid] = L::load_id(table, start, end, lbs, tid);
		{
			const uint32_t qs = smem_addr(qstage);
			const uint8_t *qg = static_cast<const uint8_t *>(p.q) + (slot0 * rows + row0) * (long long)(D * sizeof(T));
#pragma unroll
			for (int i = 0; i < ROWS * RC / THREADS; i++) {
				const int c = tid + i * THREADS;
				const int r = c / RC, chunk = c % RC;
				const bool valid = r < nrows;
				cp_async16(qs + (r * RC + LQ::swizzle(r, chunk)) * 16, qg + (valid ? (long long)r * RC * 16 + chunk * 16 : 0), valid);
			}
		}
		__syncthreads(); // tile 0's ids
#pragma unroll
		for (int s = 0; s < STAGES - 1; s++) {
			if (s > 0 && tid < L::MAX_PAGES) sids[s][tid] = L::load_id(table, start + s * PREFIX_TILE, end, lbs, tid);
			if (s > 0) __syncthreads();
			if (s < ntiles)
				L::issue(smem + s * L::STAGE_BYTES, sids[s], kc, vc, start + s * PREFIX_TILE, end, lbs, row_stride, kvh, tid, pf);
			cp_async_commit();
		}
		next_id = L::load_id(table, start + (STAGES - 1) * PREFIX_TILE, end, lbs, tid);
	}

	// advance waits, behind a barrier, for tile j (and what rode with it: Q with tile 0), and queues tile
	// j+STAGES-1 into the stage of tile j-1, which every thread is then done with (at j = 0 the last
	// stage, which holds no tile: at most SharedPrefixR16's Q, read into registers before the loop).
	__device__ __forceinline__ void advance(int j) {
		if (tid < L::MAX_PAGES) sids[(j + STAGES - 1) % STAGES][tid] = next_id;
		cp_async_wait<STAGES - 2>();
		__syncthreads(); // tile j landed; tile j-1's stage is free; the ids above are visible
		const int jn = j + STAGES - 1;
		if (jn < ntiles)
			L::issue(smem + (jn % STAGES) * L::STAGE_BYTES, sids[jn % STAGES], kc, vc, start + jn * PREFIX_TILE, end, lbs,
			         row_stride, kvh, tid, pf);
		cp_async_commit();
		next_id = L::load_id(table, start + (jn + 1) * PREFIX_TILE, end, lbs, tid);
	}

	// stage is the shared-memory address of tile j's stage (its K tile; V follows at L::TILE_BYTES).
	__device__ __forceinline__ uint32_t stage(int j) const { return smem_addr(smem + (j % STAGES) * L::STAGE_BYTES); }
	// codes is tile j's stage as a pointer (FP8 pages: convert_tile's source).
	__device__ __forceinline__ const uint8_t *codes(int j) const { return smem + (j % STAGES) * L::STAGE_BYTES; }

	// partial is the index of the (m, l) partial of the block's first row: [virtual][kv][partition][rows].
	__device__ __forceinline__ long long partial(const DecodeParams &p) const {
		return (slot0 * p.num_partitions + part) * rows + row0;
	}
};

template <typename T, int D, typename KV = T> struct PrefixShape {
	using L = TileLoader<T, D, PREFIX_TILE, PREFIX_THREADS>;   // the mma tiles' layout
	using LC = TileLoader<KV, D, PREFIX_TILE, PREFIX_THREADS>; // the stages' (L itself unless FP8 pages)
	static constexpr bool F8 = sizeof(KV) == 1;
	static constexpr int ROW_CHUNKS = L::ROW_CHUNKS;
	static constexpr int Q_BYTES = PREFIX_ROWS * ROW_CHUNKS * 16;
	// The stages, then (FP8 pages) one converted K/V tile pair of T that the mma tiles read.
	static constexpr int CONV_BYTES = F8 ? L::STAGE_BYTES : 0;
	static constexpr int PIPE_BYTES = PREFIX_STAGES * LC::STAGE_BYTES + CONV_BYTES;
	static constexpr int ROW_BYTES = ROW_CHUNKS * 16;
	// The stages, then Q, from a 1024-byte boundary (+1024 bytes of slack): rows then start ROW_BYTES
	// aligned, so that a lane's swizzled ldmatrix address at k-step kk is its k-step-0 address XOR kk·32.
	static constexpr int SMEM = PIPE_BYTES + Q_BYTES + 1024;
	static_assert(ROW_CHUNKS == 8 || ROW_CHUNKS == 16, "rows of 8 or 16 chunks (the XOR addressing)");
	static_assert((PREFIX_ROWS * ROW_CHUNKS) % PREFIX_THREADS == 0, "threads divide Q's chunks");
};

// KV is the pages' element type: T, or E4M3Code for an FP8 KV cache (F8), whose landed tiles are
// converted into one T tile pair (convert_tile, exact) before the mma loop reads them, as decode_mma
// does; K's scale is folded into the scores' scale and V's into the accumulators at the end.
template <typename T, int D, typename KV = T> __device__ __forceinline__ void shared_prefix(const DecodeParams &p) {
	using Sh = PrefixShape<T, D, KV>;
	using L = typename Sh::L;
	constexpr bool F8 = Sh::F8;
	constexpr int KSTEPS = D / 16;            // k-steps of Q·Kᵀ
	constexpr int NT = PREFIX_KEYS / 8;       // n-tiles (8 keys) of S
	constexpr int DT = D / 8;                 // n-tiles (8 elements) of acc

	extern __shared__ __align__(128) uint8_t smem_raw[];
	__shared__ int sids[PREFIX_STAGES][L::MAX_PAGES];
	PrefixProgram<T, D, PREFIX_ROWS, PREFIX_THREADS, PREFIX_STAGES, KV> pg;
	pg.place(p, smem_raw, sids);
	if (pg.start >= pg.end) return; // an empty partition: the merge does not read it
	pg.setup(p);
	uint8_t *qstage = pg.smem + Sh::PIPE_BYTES; // Q after the stages
	uint8_t *conv = qstage - Sh::CONV_BYTES;    // F8: the converted tile pair
	pg.prologue(p, qstage);
	const int lane = pg.lane, warp = pg.warp, start = pg.start, end = pg.end, nrows = pg.nrows;

	// Rows of lane: m-tile mt's rows w·32 + mt·16 + r0 and + 8; columns c0, c0+1 of each n-tile.
	const int r0 = lane / 4, c0 = (lane % 4) * 2;
	// ldmatrix lane roles: matrix lane/8, row lane%8.
	const int mi = lane / 8, mr = lane % 8;
	const bool active = warp * PREFIX_MT * 16 < nrows; // else only copies
	// Lane offsets of the ldmatrix reads at k-step 0 (see PrefixShape): Q's A fragments and V's
	// transposed B fragments take matrix rows (mi%2)·8 + mr and chunk mi/2, K's B fragments rows
	// (mi/2)·8 + mr and chunk mi%2, each chunk swizzled by the row (mr).
	constexpr int RB = Sh::ROW_BYTES;
	const uint32_t off_a = ((mi % 2) * 8 + mr) * RB + (((mi / 2) ^ mr) * 16);
	const uint32_t off_k = ((mi / 2) * 8 + mr) * RB + (((mi % 2) ^ mr) * 16);
	const uint32_t qs = smem_addr(qstage) + warp * PREFIX_MT * 16 * RB + off_a;
	const float scale = F8 ? p.scale_log2 * p.k_scale : p.scale_log2;

	float acc[PREFIX_MT][DT][4];
	float m[PREFIX_MT][2], l[PREFIX_MT][2];
#pragma unroll
	for (int mt = 0; mt < PREFIX_MT; mt++) {
#pragma unroll
		for (int n = 0; n < DT; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
		m[mt][0] = m[mt][1] = -INFINITY;
		l[mt][0] = l[mt][1] = 0.f;
	}

	for (int j = 0; j < pg.ntiles; j++) {
		pg.advance(j); // tile j and, at j = 0, Q landed
		if constexpr (F8) { // every warp converts; the next advance's barrier frees conv again
			convert_tile<T, typename Sh::LC, L, PREFIX_THREADS>(pg.codes(j), conv, pg.tid);
			__syncthreads();
		}
		if (!active) continue;
		const uint32_t ks = F8 ? smem_addr(conv) : pg.stage(j), vs = ks + L::TILE_BYTES;
#pragma unroll 1
		for (int k0 = 0; k0 < PREFIX_TILE; k0 += PREFIX_KEYS) {
		const int t0 = start + j * PREFIX_TILE + k0;
		if (t0 >= end) break;

		// S = Q·Kᵀ: PREFIX_MT × NT fragments of 16 rows × 8 keys.
		float s[PREFIX_MT][NT][4];
#pragma unroll
		for (int mt = 0; mt < PREFIX_MT; mt++)
#pragma unroll
			for (int n = 0; n < NT; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < KSTEPS; kk++) {
			uint32_t qa[PREFIX_MT][4];
#pragma unroll
			for (int mt = 0; mt < PREFIX_MT; mt++) {
				// A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
				ldmatrix_x4((qs + mt * 16 * RB) ^ (kk * 32), qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3]);
			}
#pragma unroll
			for (int np = 0; np < NT / 2; np++) {
				// B: keys np·16 .. +7 (k 0-7, 8-15), then keys np·16+8 .. +15.
				uint32_t b0, b1, b2, b3;
				ldmatrix_x4((ks + (k0 + np * 16) * RB + off_k) ^ (kk * 32), b0, b1, b2, b3);
#pragma unroll
				for (int mt = 0; mt < PREFIX_MT; mt++) {
					mma16816<T>(s[mt][2 * np], qa[mt], b0, b1);
					mma16816<T>(s[mt][2 * np + 1], qa[mt], b2, b3);
				}
			}
		}
		// Keys past the partition's end (the last tile's) are masked.
		if (t0 + PREFIX_KEYS > end) {
#pragma unroll
			for (int n = 0; n < NT; n++)
#pragma unroll
				for (int e = 0; e < 2; e++)
					if (t0 + n * 8 + c0 + e >= end) {
#pragma unroll
						for (int mt = 0; mt < PREFIX_MT; mt++) s[mt][n][e] = s[mt][n][2 + e] = -INFINITY;
					}
		}

		// Online softmax of rows r0 (elements 0, 1) and r0+8 (2, 3) of each m-tile: every tile holds a
		// key of the range, so the new maximum is finite and a row's first rescale multiplies by 0.
#pragma unroll
		for (int mt = 0; mt < PREFIX_MT; mt++) {
			float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
			for (int n = 0; n < NT; n++) {
				mx0 = fmaxf(mx0, fmaxf(s[mt][n][0], s[mt][n][1]));
				mx1 = fmaxf(mx1, fmaxf(s[mt][n][2], s[mt][n][3]));
			}
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
			const float mn0 = fmaxf(m[mt][0], mx0 * scale), mn1 = fmaxf(m[mt][1], mx1 * scale);
			const float al0 = exp2f(m[mt][0] - mn0), al1 = exp2f(m[mt][1] - mn1);
			m[mt][0] = mn0;
			m[mt][1] = mn1;
			float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
			for (int n = 0; n < NT; n++) {
				s[mt][n][0] = exp2f(fmaf(s[mt][n][0], scale, -mn0));
				s[mt][n][1] = exp2f(fmaf(s[mt][n][1], scale, -mn0));
				s[mt][n][2] = exp2f(fmaf(s[mt][n][2], scale, -mn1));
				s[mt][n][3] = exp2f(fmaf(s[mt][n][3], scale, -mn1));
				ps0 += s[mt][n][0] + s[mt][n][1];
				ps1 += s[mt][n][2] + s[mt][n][3];
			}
			l[mt][0] = l[mt][0] * al0 + ps0;
			l[mt][1] = l[mt][1] * al1 + ps1;
#pragma unroll
			for (int n = 0; n < DT; n++) {
				acc[mt][n][0] *= al0;
				acc[mt][n][1] *= al0;
				acc[mt][n][2] *= al1;
				acc[mt][n][3] *= al1;
			}
		}

		// acc += P·V, 16 keys at a time: P's A fragment is two n-tiles of S, packed; V's B fragments come
		// transposed from ldmatrix.trans (keys as k, elements as n) and serve both m-tiles.
#pragma unroll
		for (int kt = 0; kt < PREFIX_KEYS / 16; kt++) {
			uint32_t pa[PREFIX_MT][4];
#pragma unroll
			for (int mt = 0; mt < PREFIX_MT; mt++) {
				pa[mt][0] = Elem<T>::pack(s[mt][2 * kt][0], s[mt][2 * kt][1]);
				pa[mt][1] = Elem<T>::pack(s[mt][2 * kt][2], s[mt][2 * kt][3]);
				pa[mt][2] = Elem<T>::pack(s[mt][2 * kt + 1][0], s[mt][2 * kt + 1][1]);
				pa[mt][3] = Elem<T>::pack(s[mt][2 * kt + 1][2], s[mt][2 * kt + 1][3]);
			}
			const uint32_t vrow = vs + (k0 + kt * 16) * RB + off_a;
#pragma unroll
			for (int dp = 0; dp < D / 16; dp++) {
				uint32_t b0, b1, b2, b3;
				ldmatrix_x4_trans(vrow ^ (dp * 32), b0, b1, b2, b3);
#pragma unroll
				for (int mt = 0; mt < PREFIX_MT; mt++) {
					mma16816<T>(acc[mt][2 * dp], pa[mt], b0, b1);
					mma16816<T>(acc[mt][2 * dp + 1], pa[mt], b2, b3);
				}
			}
		}
		}
	}
	cp_async_wait<0>();
	if (!active) return;
	if constexpr (F8) { // V's scale, once: acc = Σ p·code, the values being code · v_scale
#pragma unroll
		for (int mt = 0; mt < PREFIX_MT; mt++)
#pragma unroll
			for (int n = 0; n < DT; n++)
#pragma unroll
				for (int e = 0; e < 4; e++) acc[mt][n][e] *= p.v_scale;
	}

	// The partials of the block's rows: (m, l) [virtual][kv][partition][rows], acc … [rows][D].
	const long long base = pg.partial(p);
#pragma unroll
	for (int mt = 0; mt < PREFIX_MT; mt++) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float sum = l[mt][h];
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
			sum += __shfl_xor_sync(0xffffffffu, sum, 2);
			const int r = warp * PREFIX_MT * 16 + mt * 16 + h * 8 + r0;
			if (r >= nrows) continue;
			const long long at = base + r;
			if (lane % 4 == 0) p.part_m[at] = m[mt][h], p.part_l[at] = sum;
			float *o = p.part_acc + at * D + c0;
#pragma unroll
			for (int n = 0; n < DT; n++)
				*reinterpret_cast<float2 *>(o + n * 8) = make_float2(acc[mt][n][2 * h], acc[mt][n][2 * h + 1]);
		}
	}
}

#define SHARED_PREFIX(T, TN, D)                                                                               \
	extern "C" __global__ void __launch_bounds__(PREFIX_THREADS, 2) SharedPrefix_##TN##_d##D(const DecodeParams p) { \
		shared_prefix<T, D>(p);                                                                           \
	}                                                                                                         \
	extern "C" __device__ int SharedPrefix_##TN##_d##D##_smem = PrefixShape<T, D>::SMEM;

SHARED_PREFIX(__nv_bfloat16, bf16, 64)
SHARED_PREFIX(__nv_bfloat16, bf16, 128)
SHARED_PREFIX(__half, fp16, 64)
SHARED_PREFIX(__half, fp16, 128)

// Over FP8 pages: SharedPrefix_<dtype>_e4m3_d<D> (the same program, its stages of codes; shared_prefix).
#define SHARED_PREFIX_E4M3(T, TN, D)                                                                          \
	extern "C" __global__ void __launch_bounds__(PREFIX_THREADS, 2) SharedPrefix_##TN##_e4m3_d##D(const DecodeParams p) { \
		shared_prefix<T, D, E4M3Code>(p);                                                                 \
	}                                                                                                         \
	extern "C" __device__ int SharedPrefix_##TN##_e4m3_d##D##_smem = PrefixShape<T, D, E4M3Code>::SMEM;

SHARED_PREFIX_E4M3(__nv_bfloat16, bf16, 64)
SHARED_PREFIX_E4M3(__nv_bfloat16, bf16, 128)
SHARED_PREFIX_E4M3(__half, fp16, 64)
SHARED_PREFIX_E4M3(__half, fp16, 128)

// ---------------------------------------------------------------------------------------------------
// The prefix kernel of 16 rows a warp: SharedPrefixR16_<dtype>_d<D> (entry points below), the default;
// SharedPrefix above runs where a device's shared memory cannot hold its program, or where
// CUDATuning.SharedPrefix asks for it. Same grid and partials as SharedPrefix, with ROWS rows a program;
// what differs is the work of a warp:
//
//   Warp w of ROWS/16 owns the one m16 tile of rows w·16 .. w·16+15: a thread holds acc (D/8 n-tiles)
//   and S of one softmax step (KEYS/8 n-tiles) of one m-tile, half of SharedPrefix's. Q's A fragments
//   of every k-step stay in registers too (a program an SM, all of its registers), read from shared
//   memory once before the loop; Q is copied into the last stage, which the prologue leaves free and
//   the loop fills only after its first barrier, so the stages take all the shared memory.
//   Per softmax step: S = Q·Kᵀ over KEYS keys, one maximum, one rescale of acc and l (skipped by the
//   warp when no row's maximum grew), acc += P·V.

template <typename T, int D, int ROWS, int STAGES> struct Prefix16Shape {
	static constexpr int THREADS = ROWS / 16 * DECODE_WARP; // a warp a m16 tile
	using L = TileLoader<T, D, PREFIX_TILE, THREADS>;
	static constexpr int ROW_CHUNKS = L::ROW_CHUNKS;
	static constexpr int ROW_BYTES = ROW_CHUNKS * 16;
	static constexpr int Q_BYTES = ROWS * ROW_BYTES;
	// The stages from a 1024-byte boundary (+1024 bytes of slack): see PrefixShape.
	static constexpr int SMEM = STAGES * L::STAGE_BYTES + 1024;
	static_assert(ROW_CHUNKS == 8 || ROW_CHUNKS == 16, "rows of 8 or 16 chunks (the XOR addressing)");
	static_assert(Q_BYTES <= L::STAGE_BYTES, "Q fits a stage");
	static_assert((ROWS * ROW_CHUNKS) % THREADS == 0, "threads divide Q's chunks");
	static_assert(STAGES >= 2, "Q rides in the last stage, which the prologue leaves free");
};

template <typename T, int D, int ROWS, int STAGES, int KEYS>
__device__ __forceinline__ void shared_prefix16(const DecodeParams &p) {
	using Sh = Prefix16Shape<T, D, ROWS, STAGES>;
	using L = typename Sh::L;
	static_assert(PREFIX_TILE % KEYS == 0 && KEYS % 16 == 0, "softmax steps of whole k16 slices of a tile");
	constexpr int THREADS = Sh::THREADS;
	constexpr int KSTEPS = D / 16;       // k-steps of Q·Kᵀ
	constexpr int NT = KEYS / 8;         // n-tiles (8 keys) of S
	constexpr int DT = D / 8;            // n-tiles (8 elements) of acc
	constexpr int RB = Sh::ROW_BYTES;

	extern __shared__ __align__(128) uint8_t smem_raw[];
	__shared__ int sids[STAGES][L::MAX_PAGES];
	PrefixProgram<T, D, ROWS, THREADS, STAGES> pg;
	pg.place(p, smem_raw, sids);
	if (pg.start >= pg.end) return; // an empty partition: the merge does not read it
	pg.setup(p);
	uint8_t *qstage = pg.smem + (STAGES - 1) * L::STAGE_BYTES;
	pg.prologue(p, qstage); // Q in the last stage, which the prologue leaves free
	const int lane = pg.lane, warp = pg.warp, start = pg.start, end = pg.end, nrows = pg.nrows;

	// Rows of lane: r0 and r0+8 of the warp's m-tile; columns c0, c0+1 of each n-tile.
	const int r0 = lane / 4, c0 = (lane % 4) * 2;
	// ldmatrix lane roles: matrix lane/8, row lane%8; offsets at k-step 0 as in shared_prefix.
	const int mi = lane / 8, mr = lane % 8;
	const bool active = warp * 16 < nrows; // else only copies
	const uint32_t off_a = ((mi % 2) * 8 + mr) * RB + (((mi / 2) ^ mr) * 16);
	const uint32_t off_k = ((mi / 2) * 8 + mr) * RB + (((mi % 2) ^ mr) * 16);
	const float scale = p.scale_log2;

	// Q's A fragments, in registers, read once before the loop (group 0, Q and tile 0, has landed for
	// every thread after the barrier; the loop's first barrier comes before anything is copied into the
	// last stage).
	const uint32_t qs = smem_addr(qstage) + warp * 16 * RB + off_a;
	uint32_t qa[KSTEPS][4];
	cp_async_wait<STAGES - 2>();
	__syncthreads();
#pragma unroll
	for (int kk = 0; kk < KSTEPS; kk++) ldmatrix_x4(qs ^ (kk * 32), qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);

	float acc[DT][4];
#pragma unroll
	for (int n = 0; n < DT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

	for (int j = 0; j < pg.ntiles; j++) {
		pg.advance(j); // at j = 0 into Q's stage: Q is in registers by then
		if (!active) continue;
		const uint32_t ks = pg.stage(j), vs = ks + L::TILE_BYTES;
#pragma unroll
		for (int k0 = 0; k0 < PREFIX_TILE; k0 += KEYS) {
		const int t0 = start + j * PREFIX_TILE + k0;
		if (t0 >= end) break;

		// S = Q·Kᵀ: NT fragments of 16 rows × 8 keys.
		float s[NT][4];
#pragma unroll
		for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < KSTEPS; kk++) {
#pragma unroll
			for (int np = 0; np < NT / 2; np++) {
				// B: keys np·16 .. +7 (k 0-7, 8-15), then keys np·16+8 .. +15.
				uint32_t b0, b1, b2, b3;
				ldmatrix_x4((ks + (k0 + np * 16) * RB + off_k) ^ (kk * 32), b0, b1, b2, b3);
				mma16816<T>(s[2 * np], qa[kk], b0, b1);
				mma16816<T>(s[2 * np + 1], qa[kk], b2, b3);
			}
		}
		// Keys past the partition's end (the last tile's) are masked.
		if (t0 + KEYS > end) {
#pragma unroll
			for (int n = 0; n < NT; n++)
#pragma unroll
				for (int e = 0; e < 2; e++)
					if (t0 + n * 8 + c0 + e >= end) s[n][e] = s[n][2 + e] = -INFINITY;
		}

		// Online softmax of rows r0 (elements 0, 1) and r0+8 (2, 3): every step holds a key of the range,
		// so the new maximum is finite and a row's first rescale multiplies by 0.
		float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
		for (int n = 0; n < NT; n++) {
			mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
			mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		const float mn0 = fmaxf(m0, mx0 * scale), mn1 = fmaxf(m1, mx1 * scale);
		// acc and l are rescaled only where some row of the warp has a new maximum (the factor is
		// exactly 1 elsewhere): after the first steps a row's maximum rarely grows.
		if (__any_sync(0xffffffffu, mn0 != m0 || mn1 != m1)) {
			const float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1);
			l0 *= al0;
			l1 *= al1;
#pragma unroll
			for (int n = 0; n < DT; n++) {
				acc[n][0] *= al0;
				acc[n][1] *= al0;
				acc[n][2] *= al1;
				acc[n][3] *= al1;
			}
			m0 = mn0;
			m1 = mn1;
		}
#pragma unroll
		for (int n = 0; n < NT; n++) {
			s[n][0] = exp2f(fmaf(s[n][0], scale, -m0));
			s[n][1] = exp2f(fmaf(s[n][1], scale, -m0));
			s[n][2] = exp2f(fmaf(s[n][2], scale, -m1));
			s[n][3] = exp2f(fmaf(s[n][3], scale, -m1));
			l0 += s[n][0] + s[n][1];
			l1 += s[n][2] + s[n][3];
		}

		// acc += P·V, 16 keys at a time: P's A fragment is two n-tiles of S, packed; V's B fragments come
		// transposed from ldmatrix.trans (keys as k, elements as n).
#pragma unroll
		for (int kt = 0; kt < KEYS / 16; kt++) {
			uint32_t pa[4];
			pa[0] = Elem<T>::pack(s[2 * kt][0], s[2 * kt][1]);
			pa[1] = Elem<T>::pack(s[2 * kt][2], s[2 * kt][3]);
			pa[2] = Elem<T>::pack(s[2 * kt + 1][0], s[2 * kt + 1][1]);
			pa[3] = Elem<T>::pack(s[2 * kt + 1][2], s[2 * kt + 1][3]);
			const uint32_t vrow = vs + (k0 + kt * 16) * RB + off_a;
#pragma unroll
			for (int dp = 0; dp < D / 16; dp++) {
				uint32_t b0, b1, b2, b3;
				ldmatrix_x4_trans(vrow ^ (dp * 32), b0, b1, b2, b3);
				mma16816<T>(acc[2 * dp], pa, b0, b1);
				mma16816<T>(acc[2 * dp + 1], pa, b2, b3);
			}
		}
		}
	}
	cp_async_wait<0>();
	if (!active) return;

	// The partials of the warp's rows: (m, l) [virtual][kv][partition][rows], acc … [rows][D].
	const long long base = pg.partial(p);
#pragma unroll
	for (int h = 0; h < 2; h++) {
		float sum = h ? l1 : l0;
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		sum += __shfl_xor_sync(0xffffffffu, sum, 2);
		const int r = warp * 16 + h * 8 + r0;
		if (r >= nrows) continue;
		const long long at = base + r;
		if (lane % 4 == 0) p.part_m[at] = h ? m1 : m0, p.part_l[at] = sum;
		float *o = p.part_acc + at * D + c0;
#pragma unroll
		for (int n = 0; n < DT; n++) *reinterpret_cast<float2 *>(o + n * 8) = make_float2(acc[n][2 * h], acc[n][2 * h + 1]);
	}
}

// Entry points: SharedPrefixR16_<dtype>_d<D>, 128 rows a program, 4 stages, softmax steps of 64 keys,
// one program an SM (the register budget).
#define SHARED_PREFIX16(T, TN, D)                                                                             \
	extern "C" __global__ void __launch_bounds__(256, 1) SharedPrefixR16_##TN##_d##D(const DecodeParams p) { \
		shared_prefix16<T, D, 128, 4, 64>(p);                                                             \
	}                                                                                                         \
	extern "C" __device__ int SharedPrefixR16_##TN##_d##D##_smem = Prefix16Shape<T, D, 128, 4>::SMEM;

SHARED_PREFIX16(__nv_bfloat16, bf16, 64)
SHARED_PREFIX16(__nv_bfloat16, bf16, 128)
SHARED_PREFIX16(__half, fp16, 64)
SHARED_PREFIX16(__half, fp16, 128)

#define SHARED_MERGE(T, TN, D)                                                                                \
	extern "C" __global__ void __launch_bounds__(SHARED_MERGE_HEADS * DECODE_WARP) SharedMerge_##TN##_d##D(const SharedParams p) { \
		shared_merge<T, D>(p);                                                                            \
	}

SHARED_MERGE(__nv_bfloat16, bf16, 64)
SHARED_MERGE(__nv_bfloat16, bf16, 128)
SHARED_MERGE(__nv_bfloat16, bf16, 256)
SHARED_MERGE(__half, fp16, 64)
SHARED_MERGE(__half, fp16, 128)
SHARED_MERGE(__half, fp16, 256)
SHARED_MERGE(float, fp32, 64)
SHARED_MERGE(float, fp32, 128)
