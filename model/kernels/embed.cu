// Embedding gather: Model.Forward's first op (Backend.Embed). Grid (rows), block of up to 1024 threads
// striding over the hidden size; row t copies table[token] into the float residual stream, where token is
// tokens[t], or picks[from[t]] when from[t] >= 0: the token the previous step picked on the device
// (Step.InputFrom, pipelined decode), which the host has not seen yet. Bound by the bytes of the rows read
// (hidden · sizeof(T) per token) and written (hidden · 4).
#include "common.cuh"

struct EmbedParams {
	float *dst;          // [rows][hidden], the residual stream
	const void *table;   // [vocab][hidden] of T
	const int *tokens;   // [rows]
	const int *from;     // [rows]: −1, or the index into picks of row t's token
	const int *picks;    // the previous step's picked token ids
	int hidden;
};

template <typename T> __device__ __forceinline__ void embed(const EmbedParams &p) {
	const long long row = blockIdx.x;
	const int from = p.from[row];
	const long long tok = from >= 0 ? p.picks[from] : p.tokens[row];
	const T *src = reinterpret_cast<const T *>(p.table) + tok * p.hidden;
	float *dst = p.dst + row * p.hidden;
	for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) dst[i] = Num<T>::load(src[i]);
}

#define EMBED(T, TN)                                                                                          \
	extern "C" __global__ void Embed_##TN(const EmbedParams p) { embed<T>(p); }
FOR_EACH_TYPE(EMBED)
