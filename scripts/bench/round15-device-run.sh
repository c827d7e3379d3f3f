#!/usr/bin/env bash
# Fifteenth round, one `run` call: the model's CUDA tests, decode attention's L2 policy variants, the
# decode step's variants (BenchmarkCUDADecode, VARIANTS) and gollm bench latency, old against new.
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/p1/new/{model,attention}.test ./{model,attention};
#        go build -tags cuda -o gpu/p1/new/gollm ./cmd/gollm (and gollm-old from the build before);
#        tar -C gpu/p1 -cf - new | xz -9 > gpu/p2/all.tar.xz
# There (carry gpu/p2):  [TESTS=regexp] bash scripts/bench/round15-device-run.sh [tests] [engine] [memcheck]
#                        [policy] [decode] [e2e]
set -uo pipefail
steps=${*:-tests policy decode}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
mkdir -p gpu/p1 && tar -C gpu/p1 -xJf gpu/p2/all.tar.xz # always: a warm machine keeps the last call's binaries
bin=$root/gpu/p1/new
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv,noheader | tee "$out/summary.txt"
date -u | tee -a "$out/summary.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	(cd model && timeout 300 "$bin/model.test" -test.run "${TESTS:-CUDA|Golden|SplitOf}" -test.count=1 -test.v) >"$out/model-test.log" 2>&1
	echo "model tests: rc=$? pass=$(grep -c -- '--- PASS' "$out/model-test.log") fail=$(grep -c -- '--- FAIL' "$out/model-test.log")" | tee -a "$out/summary.txt"
	grep -E -- '--- FAIL|panic' "$out/model-test.log" | head -20 | tee -a "$out/summary.txt"
fi
if has engine; then
	(cd engine && timeout 200 "$bin/engine.test" -test.run CUDA -test.count=1 -test.v) >"$out/engine-test.log" 2>&1
	echo "engine tests: rc=$? pass=$(grep -c -- '--- PASS' "$out/engine-test.log") fail=$(grep -c -- '--- FAIL' "$out/engine-test.log")" | tee -a "$out/summary.txt"
fi
if has memcheck; then # compute-sanitizer memcheck on the split products' paths, each required to have run tests
	sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
	for pat in 'TestCUDAMatchesCPU/d128_BF16_gemm=false_rows$' 'TestCUDAMatchesCPU/d64_F32_gemm=false_rows$'; do
		log=$(mktemp)
		(cd model && timeout 200 "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
			"$bin/model.test" -test.count=1 -test.v -test.run "$pat") >"$log" 2>&1
		rc=$?
		echo "== memcheck $pat: exit $rc, $(grep -c -- '--- PASS' "$log") passed; $(grep 'ERROR SUMMARY' "$log")" | tee -a "$out/memcheck.log" "$out/summary.txt"
		[ "$rc" = 0 ] || tail -40 "$log" >>"$out/memcheck.log"
	done
fi
if has policy; then
	(cd attention && timeout 200 "$bin/attention.test" -test.run XXX -test.bench 'CUDADecodeVariants/.*/policy' -test.benchtime 1x) >"$out/policy.txt" 2>&1
	echo "policy rc=$?" | tee -a "$out/summary.txt"
fi
if has decode; then
	variants=$(echo "${VARIANTS:-default k-split}" | sed 's/ /|/g')
	for r in $(seq 1 "${ROUNDS:-2}"); do
		(cd model && GOLLM_BENCH_CONTEXT=1088 timeout 280 "$bin/model.test" -test.run XXX \
			-test.bench "CUDADecode/.*/^batch=(${BATCHES:-16|64})\$/^($variants)\$" -test.benchtime 20x) >"$out/decode-r$r.txt" 2>&1
		awk -v r=$r '/^BenchmarkCUDADecode/ {g = p = ""; for (i = 1; i <= NF; i++) { if ($i == "gpu-ms/step") g = $(i-1); if ($i == "pipe-ms/step") p = $(i-1) }; print "r" r, $1, g, p}' \
			"$out/decode-r$r.txt" | tee -a "$out/summary.txt"
	done
fi
if has e2e; then
	mkdir -p gpu/g7 && cp "$bin/gollm" "$bin/gollm-old" gpu/g7/
	BATCHES=${E2E_BATCHES:-1,16,64} OUT=$out/e2e bash scripts/bench/gemm-e2e-device-run.sh latency | tail -30
fi
