// Embedding gather: Model.Forward's first op (Backend.Embed). Grid (rows), block of up to 1024 threads
// striding over the hidden size; row t copies table[token] into the float residual stream, where token is
// tokens[t], or picks[from[t]] when from[t] >= 0: the token the previous step picked on the device
// (Step.InputFrom, pipelined decode), which the host has not seen yet; a pick of −1 (a row whose logits
// held NaN or +∞, model.NonFinitePick) is fed as token 0, never read before the table: the host ends
// that sequence when it reads the pick and drops what this step computes for it. Bound by the bytes of
// the rows read (hidden · sizeof(T) per token) and written (hidden · 4).
//
// When the first layer's input norm is folded (gemv.cu, "Folded norm"; norm_out set), row t also writes
// norm_out[t] = row · norm_w in T and its sum of squares, in the folded norms' fixed point, into ss_out[t]
// (one block a row: a plain store, no atomics), and block 0 clears ss_zero (the next fold's sums).
//
// scale, when not zero, multiplies every embedding (Gemma's sqrt(hidden_size), Shape.EmbedScale): the
// caller rounds it to T and the product is rounded to T, as transformers multiplies the embeddings by
// the scale in their dtype.
#include "common.cuh"

struct EmbedParams {
	float *dst;          // [rows][hidden], the residual stream
	const void *table;   // [vocab][hidden] of T
	const int *tokens;   // [rows]
	const int *from;     // [rows]: −1, or the index into picks of row t's token
	const int *picks;    // the previous step's picked token ids
	unsigned long long *ss_out, *ss_zero; // folded norm: [rows] sums of squares; the next fold's, cleared
	void *norm_out;                        // folded norm: [rows][hidden] of T, row · norm_w
	const float *norm_w;                   // folded norm: [hidden]
	int hidden;
	float scale; // 0: none
};

// embed_value is element i of the row, scaled.
template <typename T> __device__ __forceinline__ float embed_value(const EmbedParams &p, const T *src, int i) {
	const float v = Num<T>::load(src[i]);
	return p.scale != 0.f ? Num<T>::load(Num<T>::store(v * p.scale)) : v;
}

template <typename T> __device__ __forceinline__ void embed(const EmbedParams &p) {
	const long long row = blockIdx.x;
	const int from = p.from[row];
	const long long tok = from >= 0 ? max(p.picks[from], 0) : p.tokens[row];
	const T *src = reinterpret_cast<const T *>(p.table) + tok * p.hidden;
	float *dst = p.dst + row * p.hidden;
	if (!p.norm_out) {
		for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) dst[i] = embed_value<T>(p, src, i);
		return;
	}
	__shared__ float scratch[32];
	T *xo = reinterpret_cast<T *>(p.norm_out) + row * p.hidden;
	float ss = 0.f;
	for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
		const float v = embed_value<T>(p, src, i);
		dst[i] = v;
		xo[i] = Num<T>::store(v * p.norm_w[i]);
		ss += v * v;
	}
	ss = block_sum(ss, scratch);
	if (threadIdx.x == 0) p.ss_out[row] = (unsigned long long)llrintf(ss * NORM_SCALE);
	if (blockIdx.x == 0 && threadIdx.x < NORM_MAX_TOKENS) p.ss_zero[threadIdx.x] = 0;
}

#define EMBED(T, TN)                                                                                          \
	extern "C" __global__ void Embed_##TN(const EmbedParams p) { embed<T>(p); }
FOR_EACH_TYPE(EMBED)
