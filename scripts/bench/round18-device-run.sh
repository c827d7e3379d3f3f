#!/usr/bin/env bash
# Eighteenth round, one `run` call: old (main) and new builds of attention.test side by side.
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/p1/{old,new}/attention.test ./attention (old from a
#        worktree of the commit before), tar -C gpu/p1 -cf - old new | xz -9 > gpu/p2/all.tar.xz
# There (carry gpu/p2):  [BENCH=regexp] [ROUNDS=n] [TESTS=regexp] bash scripts/bench/round18-device-run.sh [tests] [variants] [floor]
#   tests     the new build's attention CUDA tests (TESTS, default CUDA) and, where gpu/p1/new/model.test
#             is, the model's step tests (MODEL_TESTS)
#   variants  BenchmarkCUDADecodeVariants (BENCH selects), old then new, ROUNDS times
#   floor     the new build's BenchmarkCUDALaunchFloor
# Results under $OUT (summary.txt first). Results of round 18: scripts/bench/results/round18/.
set -uo pipefail
steps=${*:-variants}
source scripts/bench/device-common.sh
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	(cd attention && timeout 300 "$root/gpu/p1/new/attention.test" -test.run "${TESTS:-CUDA}" -test.count=1 -test.v) >"$out/attention-test.log" 2>&1
	echo "attention tests: $(count "$out/attention-test.log" $?)" | tee -a "$out/summary.txt"
	if [ -x "$root/gpu/p1/new/model.test" ]; then
		(cd model && timeout 240 "$root/gpu/p1/new/model.test" -test.run "${MODEL_TESTS:-CUDAMatchesCPU|CUDAGolden|CUDAGreedy}" -test.count=1 -test.v) >"$out/model-test.log" 2>&1
		echo "model tests: $(count "$out/model-test.log" $?)" | tee -a "$out/summary.txt"
	fi
fi
if has variants; then
	for r in $(seq 1 "${ROUNDS:-1}"); do
		for b in old new; do
			(cd attention && timeout 250 "$root/gpu/p1/$b/attention.test" -test.run XXX -test.bench "CUDADecodeVariants/${BENCH:-.}" -test.benchtime 1x) >"$out/variants-$b-r$r.txt" 2>&1
			echo "variants $b r$r rc=$? $(grep -c '^Benchmark' "$out/variants-$b-r$r.txt") rows" | tee -a "$out/summary.txt"
		done
	done
fi
if has floor; then
	(cd attention && timeout 200 "$root/gpu/p1/new/attention.test" -test.run XXX -test.bench CUDALaunchFloor -test.benchtime 1x) >"$out/floor.txt" 2>&1
	echo "floor rc=$?" | tee -a "$out/summary.txt"
fi
date -u | tee -a "$out/summary.txt"
