// PrefillParams: the arguments of every prefill attention kernel (prefill.cu, prefill_sm90.cu), mirrored
// field for field by prefillParams in prefill_cuda.go.
#pragma once

struct PrefillParams {
	void *out;                // [rows][num_heads·head_dim] of T
	const void *q;            // [rows][num_heads·head_dim] of T (rotated)
	const void *k_cache;      // [num_blocks][block_size][num_kv_heads][head_dim] of T
	const void *v_cache;
	const int *block_tables;  // [seqs][max_blocks]
	const int *positions;     // [rows]
	const int *items;         // [num_items][4]: seq, first row, rows, first head of the group
	float scale;
	int num_heads;
	int num_kv_heads;
	int max_blocks;
	int block_size;
	int group;
	int heads_per_item;
	int window; // > 0: a sliding window, the row at position p attends to keys [p − window + 1, p]
	float k_scale; // FP8 KV (the _e4m3 kernels): a K code c reads back as float(c) · k_scale
	float v_scale; // and a V code as float(c) · v_scale; unused by the others
};

// prefill_rows_max ends a tile's online-softmax update of a thread's two rows in the mma fragment layout
// (each row spread over the quad of lanes 4·(lane/4)…+3): mx, the thread's running maxima with the tile's
// scores (log2 units), becomes the quad's; base is what the tile's scores are exponentiated against (0 for
// a row with no key yet, which stays at zero), alpha the factor the row's sums and accumulators take, and m
// the new maxima.
__device__ __forceinline__ void prefill_rows_max(float (&mx)[2], float (&m)[2], float (&base)[2], float (&alpha)[2]) {
#pragma unroll
	for (int i = 0; i < 2; i++) {
		mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
		mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
		base[i] = mx[i] == -INFINITY ? 0.f : mx[i];
		alpha[i] = exp2f(m[i] - base[i]);
		m[i] = mx[i];
	}
}
