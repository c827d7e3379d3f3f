// Embedding gather: Model.Forward's first op (Backend.Embed). Grid (rows), block of up to 1024 threads
// striding over the hidden size; row t copies table[tokens[t]] into the float residual stream. Bound by
// the bytes of the rows read (hidden · sizeof(T) per token) and written (hidden · 4).
#include "common.cuh"

struct EmbedParams {
	float *dst;          // [rows][hidden], the residual stream
	const void *table;   // [vocab][hidden] of T
	const int *tokens;   // [rows]
	int hidden;
};

template <typename T> __device__ __forceinline__ void embed(const EmbedParams &p) {
	const long long row = blockIdx.x;
	const long long tok = p.tokens[row];
	const T *src = reinterpret_cast<const T *>(p.table) + tok * p.hidden;
	float *dst = p.dst + row * p.hidden;
	for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) dst[i] = Num<T>::load(src[i]);
}

#define EMBED(T, TN)                                                                                          \
	extern "C" __global__ void Embed_##TN(const EmbedParams p) { embed<T>(p); }
FOR_EACH_TYPE(EMBED)
