#!/usr/bin/env bash
# The device half of the decode-attention work, for one `run` call on the GPU machine (see
# docs/bench/attention-h100.md): the device-layer and kernel correctness tests, then the benchmark grid
# and the SDPA peer in the same run. Build here first (scripts/bench/attention-build.sh puts the
# binaries in gpu/ or $GOLLM_GPU_DIR), carry that folder, and run from the repository root:
#
#   bash scripts/bench/attention-device-run.sh [tests|bench|all] [COMMIT] [extra gollm bench args...]
#
# Results go under $OUT (or ./out): *.log, gollm-attention.json, sdpa.json.
set -uo pipefail
what=${1:-all}
commit=${2:-unknown}
shift 2 2>/dev/null || shift $#
out=${OUT:-out}
bin=${GOLLM_GPU_DIR:-gpu}
mkdir -p "$out"
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
	"$bin/cuda.test" -test.v -test.count=1 2>&1 | tee "$out/cuda-test.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|_test.go' | grep -v '=== RUN' || true
	grep -q '^PASS' "$out/cuda-test.log" || status=1
	(cd attention && "../$bin/attention.test" -test.run 'CUDA' -test.v -test.count=1 2>&1) | tee "$out/attention-test.log" |
		grep -E '^(--- FAIL|PASS|FAIL|ok)|_test.go|plan' | head -80
	grep -q '^PASS' "$out/attention-test.log" || status=1
	echo "attention tests: $(grep -c -- '--- PASS' "$out/attention-test.log") passed, $(grep -c -- '--- FAIL' "$out/attention-test.log") failed"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
	"$bin/gollm" bench attention --commit "$commit" --json "$out/gollm-attention.json" "$@" 2>"$out/bench-attention.log" | tee "$out/bench-attention.txt" || status=1
	PYTHONUNBUFFERED=1 python3 scripts/bench/sdpa_peer.py --json "$out/sdpa.json" 2>&1 | tee "$out/sdpa.log" | tail -3 || status=1
	cat "$out/bench-attention.txt"
fi
exit $status
