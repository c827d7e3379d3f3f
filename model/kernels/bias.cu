// The bias of a matrix product (Weight.Bias: Qwen2's q, k and v projections), added after the product
// (where decode attention rotates the product's output, it adds the bias itself and this kernel does not
// run):
// y[r][c] += bias[c] over y [rows][cols] (float, the product's output). A grid-stride loop over rows ·
// cols elements, 256 threads a block.
#include "common.cuh"

struct AddBiasParams {
	float *y;          // [rows][cols]
	const float *bias; // [cols]
	long long n;       // rows · cols
	int cols;
};

extern "C" __global__ void AddBias(const AddBiasParams p) {
	pdl_wait();
	pdl_launch_dependents();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n; i += (long long)gridDim.x * blockDim.x)
		p.y[i] += p.bias[i % p.cols];
}
