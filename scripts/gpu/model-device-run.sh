#!/usr/bin/env bash
# The device half of the CUDA backend's proof, for one `run` call on the GPU machine (build first with
# scripts/gpu/model-build.sh, carry gpu/, run from the repository root):
#
#   bash scripts/gpu/model-device-run.sh [STEP...]      STEP: tests, bench, memcheck (default: all three)
#
#   tests     the CUDA tests of package model: the golden suite on the GPU (float32, float32 without
#             graphs, and the checkpoint's dtype), GPU against the CPU backend with the decode kernels of
#             package attention, auto-sized KV pool, device argmax;
#   memcheck  compute-sanitizer memcheck over a prefill + decode run (eager, captured and replayed graphs,
#             the prefill and decode attention kernels, cuBLAS);
#   bench     BenchmarkCUDADecode (Llama-3.2-1B and Llama-3-8B shapes, bf16, batch 1 and 64, context 1024).
#
# Results go under $OUT (or ./out): model-cuda-test.log, memcheck.log, bench.txt.
set -uo pipefail
steps=${*:-tests bench memcheck}
out=${OUT:-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
cd model || exit 1
status=0
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	timeout 240 ../gpu/model/model.test -test.run 'CUDA|Golden' -test.v -test.count=1 2>&1 | tee "$out/model-cuda-test.log" |
		grep -E '^(--- FAIL|PASS|FAIL|ok)|backend_cuda_test.go' | head -120
	grep -q '^PASS' "$out/model-cuda-test.log" || status=1
	echo "model tests: $(grep -c -- '--- PASS' "$out/model-cuda-test.log") passed, $(grep -c -- '--- FAIL' "$out/model-cuda-test.log") failed"
fi
if has bench; then
	timeout 200 ../gpu/model/model.test -test.run XXX -test.bench CUDADecode -test.benchtime 30x -test.v 2>&1 | tee "$out/bench.txt" |
		grep -E 'Benchmark|loaded|ok|FAIL'
	grep -q '^ok\|^PASS' "$out/bench.txt" || status=1
fi
if has memcheck; then
	sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
	timeout 200 "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 ../gpu/model/model.test -test.count=1 \
		-test.run 'TestCUDAMatchesCPU/d64_bf16$|TestCUDAMatchesCPU/d128_f32$|TestCUDAGolden/llama3_bf16_tied_v5/(f32|native)$' \
		>"$out/memcheck.log" 2>&1
	rc=$?
	tail -5 "$out/memcheck.log"
	echo "memcheck exit status $rc"
	[ $rc = 0 ] || status=1
fi
exit $status
