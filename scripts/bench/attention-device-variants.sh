#!/usr/bin/env bash
# One device call for the decode-attention work (docs/bench/attention-h100.md): the kernel correctness
# tests, the merge/partition variants (attention's BenchmarkCUDADecodeVariants), the gollm benchmark grid
# and the SDPA peer. Build here first (GOLLM_GPU_DIR=DIR scripts/bench/attention-build.sh), carry DIR, and
# run from the repository root:
#
#   GOLLM_GPU_DIR=DIR bash DIR/attention-device-variants.sh COMMIT
#
# Results go under $OUT (at most 7 files): attention-test.log, variants.txt, gollm-attention.json,
# bench-attention.txt, bench-attention.log, sdpa.json, sdpa.log.
set -uo pipefail
commit=${1:-unknown}
out=${OUT:-out}
bin=${GOLLM_GPU_DIR:-gpu}
mkdir -p "$out"
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
status=0
t0=$(date +%s)
(cd attention && timeout 150 "../$bin/attention.test" -test.run 'CUDA' -test.v -test.count=1 2>&1) >"$out/attention-test.log"
grep -E '^(--- FAIL|PASS|FAIL|ok)|decode_cuda_test.go' "$out/attention-test.log" | head -40
grep -q '^PASS' "$out/attention-test.log" || status=1
echo "attention tests: $(grep -c -- '--- PASS' "$out/attention-test.log") passed, $(grep -c -- '--- FAIL' "$out/attention-test.log") failed ($(( $(date +%s) - t0 )) s)"
if [ "${SKIP_VARIANTS:-0}" != 1 ]; then
	(cd attention && timeout 120 "../$bin/attention.test" -test.run '^$' -test.bench 'CUDADecodeVariants' -test.benchtime 1x 2>&1) >"$out/variants.txt"
	echo "variants: $(grep -c ' us' "$out/variants.txt") timings ($(( $(date +%s) - t0 )) s)"
fi
timeout 200 "$bin/gollm" bench attention --commit "$commit" --json "$out/gollm-attention.json" 2>"$out/bench-attention.log" >"$out/bench-attention.txt" || status=1
echo "gollm bench done ($(( $(date +%s) - t0 )) s)"
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/bench/sdpa_peer.py --json "$out/sdpa.json" >"$out/sdpa.log" 2>&1 || status=1
echo "sdpa done ($(( $(date +%s) - t0 )) s)"
cat "$out/bench-attention.txt"
exit $status
