#!/usr/bin/env bash
# BenchmarkCUDADecode variants against each other in one `run` call, ROUNDS times over (the sixth round's
# A/B runs: evict_first, the batch-1 plans, out16), printing the graph's GPU ms per step and the
# pipelined model step's ms.
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/mt/model.test ./model
# There (carry gpu/mt):  VARIANTS="default attn-noevict" BATCHES="1|64" ROUNDS=2 \
#                        bash scripts/bench/decode-variants-device-run.sh
# e.g. round6/b1-r*.txt: VARIANTS="default plan1 plan2 pipe1 pipe1-plan1 attn-noevict gemv-nopdl" BATCHES=1;
# flush256/decode-r*.txt: VARIANTS="default attn-noevict" BATCHES="1|64"; round6/out16/decode-r*.txt
# (branch out16): VARIANTS="default out32" BATCHES="16|64". Results under $OUT: decode-rN.txt.
set -uo pipefail
variants=$(echo "${VARIANTS:-default}" | sed 's/ /|/g')
batches=${BATCHES:-1|64}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial --format=csv,noheader
cd model || exit 1
for r in $(seq 1 "${ROUNDS:-2}"); do
	GOLLM_BENCH_CONTEXT=${GOLLM_BENCH_CONTEXT:-1088} timeout 280 ../${GOLLM_GPU_DIR:-gpu/mt}/model.test -test.run XXX \
		-test.bench "CUDADecode/.*/^batch=($batches)\$/^($variants)\$" -test.benchtime 20x >"$out/decode-r$r.txt" 2>&1
	echo "round $r rc=$?"
	awk '/^BenchmarkCUDADecode/ {g = p = ""; for (i = 1; i <= NF; i++) { if ($i == "gpu-ms/step") g = $(i-1); if ($i == "pipe-ms/step") p = $(i-1) }; print $1, g, p}' "$out/decode-r$r.txt"
done
