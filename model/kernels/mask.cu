// Token masks on the device (structured output; the CUDA backend's masked pick, ../mask_cuda.go): the
// logits a row's mask leaves out become −∞ before the pick kernels run, so that the argmax and the
// draw only see the tokens the row's constraint allows. It is the twin of MaskLogits in ../mask.go:
// a logit left out becomes −∞ unless it is NaN or +∞, which stay for the pick's non-finite check.
//
// MaskRows: grid (ceil(cols / MASK_THREADS), masked rows), MASK_THREADS threads, one logit a thread.
// Each thread reads its token's 64-bit word of the row's bitset (64 neighbouring threads read the same
// word: one transaction) and touches its logit only when the bit is clear, so a row costs its bitset
// (cols/8 bytes) plus a read and a write of each logit left out. No shared memory, no reduction.
#include "common.cuh"

#define MASK_THREADS 256

struct MaskRowsParams {
	float *logits;                  // [rows][cols], masked in place
	const int *rows;                // [masked] the logits row of each mask
	const unsigned long long *bits; // [masked][words] bit t%64 of word t/64: token t allowed
	int cols;
	int words;
};

extern "C" __global__ void MaskRows(const MaskRowsParams p) {
	const int t = blockIdx.x * MASK_THREADS + threadIdx.x;
	const int m = blockIdx.y;
	if (t >= p.cols) return;
	const unsigned long long word = p.bits[(long long)m * p.words + (t >> 6)];
	if ((word >> (t & 63)) & 1ull) return;
	float *x = p.logits + (long long)p.rows[m] * p.cols + t;
	if (*x < INFINITY) *x = -INFINITY; // NaN and +∞ stay: the pick names such a row NonFinitePick
}
