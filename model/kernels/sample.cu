// Sampling on the device (the CUDA backend's SampleToHost): out[r] = the token drawn from logits row r
// under row r's temperature, min-p, top-k and top-p, with the uniform the host computed for that row
// (a counter-based hash of the request's seed and output index, model/sample.go). It is the twin of
// sampleRowCPU in ../sample.go; read that first, the steps and their order are the same.
//
// A row may have a mask (structured output, ../mask_cuda.go): a bitset of the tokens its constraint
// allows. The mask is folded into the reads of the row: the pick runs on the row as MaskLogits
// (../mask.go) would leave it, every token the mask leaves out −∞ except NaN and +∞, which stay. So the
// first pass reads every logit (a NaN or +∞ anywhere, allowed or not, makes the row NonFinitePick) and
// takes the max over the allowed ones; every later pass skips the tokens the mask leaves out without
// reading them (a −∞ is never eligible, and never beats the argmax's start), so that a mask allowing
// few tokens makes those passes cheap. The logits are never written.
//
// SampleRows: grid (rows), 1024 threads, one block per row, no sort of the vocabulary:
//   1. max of the row (of its allowed tokens); a row holding NaN or +∞ names no token: out = −1
//      (model.NonFinitePick, the CPU twin's rule), kept 0; greedy rows (invT 0) and rows of −∞ take the
//      argmax, the lowest index on ties;
//   2. a token is eligible when (x − max)·invT ≥ floor (floor = ln min_p, or the float underflow limit);
//      the eligible tokens are the best of the row, so every filter keeps a best-first prefix of the order
//      (value descending, index ascending), described by a cut (key, need): every eligible token with a
//      larger value, plus the first `need` (lowest indices) of those equal to it;
//   3. top-k: the k-th largest value by bisection over the 32-bit order-preserving key of the floats
//      (32 counting passes at most);
//   4. top-p: bisection for the smallest value v whose strictly-better mass is below top_p × the mass
//      kept so far, then how many of the tokens equal to v still start below that mass;
//   5. draw: each thread owns a contiguous segment of the row; scans of the segments' tie counts and kept
//      masses find the segment where the cumulative mass (vocabulary order) first exceeds u × total, and
//      its thread walks it.
#include "common.cuh"

#define SAMPLE_THREADS 1024

struct SampleRowArgs {
	float invT;  // 1/temperature; 0 = greedy
	float floor; // eligibility: (x − max)·invT ≥ floor
	int topK;    // 0 = off
	float topP;  // off unless in (0, 1)
	float u;     // the row's uniform in [0, 1)
	int mask;    // 1 + the index of the row's bitset in SampleParams.masks; 0 = unmasked
};

struct SampleParams {
	int *out;                  // [rows]
	int *kept;                 // [rows] how many tokens the draw chose from (tests); may be null
	const float *logits;       // [rows][cols]
	const SampleRowArgs *args; // [rows]
	const unsigned long long *masks; // [masked rows][words] bit t%64 of word t/64: token t allowed
	int cols;
	int words;
};

// RowMask is a row's mask in the kernel: its bitset, or null when every token is allowed.
struct RowMask {
	const unsigned long long *bits;
	// allows reports whether token i is allowed. The 32 lanes of a warp reading neighbouring tokens read
	// the same word: one load, cached.
	__device__ __forceinline__ bool allows(int i) const {
		return !bits || ((__ldg(bits + (i >> 6)) >> (i & 63)) & 1ull);
	}
};

// sample_key maps a float to an unsigned key of the same order (−0 just below +0; NaN is never asked).
__device__ __forceinline__ unsigned sample_key(float f) {
	const unsigned b = __float_as_uint(f);
	return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float sample_unkey(unsigned k) {
	return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// block_sum_int is block_sum for ints (every thread gets the total).
__device__ __forceinline__ int block_sum_int(int v, int *scratch) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	__syncthreads();
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	v = lane < warps ? scratch[lane] : 0;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float block_max(float v, float *scratch) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	__syncthreads();
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	v = lane < warps ? scratch[lane] : -INFINITY;
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_exscan returns the sum of v over the threads before this one; total gets the block's sum.
template <typename V> __device__ __forceinline__ V block_exscan(V v, V &total, V *scratch) {
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	V inc = v;
	for (int o = 1; o < 32; o <<= 1) {
		const V n = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o) inc += n;
	}
	__syncthreads();
	if (lane == 31) scratch[warp] = inc;
	__syncthreads();
	V before = 0, all = 0;
	for (int w = 0; w < warps; w++) {
		if (w < warp) before += scratch[w];
		all += scratch[w];
	}
	total = all;
	return before + inc - v;
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) SampleRows(const SampleParams p) {
	__shared__ float fs[32];
	__shared__ int is[32];
	__shared__ int picked;
	const int row = blockIdx.x, n = p.cols, tid = threadIdx.x, nt = blockDim.x;
	const float *x = p.logits + (long long)row * n;
	const SampleRowArgs a = p.args[row];
	const RowMask mk{a.mask > 0 ? p.masks + (long long)(a.mask - 1) * p.words : nullptr};

	float mx = -INFINITY;
	bool bad = false;
	for (int i = tid; i < n; i += nt) {
		const float v = x[i];
		bad |= !(v < INFINITY); // NaN or +∞, allowed or not
		if (mk.allows(i)) mx = fmaxf(mx, v);
	}
	if (__syncthreads_or(bad)) {
		if (tid == 0) {
			p.out[row] = -1;
			if (p.kept) p.kept[row] = 0;
		}
		return;
	}
	mx = block_max(mx, fs);
	if (a.invT == 0.f || isinf(mx)) {
		float v = -INFINITY;
		int idx = 0x7fffffff;
		for (int i = tid; i < n; i += nt)
			if (mk.allows(i) && x[i] > v) {
				v = x[i];
				idx = i;
			}
		__syncthreads();
		argmax_block(v, idx);
		if (tid == 0) {
			p.out[row] = idx == 0x7fffffff ? 0 : idx;
			if (p.kept) p.kept[row] = 1;
		}
		return;
	}
	const float invT = a.invT, floor = a.floor;
	auto eligible = [&](float v) { return v == v && (v - mx) * invT >= floor; };

	// The cut: eligible tokens with key > cutKey, and the first `need` with key == cutKey.
	unsigned cutKey = 0;
	int need = 0x7fffffff;
	int count = 0;
	for (int i = tid; i < n; i += nt) count += mk.allows(i) && eligible(x[i]);
	const int nE = block_sum_int(count, is);
	const unsigned maxKey = sample_key(mx);

	if (a.topK > 0 && a.topK < nE) {
		unsigned lo = 0, hi = maxKey; // the largest key K with count(key >= K) >= k
		while (lo < hi) {
			const unsigned mid = lo + (hi - lo + 1) / 2;
			int c = 0;
			for (int i = tid; i < n; i += nt) {
				if (!mk.allows(i)) continue;
				const float v = x[i];
				c += eligible(v) && sample_key(v) >= mid;
			}
			if (block_sum_int(c, is) >= a.topK) lo = mid;
			else hi = mid - 1;
		}
		int c = 0;
		for (int i = tid; i < n; i += nt) {
			if (!mk.allows(i)) continue;
			const float v = x[i];
			c += eligible(v) && sample_key(v) > lo;
		}
		cutKey = lo;
		need = a.topK - block_sum_int(c, is);
	}

	if (a.topP > 0.f && a.topP < 1.f) {
		// Mass kept so far: everything above the cut plus `need` of the ties at it.
		float above = 0.f;
		int eq = 0;
		for (int i = tid; i < n; i += nt) {
			if (!mk.allows(i)) continue;
			const float v = x[i];
			if (!eligible(v)) continue;
			const unsigned k = sample_key(v);
			if (k > cutKey) above += expf((v - mx) * invT);
			else if (k == cutKey) eq++;
		}
		above = block_sum(above, fs);
		eq = block_sum_int(eq, is);
		const float cutW = expf((sample_unkey(cutKey) - mx) * invT);
		// (cutKey 0 names no float: its "weight" is NaN, and no token has it.)
		const float target = a.topP * (min(eq, need) > 0 ? above + (float)min(eq, need) * cutW : above);
		unsigned lo = cutKey, hi = maxKey; // the smallest key v with mass(key > v) < target
		while (lo < hi) {
			const unsigned mid = lo + (hi - lo) / 2;
			float m = 0.f;
			for (int i = tid; i < n; i += nt) {
				if (!mk.allows(i)) continue;
				const float v = x[i];
				if (eligible(v) && sample_key(v) > mid) m += expf((v - mx) * invT);
			}
			if (block_sum(m, fs) < target) hi = mid;
			else lo = mid + 1;
		}
		float m = 0.f;
		int ties = 0;
		for (int i = tid; i < n; i += nt) {
			if (!mk.allows(i)) continue;
			const float v = x[i];
			if (!eligible(v)) continue;
			const unsigned k = sample_key(v);
			if (k > lo) m += expf((v - mx) * invT);
			else if (k == lo) ties++;
		}
		m = block_sum(m, fs);
		ties = block_sum_int(ties, is);
		if (lo == cutKey) ties = min(ties, need);
		const float w = expf((sample_unkey(lo) - mx) * invT);
		const float room = ceilf((target - m) / w);
		cutKey = lo;
		need = max(1, min(ties, room >= (float)ties ? ties : (int)room));
	}

	// Draw over contiguous segments, in vocabulary order.
	const float cutW = expf((sample_unkey(cutKey) - mx) * invT);
	const int seg = (n + nt - 1) / nt, s0 = min(n, tid * seg), s1 = min(n, s0 + seg);
	int eq = 0, nAbove = 0;
	float above = 0.f;
	int last = -1;
	for (int i = s0; i < s1; i++) {
		if (!mk.allows(i)) continue;
		const float v = x[i];
		if (!eligible(v)) continue;
		const unsigned k = sample_key(v);
		if (k > cutKey) {
			above += expf((v - mx) * invT);
			last = i;
			nAbove++;
		} else if (k == cutKey) eq++;
	}
	int eqTotal;
	const int tieOff = block_exscan(eq, eqTotal, is);
	const int myTies = max(0, min(eq, need - tieOff));
	const float mass = myTies > 0 ? above + (float)myTies * cutW : above;
	float total;
	const float start = block_exscan(mass, total, fs);
	if (tid == 0) picked = -1;
	__syncthreads();
	const float t = a.u * total;
	if (mass > 0.f && start <= t && t < start + mass) {
		float cum = start;
		int tie = tieOff, choice = -1;
		for (int i = s0; i < s1; i++) {
			if (!mk.allows(i)) continue;
			const float v = x[i];
			if (!eligible(v)) continue;
			const unsigned k = sample_key(v);
			float w = 0.f;
			if (k > cutKey) w = expf((v - mx) * invT);
			else if (k == cutKey && tie++ < need) w = cutW;
			if (w == 0.f) continue;
			choice = i;
			cum += w;
			if (cum > t) break;
		}
		picked = choice;
	}
	// The last kept token of the row: the fallback when rounding leaves t at or past the total.
	if (myTies > 0) {
		int tie = tieOff;
		for (int i = s0; i < s1; i++) {
			if (!mk.allows(i)) continue;
			const float v = x[i];
			if (eligible(v) && sample_key(v) == cutKey && tie++ < need) last = max(last, i);
		}
	}
	float lv = 0.f;
	int li = last < 0 ? 0x7fffffff : -last; // argmax_block keeps the smallest index: negate for the largest
	lv = last < 0 ? -INFINITY : 0.f;
	argmax_block(lv, li);
	if (p.kept) nAbove = block_sum_int(nAbove, is);
	if (tid == 0) {
		if (p.kept) p.kept[row] = nAbove + min(eqTotal, need);
		const int fallback = li == 0x7fffffff ? 0 : -li;
		p.out[row] = picked >= 0 ? picked : fallback;
	}
}
