// Shared-prefix (cascade) decode attention: the two kernels it adds to the split-k kernels it runs twice.
// A step's groups of sequences that share their first pages are packed into virtual sequences of up to
// `members` members each (SharedLayout, shared.go); the prefix pass is the split-k partition kernel run on
// the virtual sequences, whose query heads of KV head h are the members' G heads of h one after another
// (members·G rows: the 64-row mma head tile at G = 4 and 16 members), so each program reads a partition of
// the shared pages once for every member; the suffix pass is the split-k partition kernel run on every
// sequence's own pages (block tables from the end of its shared prefix); the merge combines a sequence's
// prefix and suffix partials by log-sum-exp (PartialRun, decode.cuh: the split-k reduce's own code).
// Launched by CUDAKernels.DecodeShared (shared_cuda.go); the CPU twin is DecodeShared (shared.go).
//
//   SharedGather:             grid (virtual·members, num_heads), row_bytes/16 threads: the virtual
//                             sequences' queries, [virtual][num_kv_heads][members][G][head_dim], copied
//                             16 bytes a thread from q [batch][num_heads][head_dim].
//   SharedMerge_<dtype>_d<D>: grid (batch, num_heads), D threads: thread d merges element d of one
//                             query head's prefix partials (when its sequence is in a group) and
//                             suffix partials and writes the normalised output.
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
	const int vm = blockIdx.x, hq = blockIdx.y;
	const int v = vm / p.members, m = vm % p.members;
	const int kvh = hq / p.group, head = hq % p.group;
	const long long src = (long long)p.virtual_seqs[vm] * p.num_heads + hq;
	const long long dst = (((long long)v * p.num_kv_heads + kvh) * p.members + m) * p.group + head;
	const int n = p.row_bytes / 16;
	const uint4 *s = reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(p.q) + src * p.row_bytes);
	uint4 *d = reinterpret_cast<uint4 *>(static_cast<uint8_t *>(p.vq) + dst * p.row_bytes);
	for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

template <typename T, int D> __device__ __forceinline__ void shared_merge(const SharedParams &p) {
	const int seq = blockIdx.x, hq = blockIdx.y, d = threadIdx.x;
	const int kvh = hq / p.group, head = hq % p.group;
	const PartialRun suffix = {p.suf_m, p.suf_l, p.suf_acc,
	                           (((long long)seq * p.num_kv_heads + kvh) * p.suffix_partitions) * p.group + head, p.group,
	                           (p.suffix_lens[seq] + p.suffix_partition_tokens - 1) / p.suffix_partition_tokens};
	float mx = run_max(suffix, -INFINITY);
	PartialRun prefix = {p.pre_m, p.pre_l, p.pre_acc, 0, 0, 0};
	const int slot = p.seq_slot[seq];
	if (slot >= 0) {
		const int v = slot / p.members, m = slot % p.members;
		const int rows = p.members * p.group;
		prefix.first = (((long long)v * p.num_kv_heads + kvh) * p.prefix_partitions) * rows + m * p.group + head;
		prefix.stride = rows;
		prefix.count = (p.virtual_lens[v] + p.prefix_partition_tokens - 1) / p.prefix_partition_tokens;
		mx = run_max(prefix, mx);
	}
	float l = 0.f, a = 0.f;
	run_sum<D>(prefix, mx, d, l, a);
	run_sum<D>(suffix, mx, d, l, a);
	reinterpret_cast<T *>(p.out)[((long long)seq * p.num_heads + hq) * D + d] = Elem<T>::from_float(a / l);
}

#define SHARED_MERGE(T, TN, D)                                                                                \
	extern "C" __global__ void __launch_bounds__(D) SharedMerge_##TN##_d##D(const SharedParams p) {            \
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
