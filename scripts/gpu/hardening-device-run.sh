#!/usr/bin/env bash
# The GPU half of issue 42's hardening, for one `run` call on the GPU machine. Build here first (no GPU
# needed) with scripts/gpu/model-build.sh, carry gpu/model, and run from the repository root:
#
#   bash scripts/gpu/hardening-device-run.sh [STEP...]   STEP: lost, hardening (the default), model, engine
#
# Each step fits one call (10 minutes). With GOLLM_REQUIRE_GPU=1 (a missing GPU fails, not skips):
#   lost       internal/cuda's TestIsContextLost (the sticky driver errors that mark a device lost);
#   hardening  package model's tests of what the hardening changed on the device: the pick kernels' NaN/+Inf
#     sentinel (TestCUDAPickNonFinite: argmax and sampling kernels against the CPU twin on rows of
#     128256 logits; TestCUDANonFinitePicks: a NaN embedding row poisons one sequence in f32 and bf16,
#     graphs and eager, and 12 and 40 sequences on the skinny GEMM's fused argmax; the argmax, GEMV and
#     GEMM argmax tests with NaN and −Inf rows; sampling against its twin; pipelined picks), and the KV
#     pool checked against free device memory after the weights (TestCUDAKVTooLarge);
#   model, engine  package model's and package engine's whole CUDA suites (the fatbin changed; or
#              scripts/gpu/model-device-run.sh tests).
# Passing: every line of the summary says "0 failed" and ends in "ok". Logs under $OUT (or ./out).
set -uo pipefail
steps=${*:-lost hardening}
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
out=${OUT:-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
dir=$root/gpu/model
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
summary=""
run() { # run NAME PKGDIR BINARY PATTERN TIMEOUT
	local log="$out/$1.log"
	(cd "$root/$2" && timeout "$5" "$dir/$3" -test.run "$4" -test.v -test.count=1) >"$log" 2>&1
	summary+="$1: $(grep -c -- '--- PASS' "$log") passed, $(grep -c -- '--- FAIL' "$log") failed, $(grep -c -- '--- SKIP' "$log") skipped; $(grep -E '^(ok|FAIL|PASS)' "$log" | tail -1)"$'\n'
	grep -E -- '--- FAIL|panic' "$log" | head -20
}
has lost && run cuda-lost internal/cuda cuda.test '^TestIsContextLost$' 60
has hardening && run model-hardening model model.test '^(TestCUDAPickNonFinite|TestCUDANonFinitePicks|TestCUDAKVTooLarge|TestCUDAArgmaxTies|TestCUDAGemvArgmax|TestCUDAGemmArgmax|TestCUDASample.*|TestCUDAPipelinedPicks)$' 500
has model && run model-cuda model model.test 'CUDA' 570
has engine && run engine-cuda engine engine.test 'CUDA' 570
printf '%s' "$summary" | tee "$out/summary.txt"
