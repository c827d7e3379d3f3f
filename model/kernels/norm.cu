// RMSNorm fused with the residual add (Backend.AddRMSNorm): residual += add (when given, a float matrix
// product's output), then dst = residual / sqrt(mean(residual²) + eps) · w, in T for the next product. Grid (rows), one block per row striding over the
// hidden size: the first pass adds, stores the residual and sums squares in float; a block reduction
// gives the mean; the second pass re-reads the residual (the same thread wrote it: no barrier needed,
// and it is in L1) and writes dst in T. Bound by bytes: residual read twice and written once, add read
// once, dst written once.
#include "common.cuh"

struct AddRMSNormParams {
	void *dst;          // [rows][cols] of T
	float *residual;    // [rows][cols], updated in place
	const float *add;   // [rows][cols], or null
	const float *weight; // [cols]
	float eps;
	int cols;
};

template <typename T> __device__ __forceinline__ void add_rms_norm(const AddRMSNormParams &p) {
	__shared__ float scratch[32];
	const long long row = blockIdx.x;
	float *res = p.residual + row * p.cols;
	const float *add = p.add ? p.add + row * p.cols : nullptr;
	T *dst = reinterpret_cast<T *>(p.dst) + row * p.cols;
	float ss = 0.f;
	for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
		float x = res[i];
		if (add) {
			x += add[i];
			res[i] = x;
		}
		ss += x * x;
	}
	ss = block_sum(ss, scratch);
	const float inv = 1.0f / sqrtf(ss / (float)p.cols + p.eps);
	for (int i = threadIdx.x; i < p.cols; i += blockDim.x) dst[i] = Num<T>::store(p.weight[i] * (res[i] * inv));
}

#define ADD_RMS_NORM(T, TN)                                                                                   \
	extern "C" __global__ void AddRMSNorm_##TN(const AddRMSNormParams p) { add_rms_norm<T>(p); }
FOR_EACH_TYPE(ADD_RMS_NORM)
