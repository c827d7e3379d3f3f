#!/usr/bin/env bash
# A change to the model's kernels against the commit before it, in one `run` call: the new build's CUDA
# tests (package model, package engine), then BenchmarkCUDADecode (graph GPU ms and pipelined model ms
# per step) and BenchmarkCUDAGemv at one token, the old and the new test binary alternating ROUNDS
# times over, so that both see the same H100.
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/ab/new/model.test ./model (and engine.test), the
#        old commit's model.test into gpu/ab/old (git worktree), then
#        tar -C gpu -cf - ab/new/model.test ab/new/engine.test ab/old/model.test | xz -T0 -6 > gpu/pack/ab.tar.xz
# There (carry gpu/pack/ab.tar.xz):  [VARIANTS=…] [BATCHES=1|8] [ROUNDS=3] \
#        bash scripts/bench/ab-decode-device-run.sh [tests] [decode] [gemv]
# BINS names the builds to alternate (folders under gpu/ab, default "old new"; the tests run "new").
# Results under $OUT: model-test.log, engine-test.log, decode-BIN-rN/decode-r1.txt (through
# decode-variants-device-run.sh), gemv-BIN-rN.txt and a summary (summary.txt).
set -uo pipefail
steps=${*:-tests decode gemv}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
[ -f gpu/pack/ab.tar.xz ] && tar -C gpu -xJf gpu/pack/ab.tar.xz
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv,noheader | tee "$out/summary.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	(cd model && timeout 420 "$root/gpu/ab/new/model.test" -test.run 'CUDA|Golden' -test.v -test.count=1) >"$out/model-test.log" 2>&1
	echo "model tests rc=$? pass=$(grep -c -- '--- PASS' "$out/model-test.log") fail=$(grep -c -- '--- FAIL' "$out/model-test.log") skip=$(grep -c -- '--- SKIP' "$out/model-test.log")" | tee -a "$out/summary.txt"
	grep -E -- '--- FAIL|panic' "$out/model-test.log" | head -20
	(cd engine && timeout 200 "$root/gpu/ab/new/engine.test" -test.run CUDA -test.v -test.count=1) >"$out/engine-test.log" 2>&1
	echo "engine tests rc=$? pass=$(grep -c -- '--- PASS' "$out/engine-test.log") fail=$(grep -c -- '--- FAIL' "$out/engine-test.log")" | tee -a "$out/summary.txt"
	grep -E -- '--- FAIL|panic' "$out/engine-test.log" | head
fi
for r in $(seq 1 "${ROUNDS:-3}"); do
	for bin in ${BINS:-old new}; do
		if has decode; then # one round of decode-variants-device-run.sh on this build, its lines labelled
			OUT="$out/decode-$bin-r$r" GOLLM_GPU_DIR="gpu/ab/$bin" VARIANTS="${VARIANTS:-default}" BATCHES="${BATCHES:-1|8}" ROUNDS=1 \
				bash "$root/scripts/bench/decode-variants-device-run.sh" | grep '^Benchmark' | sed "s/^/$bin r$r /" | tee -a "$out/summary.txt"
		fi
		if has gemv && [ "$r" -le 2 ]; then
			(cd model && timeout 200 "$root/gpu/ab/$bin/model.test" -test.run XXX -test.bench 'CUDAGemv/.*/m=1$' -test.benchtime 1x) >"$out/gemv-$bin-r$r.txt" 2>&1
			awk -v bin=$bin -v r=$r '/^BenchmarkCUDAGemv/ {c = g = ""; for (i = 1; i <= NF; i++) { if ($i == "cublas-us") c = $(i-1); if ($i == "gemv-us") g = $(i-1) }; print bin, "r" r, $1, "cublas", c, "gemv", g}' \
				"$out/gemv-$bin-r$r.txt" | tee -a "$out/summary.txt"
		fi
	done
done
