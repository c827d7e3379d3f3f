#!/usr/bin/env bash
# The device half of the CUDA backend's proof and speed, for one `run` call on the GPU machine (build first
# with scripts/gpu/model-build.sh, carry gpu/model, run from the repository root):
#
#   bash scripts/gpu/model-device-run.sh [STEP...]   STEP: tests, gemv, bench, memcheck (default: all)
#
#   tests     the CUDA tests of package model (the golden suite on the GPU in float32, float32 without
#             graphs and the checkpoint's dtype; GPU against the CPU backend; the skinny product and its
#             fused epilogues against float64 references; auto-sized KV pool; device argmax), of package
#             engine (batching equivalence: concurrent = alone, with preemption), of internal/cuda and,
#             when gpu/model/attention.test is there, package attention's CUDA tests;
#   gemv      BenchmarkCUDAGemv: the decode products of Llama-3.2-1B and Llama-3-8B at 1…64 tokens,
#             cuBLAS against the skinny kernel and a sweep of its launch shapes;
#   bench     BenchmarkCUDADecode (Llama-3.2-1B and Llama-3-8B shapes, bf16, batch 1, 16 and 64, context
#             1024; every product on cuBLAS, then the default), with a per-op profile of each;
#   memcheck  compute-sanitizer memcheck over prefill + decode runs (GPU against CPU, on cuBLAS and on the
#             skinny GEMM; a golden), the skinny product's and the skinny GEMM's epilogue tests, and package
#             attention's split-k cases; each pattern must run tests (its slowed, reordered threads are what
#             exposed the fused split-k merge's missing barrier, docs/bench/attention-h100.md);
#   hostprof  a CPU profile (host-cpu.prof) of 3000 Llama-3.2-1B decode steps at batch 1;
#   base      BenchmarkCUDADecode of gpu/model/base.test, when there: a build of an earlier commit, run
#             in the same call for before/after numbers (not in the default steps).
#
# Results go under $OUT (or ./out): model-cuda-test.log, engine-cuda-test.log, gemv-bench.txt, bench.txt,
# bench-base.txt, memcheck.log. A summary is printed last.
set -uo pipefail
steps=${*:-tests gemv bench memcheck}
out=${OUT:-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,clocks.mem --format=csv,noheader
status=0
summary=""
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
count() { # count LOG NAME: pass/fail counts of a verbose test log
	summary+="$2: $(grep -c -- '--- PASS' "$1") passed, $(grep -c -- '--- FAIL' "$1") failed, $(grep -c -- '--- SKIP' "$1") skipped; "
	summary+="$(grep -E '^(ok|FAIL|PASS)' "$1" | tail -1)"$'\n'
}
if has tests; then
	(cd "$root/model" && timeout 300 ../gpu/model/model.test -test.run 'CUDA|Golden' -test.v -test.count=1) \
		>"$out/model-cuda-test.log" 2>&1 || status=1
	count "$out/model-cuda-test.log" model
	grep -E -- '--- FAIL|panic|backend_cuda_test.go:[0-9]+: .*(worst|steps eager)' "$out/model-cuda-test.log" | head -40
	(cd "$root/engine" && timeout 200 ../gpu/model/engine.test -test.run CUDA -test.v -test.count=1) \
		>"$out/engine-cuda-test.log" 2>&1 || status=1
	(cd "$root/internal/cuda" && timeout 60 ../../gpu/model/cuda.test -test.v -test.count=1) \
		>>"$out/engine-cuda-test.log" 2>&1 || status=1
	if [ -x gpu/model/attention.test ]; then
		(cd "$root/attention" && timeout 240 ../gpu/model/attention.test -test.run CUDA -test.v -test.count=1) \
			>>"$out/engine-cuda-test.log" 2>&1 || status=1
	fi
	count "$out/engine-cuda-test.log" "engine+internal/cuda+attention"
	grep -E -- '--- FAIL|panic|engine_cuda_test.go' "$out/engine-cuda-test.log" | head -20
fi
if has gemv; then
	(cd "$root/model" && timeout 240 ../gpu/model/model.test -test.run XXX -test.bench CUDAGemv -test.benchtime 1x -test.v) \
		>"$out/gemv-bench.txt" 2>&1 || status=1
	grep -E 'gemv_cuda_test.go:[0-9]+: ' "$out/gemv-bench.txt" | sed 's/^ *gemv_cuda_test.go:[0-9]*: //'
	grep -q '^ok\|^PASS' "$out/gemv-bench.txt" || { status=1; tail -20 "$out/gemv-bench.txt"; }
fi
if has bench; then
	(cd "$root/model" && timeout 300 ../gpu/model/model.test -test.run XXX -test.bench CUDADecode -test.benchtime 30x -test.v) \
		>"$out/bench.txt" 2>&1 || status=1
	grep -q '^ok\|^PASS' "$out/bench.txt" || { status=1; tail -20 "$out/bench.txt"; }
	summary+=$(grep -E '^BenchmarkCUDADecode' "$out/bench.txt" | awk '{
		line=$1; for (i=2;i<=NF;i++) if ($(i) ~ /^(ms\/step|gpu-ms\/step|host-ms\/step|%floor|floor-ms|ms\/prefill)$/) line=line" "$(i-1)" "$(i);
		print line }')$'\n'
fi
if has base && [ -x gpu/model/base.test ]; then # the backend before this work (built from its commit), for before/after
	(cd "$root/model" && timeout 200 ../gpu/model/base.test -test.run XXX -test.bench CUDADecode -test.benchtime 30x -test.v) \
		>"$out/bench-base.txt" 2>&1 || status=1
	summary+=$(grep -E '^BenchmarkCUDADecode' "$out/bench-base.txt" | awk '{
		line="base:"$1; for (i=2;i<=NF;i++) if ($(i) ~ /^(ms\/step|gpu-ms\/step|%floor)$/) line=line" "$(i-1)" "$(i);
		print line }')$'\n'
fi
if has hostprof; then # a CPU profile of the host side of Llama-3.2-1B decode steps at batch 1 (go tool pprof)
	(cd "$root/model" && timeout 120 ../gpu/model/model.test -test.run XXX -test.bench 'CUDADecode/llama-3.2-1b/batch=1$/default$' \
		-test.benchtime 3000x -test.cpuprofile "$out/host-cpu.prof" -test.v) >"$out/hostprof.txt" 2>&1 || status=1
	summary+=$(grep -E '^BenchmarkCUDADecode' "$out/hostprof.txt")$'\n'
fi
if has memcheck; then
	# One sanitizer run per test pattern (go test splits -run at slashes level by level, so alternatives
	# of whole paths in one pattern select nothing), each required to have run tests: a memcheck that ran
	# nothing is a failure, not a pass.
	sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
	: >"$out/memcheck.log"
	for pat in 'TestCUDAGemmSwiGLU/BF16/I200/' 'TestCUDAGemm/BF16/odd-300-300x1280/m33/' \
		'TestCUDAMatchesCPU/d128_BF16_gemm=true$' 'TestCUDAMatchesCPU/d64_BF16_gemm=false$' \
		'TestCUDAMatchesCPU/d128_F32_gemm=false$' 'TestCUDAGemv(SwiGLU|RoPE|Argmax|NormFold)$' \
		'TestCUDAGolden/llama3_bf16_tied_v5/(f32|native)$'; do
		log=$(mktemp)
		(cd "$root/model" && timeout ${MEMCHECK_TIMEOUT:-150} "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
			../gpu/model/model.test -test.count=1 -test.v -test.run "$pat") >"$log" 2>&1
		rc=$?
		ran=$(grep -c -- '--- PASS' "$log")
		echo "== $pat: exit $rc, $ran passed; $(grep 'ERROR SUMMARY' "$log")" | tee -a "$out/memcheck.log"
		grep -v -- '--- PASS\|^=== RUN' "$log" | tail -25 >>"$out/memcheck.log"
		rm -f "$log"
		summary+="memcheck $pat: exit $rc, $ran tests"$'\n'
		[ $rc = 0 ] && [ "$ran" -gt 0 ] || status=1
	done
	if [ -x gpu/model/attention.test ]; then # the decode kernels' own cases, both kernels at every shape (fused split-k merge included)
		log=$(mktemp)
		(cd "$root/attention" && timeout ${MEMCHECK_TIMEOUT:-150} "$sanitizer" --tool memcheck --error-exitcode 3 \
			--print-limit 20 ../gpu/model/attention.test -test.count=1 -test.v -test.run 'TestCUDADecodeKernels/bf16/d128/') >"$log" 2>&1
		rc=$?
		ran=$(grep -c -- '--- PASS' "$log")
		echo "== attention TestCUDADecodeKernels/bf16/d128/: exit $rc, $ran passed; $(grep 'ERROR SUMMARY' "$log")" | tee -a "$out/memcheck.log"
		rm -f "$log"
		summary+="memcheck attention TestCUDADecodeKernels/bf16/d128/: exit $rc, $ran tests"$'\n'
		[ $rc = 0 ] && [ "$ran" -gt 0 ] || status=1
	fi
fi
echo "=== summary"
printf '%s' "$summary"
exit $status
