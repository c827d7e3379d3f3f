// RMSNorm fused with the residual add (Backend.AddRMSNorm): residual += add (when given, a float matrix
// product's output, or the sum of its `adds` partial products add_stride floats apart, a product split by
// k), then dst = residual / sqrt(mean(residual²) + eps) · w, in T for the next product.
// Grid (rows), one block per row. When cols is a multiple of 4 and at most 16·blockDim, each thread keeps
// its (at most four) float4 chunks of the row in registers between the sum of squares and the scaling,
// so the residual is read once and written once, with 16-byte accesses; otherwise a strided scalar path
// re-reads the residual (the same thread wrote it: in L1). Bound by bytes: residual and add read once,
// residual and dst written once. Launched with programmatic dependent launch on sm_90 (common.cuh): it
// waits for the kernel before it, then lets the next (a skinny product) start streaming its weights.
#include "common.cuh"

struct AddRMSNormParams {
	void *dst;          // [rows][cols] of T
	float *residual;    // [rows][cols], updated in place
	const float *add;   // [adds][rows][cols], or null
	const float *weight; // [cols]
	float eps;
	int cols;
	int adds;              // ≥ 1 when add is given
	long long add_stride;  // floats from one partial product to the next
};

template <typename T> __device__ __forceinline__ void store4(T *dst, float a, float b, float c, float d) {
	dst[0] = Num<T>::store(a);
	dst[1] = Num<T>::store(b);
	dst[2] = Num<T>::store(c);
	dst[3] = Num<T>::store(d);
}

template <typename T> __device__ __forceinline__ void add_rms_norm(const AddRMSNormParams &p) {
	__shared__ float scratch[32];
	const long long row = blockIdx.x;
	float *res = p.residual + row * p.cols;
	const float *add = p.add ? p.add + row * p.cols : nullptr;
	T *dst = reinterpret_cast<T *>(p.dst) + row * p.cols;
	pdl_wait();
	pdl_launch_dependents();
	float ss = 0.f;
	constexpr int V = 4;
	const int n4 = p.cols >> 2;
	if ((p.cols & 3) == 0 && n4 <= V * (int)blockDim.x) {
		float4 v[V], w[V];
#pragma unroll
		for (int j = 0; j < V; j++) {
			const int i = threadIdx.x + j * blockDim.x;
			if (i < n4) {
				float4 x = reinterpret_cast<const float4 *>(res)[i];
				if (add) {
					float4 a = reinterpret_cast<const float4 *>(add)[i];
					for (int s = 1; s < p.adds; s++) {
						const float4 b = reinterpret_cast<const float4 *>(add + s * p.add_stride)[i];
						a.x += b.x;
						a.y += b.y;
						a.z += b.z;
						a.w += b.w;
					}
					x.x += a.x;
					x.y += a.y;
					x.z += a.z;
					x.w += a.w;
					reinterpret_cast<float4 *>(res)[i] = x;
				}
				v[j] = x;
				w[j] = reinterpret_cast<const float4 *>(p.weight)[i];
				ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
			}
		}
		ss = block_sum(ss, scratch);
		const float inv = 1.0f / sqrtf(ss / (float)p.cols + p.eps);
#pragma unroll
		for (int j = 0; j < V; j++) {
			const int i = threadIdx.x + j * blockDim.x;
			if (i < n4)
				store4<T>(dst + 4 * i, w[j].x * (v[j].x * inv), w[j].y * (v[j].y * inv), w[j].z * (v[j].z * inv),
				          w[j].w * (v[j].w * inv));
		}
		return;
	}
	for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
		float x = res[i];
		if (add) {
			float a = add[i];
			for (int s = 1; s < p.adds; s++) a += add[s * p.add_stride + i];
			x += a;
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

// NormAddRMSNorm normalises a sublayer's output in place (Gemma's post-attention and post-MLP norms, the
// in-place AddRMSNorm(x, x, none, x_w)): x = x / sqrt(mean(x²) + x_eps) · x_w in float, and, when residual
// is given, goes on as the AddRMSNorm that adds x to the residual stream would: residual += x, then
// dst = rmsnorm(residual) · w in T. One kernel for the two norms (the plan fuses them: a Gemma layer's
// sublayer norms would otherwise each be a launch and a round trip of the row). Grid (rows), one block a
// row; strided scalar loops (a thread re-reads only what it wrote: in L1). Every product is the CPU
// backend's: gain · (x · inv).
struct NormAddRMSNormParams {
	float *x;            // [rows][cols], normalised in place
	const float *x_w;    // [cols]
	float *residual;     // [rows][cols], or null: x's norm alone
	void *dst;           // [rows][cols] of T (with residual)
	const float *weight; // [cols] (with residual)
	float x_eps;
	float eps;
	int cols;
};

template <typename T> __device__ __forceinline__ void norm_add_rms_norm(const NormAddRMSNormParams &p) {
	__shared__ float scratch[32];
	const long long row = blockIdx.x;
	float *x = p.x + row * p.cols;
	pdl_wait();
	pdl_launch_dependents();
	float ss = 0.f;
	for (int i = threadIdx.x; i < p.cols; i += blockDim.x) ss += x[i] * x[i];
	ss = block_sum(ss, scratch);
	const float inv = 1.0f / sqrtf(ss / (float)p.cols + p.x_eps);
	float *res = p.residual ? p.residual + row * p.cols : nullptr;
	float rs = 0.f;
	for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
		const float v = p.x_w[i] * (x[i] * inv);
		x[i] = v;
		if (res) {
			const float r = res[i] + v;
			res[i] = r;
			rs += r * r;
		}
	}
	if (!res) return;
	rs = block_sum(rs, scratch);
	const float rinv = 1.0f / sqrtf(rs / (float)p.cols + p.eps);
	T *dst = reinterpret_cast<T *>(p.dst) + row * p.cols;
	for (int i = threadIdx.x; i < p.cols; i += blockDim.x) dst[i] = Num<T>::store(p.weight[i] * (res[i] * rinv));
}

#define NORM_ADD_RMS_NORM(T, TN)                                                                              \
	extern "C" __global__ void NormAddRMSNorm_##TN(const NormAddRMSNormParams p) { norm_add_rms_norm<T>(p); }
FOR_EACH_TYPE(NORM_ADD_RMS_NORM)
