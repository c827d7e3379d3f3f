// Soft-capping of the logits (Backend.Softcap: Gemma's final_logit_softcapping): x = c · tanh(x / c) in
// place over the float logits [rows][cols], x / c in float, tanh evaluated in double and rounded, as the
// CPU backend computes it. A grid-stride loop over n elements, 256 threads a block. It runs before the
// greedy argmax and the sampler, which read the capped logits.
#include "common.cuh"

struct SoftcapParams {
	float *x;    // [n]
	long long n; // rows · cols
	float cap;
};

extern "C" __global__ void Softcap(const SoftcapParams p) {
	pdl_wait();
	pdl_launch_dependents();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n; i += (long long)gridDim.x * blockDim.x)
		p.x[i] = p.cap * (float)tanh((double)(p.x[i] / p.cap));
}
