#!/usr/bin/env bash
# Does the decode step's device time depend on what the KV pages hold and where the pool lies?
# BenchmarkCUDADecode (batch 1, default, context 1088) four ways in one call: zero pages in a small pool
# (the benchmark's default until then), pages filled by a prefill (GOLLM_BENCH_FILL_KV=1), the engine's
# pool (GOLLM_BENCH_POOL=full), both. Here: go test -c -tags cuda -o gpu/b5/model.test ./model;
# tar -C gpu/b5 -cf - model.test | xz -T1 -9 > gpu/pack/b5.tar.xz. There (carry gpu/pack): this script.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" gpu/b5 && xz -dc gpu/pack/b5.tar.xz | tar -C gpu/b5 -xf -
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64
for round in 1 2; do
	for env in "X=0" "GOLLM_BENCH_FILL_KV=1" "GOLLM_BENCH_POOL=full" "GOLLM_BENCH_FILL_KV=1 GOLLM_BENCH_POOL=full"; do
		(cd model && env $env GOLLM_BENCH_CONTEXT=1088 timeout 200 ../gpu/b5/model.test -test.run XXX \
			-test.bench 'CUDADecode/llama/batch=1/default$' -test.benchtime 20x 2>&1) >"$out/raw-$round-${env// /+}.txt"
		grep -E '^BenchmarkCUDADecode' "$out/raw-$round-${env// /+}.txt" | awk -v e="$env" '{l=e" "$1; for(i=2;i<=NF;i++) if ($(i) ~ /^(gpu-ms|pipe-ms)\/step$/) l=l" "$(i-1)" "$(i); print l}' | tee -a "$out/kv-layout.txt"
	done
done
