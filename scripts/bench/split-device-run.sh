#!/usr/bin/env bash
# The small decode products with k split into partial products (fourteenth round), in one `run` call:
# BenchmarkCUDAGemmSplit (cuBLAS GemmEx against strided-batched k splits), then BenchmarkCUDADecode's
# VARIANTS at BATCHES (graph GPU ms and pipelined step ms), ROUNDS times, alternating the builds in BINS.
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/s1/BIN/model.test ./model  (one folder a build;
#        engine.test beside the first build's runs the engine's CUDA tests), packed by the caller (see
#        round14-device-run.sh)
# There (carry gpu/s1):  [BINS="new"] [VARIANTS="default"] [BATCHES="16|64"] [ROUNDS=2] \
#                        bash scripts/bench/split-device-run.sh [tests] [memcheck] [split] [decode]
# Results under $OUT: split.txt, decode-BIN-rN.txt, model-test.log, engine-test.log, memcheck.log and
# summary.txt.
set -uo pipefail
steps=${*:-split decode}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv,noheader | tee "$out/summary.txt"
date -u | tee -a "$out/summary.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
bins=${BINS:-new}
first=${TESTBIN:-${bins%% *}}
if has tests; then
	(cd model && timeout ${TEST_TIMEOUT:-300} "$root/gpu/s1/$first/model.test" -test.run "${TESTS:-CUDA|Golden}" -test.count=1 -test.v) >"$out/model-test.log" 2>&1
	echo "model tests ($first) rc=$? pass=$(grep -c -- '--- PASS' "$out/model-test.log") fail=$(grep -c -- '--- FAIL' "$out/model-test.log")" | tee -a "$out/summary.txt"
	grep -E -- '--- FAIL|panic' "$out/model-test.log" | head -20 | tee -a "$out/summary.txt"
	if [ -x "gpu/s1/$first/engine.test" ]; then
		(cd engine && timeout 200 "$root/gpu/s1/$first/engine.test" -test.run CUDA -test.count=1 -test.v) >"$out/engine-test.log" 2>&1
		echo "engine tests ($first) rc=$? pass=$(grep -c -- '--- PASS' "$out/engine-test.log") fail=$(grep -c -- '--- FAIL' "$out/engine-test.log")" | tee -a "$out/summary.txt"
		grep -E -- '--- FAIL|panic' "$out/engine-test.log" | head -20 | tee -a "$out/summary.txt"
	fi
fi
if has memcheck; then # one compute-sanitizer memcheck run per pattern, each required to have run tests
	sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
	: >"$out/memcheck.log"
	for pat in 'TestCUDAGemmArgmax/BF16/tie/m33/' 'TestCUDAGemmArgmax/BF16/negative/m64/' 'TestCUDAGreedyPicksGemm' \
		'TestCUDAMatchesCPU/d128_BF16_gemm=false$' 'TestCUDAMatchesCPU/d128_F32_gemm=false$'; do
		log=$(mktemp)
		(cd model && timeout 200 "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
			"$root/gpu/s1/$first/model.test" -test.count=1 -test.v -test.run "$pat") >"$log" 2>&1
		rc=$?
		ran=$(grep -c -- '--- PASS' "$log")
		echo "== memcheck $pat: exit $rc, $ran passed; $(grep 'ERROR SUMMARY' "$log")" | tee -a "$out/memcheck.log" "$out/summary.txt"
		[ "$rc" = 0 ] && [ "$ran" -gt 0 ] || tail -40 "$log" >>"$out/memcheck.log"
	done
fi
if has split; then
	(cd model && timeout 240 "$root/gpu/s1/$first/model.test" -test.run XXX -test.bench CUDAGemmSplit -test.benchtime 1x -test.v) >"$out/split.txt" 2>&1
	echo "split rc=$?" | tee -a "$out/summary.txt"
	grep -E 'GemmEx' "$out/split.txt" | sed 's/^ *[a-z_]*\.go:[0-9]*: //' | tee -a "$out/summary.txt"
fi
if has decode; then
	variants=$(echo "${VARIANTS:-default}" | sed 's/ /|/g')
	for r in $(seq 1 "${ROUNDS:-2}"); do
		for bin in $bins; do
			(cd model && GOLLM_BENCH_CONTEXT=1088 timeout 280 "$root/gpu/s1/$bin/model.test" -test.run XXX \
				-test.bench "CUDADecode/.*/^batch=(${BATCHES:-16|64})\$/^($variants)\$" -test.benchtime 20x) >"$out/decode-$bin-r$r.txt" 2>&1
			awk -v bin=$bin -v r=$r '/^BenchmarkCUDADecode/ {g = p = ""; for (i = 1; i <= NF; i++) { if ($i == "gpu-ms/step") g = $(i-1); if ($i == "pipe-ms/step") p = $(i-1) }; print bin, "r" r, $1, g, p}' \
				"$out/decode-$bin-r$r.txt" | tee -a "$out/summary.txt"
		done
	done
fi
