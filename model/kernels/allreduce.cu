// One-shot all-reduce over the GPUs of a tensor-parallel group (model/collective_cuda.go, peerCollective):
// every rank sums the float32 values x[0, n) of all ranks in place, in one kernel a rank, through memory
// the ranks read from each other directly (peer access over NVLink, or the same GPU).
//
// Each rank owns a staging buffer of two halves (data[rank], 2 · cap floats), a signal array (sig[rank],
// ranks · blocks words) and its blocks' epochs (epoch, blocks words). Every call runs the same number of
// blocks on every rank (AllReduceParams.blocks, fixed for the group) and block b owns the same slice of
// x on every rank. Block b of rank r:
//  1. takes the call's epoch e (its own count of calls, plus one) and copies its slice of x into half
//     e & 1 of its staging buffer;
//  2. tells every rank t that it has (the word r · blocks + b of sig[t] set to e, released at system
//     scope after every thread's stores were fenced), then waits until every rank t has told it the same
//     (the word t · blocks + b of its own sig[r] at e or past it);
//  3. sums the slice of every rank's half e & 1 in rank order and writes it over x.
// The sums are the same bits on every rank (one order for all), as the ranks' residual streams need.
//
// Why two halves are enough: a rank starts call k + 2, which writes half k & 1 again, only after its call
// k + 1 passed the wait of every block, and that wait needed every rank to have begun call k + 1, so to
// have finished reading call k's half. Why a rank waits for "e or past it": a rank may be at most one call
// ahead (it cannot pass call e + 1's wait before this rank arrives at e + 1).
//
// The wait never hangs: after a while it reads the group's abort word (host memory mapped into every GPU,
// set by the host when a rank fails) and failed word (the same memory), and past timeout_ns of waiting it
// sets the failed word and returns; either way x is left unsummed and the host reports the failure. Every
// wait of every rank that reads a set word returns within microseconds, this call's and every later one's, so a
// failed group's step ends in about one timeout, not one a call.
#include "common.cuh"

#define ALLREDUCE_MAX_RANKS 8

struct AllReduceParams {
	float *x;                               // [n] this rank's values, summed in place
	float *data[ALLREDUCE_MAX_RANKS];       // each rank's staging buffer [2][cap], by rank
	unsigned *sig[ALLREDUCE_MAX_RANKS];     // each rank's signal words [ranks][blocks], by rank
	unsigned *epoch;                        // [blocks] this rank's count of calls, by block
	const unsigned *abort_word;             // host memory: nonzero when the group is aborted
	unsigned *failed;                       // host memory: set to 1 by a wait that timed out
	long long n, cap;                       // values summed (n ≤ cap)
	unsigned long long timeout_ns;          // the longest wait before giving up
	int rank, ranks, blocks;                // blocks: the grid's size, the same on every rank
	int vec;                                // x, n and the slices allow 16-byte loads
};

__device__ __forceinline__ void store_release_sys(unsigned *p, unsigned v) {
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned load_acquire_sys(const unsigned *p) {
	unsigned v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ unsigned long long global_ns() {
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// allreduce_slice is block b's part of [0, n): a multiple of 4 values long, so that every slice but the
// last starts 16 bytes past the one before.
__device__ __forceinline__ void allreduce_slice(const AllReduceParams &p, long long &lo, long long &hi) {
	long long per = (p.n + p.blocks - 1) / p.blocks;
	per = (per + 3) / 4 * 4;
	lo = min((long long)blockIdx.x * per, p.n);
	hi = min(lo + per, p.n);
}

extern "C" __global__ void __launch_bounds__(512) AllReduceOneShot(const AllReduceParams p) {
	__shared__ unsigned s_epoch;
	__shared__ int s_failed;
	pdl_wait();
	const int b = blockIdx.x;
	if (threadIdx.x == 0) {
		s_epoch = p.epoch[b] + 1;
		s_failed = 0;
	}
	__syncthreads();
	const unsigned e = s_epoch;
	const long long half = (long long)(e & 1) * p.cap;
	long long lo, hi;
	allreduce_slice(p, lo, hi);

	// 1. This rank's slice into its staging half.
	float *mine = p.data[p.rank] + half;
	if (p.vec) {
		for (long long i = lo + 4 * (long long)threadIdx.x; i < hi; i += 4 * (long long)blockDim.x)
			*reinterpret_cast<float4 *>(mine + i) = *reinterpret_cast<const float4 *>(p.x + i);
	} else {
		for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = p.x[i];
	}
	__threadfence_system();
	__syncthreads();

	// 2. Arrive at every rank, then wait for every rank.
	const int t = threadIdx.x;
	if (t < p.ranks) {
		store_release_sys(p.sig[t] + p.rank * p.blocks + b, e);
		const unsigned *flag = p.sig[p.rank] + t * p.blocks + b;
		unsigned long long start = 0;
		for (unsigned spins = 0;; spins++) {
			if ((int)(load_acquire_sys(flag) - e) >= 0) break;
			if ((spins & 1023) != 1023) continue;
			// Checked now and then only: the words are host memory, a round trip over PCIe each.
			unsigned long long now = global_ns();
			if (start == 0) {
				start = now;
				continue;
			}
			// Another rank's wait that timed out ends this one too: a rank that gave up leaves its
			// epoch behind, so the group's counts no longer agree and no later wait could be met.
			if (*(volatile const unsigned *)p.abort_word != 0 || *(volatile const unsigned *)p.failed != 0) {
				s_failed = 1;
				break;
			}
			if (now - start > p.timeout_ns) {
				*(volatile unsigned *)p.failed = 1;
				__threadfence_system();
				s_failed = 1;
				break;
			}
		}
	}
	__syncthreads();
	if (s_failed) return; // the epoch stays: the group is finished

	// 3. The sum of every rank's slice, in rank order.
	if (p.vec) {
		for (long long i = lo + 4 * (long long)threadIdx.x; i < hi; i += 4 * (long long)blockDim.x) {
			float4 acc = __ldcg(reinterpret_cast<const float4 *>(p.data[0] + half + i));
			for (int r = 1; r < p.ranks; r++) {
				float4 v = __ldcg(reinterpret_cast<const float4 *>(p.data[r] + half + i));
				acc.x += v.x;
				acc.y += v.y;
				acc.z += v.z;
				acc.w += v.w;
			}
			*reinterpret_cast<float4 *>(p.x + i) = acc;
		}
	} else {
		for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
			float acc = __ldcg(p.data[0] + half + i);
			for (int r = 1; r < p.ranks; r++) acc += __ldcg(p.data[r] + half + i);
			p.x[i] = acc;
		}
	}
	if (threadIdx.x == 0) p.epoch[b] = e;
}
