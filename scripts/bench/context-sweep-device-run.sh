#!/usr/bin/env bash
# The batch-1 decode step's device time across the contexts of gollm bench latency's steps (1025-1152,
# one graph of cap 2048): BenchmarkCUDADecode at each GOLLM_BENCH_CONTEXT of $CONTEXTS, in one call.
# Here: go test -c -tags cuda -o gpu/b5/model.test ./model; tar -C gpu/b5 -cf - model.test | xz -T1 -9 >
# gpu/pack/b5.tar.xz. There (carry gpu/pack): this script.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" gpu/b5 && xz -dc gpu/pack/b5.tar.xz | tar -C gpu/b5 -xf -
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64
for ctx in ${CONTEXTS:-1025 1040 1056 1072 1088 1089 1100 1120 1136 1152}; do
	(cd model && GOLLM_BENCH_CONTEXT=$ctx timeout 200 ../gpu/b5/model.test -test.run XXX \
		-test.bench "CUDADecode/llama/^batch=1\$/^${VARIANT:-default}\$" -test.benchtime 20x 2>&1) >"$out/raw.txt"
	grep -E '^BenchmarkCUDADecode' "$out/raw.txt" | awk -v c="$ctx" '{l="ctx "c" "$1; for(i=2;i<=NF;i++) if ($(i) ~ /^(gpu-ms|pipe-ms)\/step$/) l=l" "$(i-1)" "$(i); print l}' | tee -a "$out/sweep.txt"
done
