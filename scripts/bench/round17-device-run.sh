#!/usr/bin/env bash
# Seventeenth round, one `run` call: the split-k merge's critical path. Correctness of the new build, then
# old against new (two builds: the change is in the kernels) on attention's variants (with the diagnostic
# cuts at the plan's partition) and on the issue-6 grid.
# Here:  for each of old (the commit before) and new: go test -c -tags cuda -ldflags="-s -w" -o
#        gpu/p1/BUILD/attention.test ./attention; go build -tags cuda -ldflags="-s -w" -o gpu/p1/BUILD/gollm
#        ./cmd/gollm; for new also model.test; tar -C gpu/p1 -cf - old new | xz -9 > gpu/p2/all.tar.xz
# There (carry gpu/p2):  [TESTS=regexp] [BENCH=regexp] bash scripts/bench/round17-device-run.sh [tests] [variants] [decode] [grid] [sdpa]
#   tests     the new build: attention's CUDA tests, the model's step tests (TESTS)
#   variants  BenchmarkCUDADecodeVariants (BENCH selects), old then new
#   decode    BenchmarkCUDADecode at BATCHES (1|64), context CONTEXT (1088), ROUNDS rounds, old and new
#             (new also with the VARIANTS named)
#   grid      gollm bench attention on the issue-6 grid, old then new (--json)
#   sdpa      scripts/bench/sdpa_peer.py on the grid
# Results under $OUT (summary.txt first). Results of round 17: scripts/bench/results/round17/.
set -uo pipefail
steps=${*:-tests variants grid}
source scripts/bench/device-common.sh
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	new=$root/gpu/p1/new
	(cd attention && timeout 240 "$new/attention.test" -test.run CUDA -test.count=1 -test.v) >"$out/attention-test.log" 2>&1
	echo "attention tests: $(count "$out/attention-test.log" $?)" | tee -a "$out/summary.txt"
	if [ -x "$new/model.test" ]; then
		(cd model && timeout 240 "$new/model.test" -test.run "${TESTS:-CUDAMatchesCPU|CUDAGolden|CUDAGreedy}" -test.count=1 -test.v) >"$out/model-test.log" 2>&1
		echo "model tests: $(count "$out/model-test.log" $?)" | tee -a "$out/summary.txt"
		grep -E 'largest|relative' "$out/model-test.log" | head -40 | tee -a "$out/summary.txt"
	fi
fi
if has variants; then
	for b in old new; do
		(cd attention && timeout 200 "$root/gpu/p1/$b/attention.test" -test.run XXX -test.bench "CUDADecodeVariants/${BENCH:-.}" -test.benchtime 1x) >"$out/variants-$b.txt" 2>&1
		echo "variants $b rc=$? $(grep -c '^Benchmark' "$out/variants-$b.txt") rows" | tee -a "$out/summary.txt"
	done
fi
if has decode; then # BenchmarkCUDADecode (GPU ms a step) at BATCHES, ROUNDS rounds; new also with VARIANTS
	for r in $(seq 1 "${ROUNDS:-1}"); do
		for b in old new; do
			v=default
			[ $b = new ] && v=$(echo "default ${VARIANTS:-}" | sed 's/ *$//; s/ /|/g')
			(cd model && GOLLM_BENCH_CONTEXT=${CONTEXT:-1088} timeout 280 "$root/gpu/p1/$b/model.test" -test.run XXX \
				-test.bench "CUDADecode/.*/^batch=(${BATCHES:-1|64})\$/^($v)\$" -test.benchtime 20x) >"$out/decode-$b-r$r.txt" 2>&1
			awk -v r=$r -v b=$b '/^BenchmarkCUDADecode/ {g = ""; for (i = 1; i <= NF; i++) if ($i == "gpu-ms/step") g = $(i-1); print "r" r, b, $1, g}' \
				"$out/decode-$b-r$r.txt" | tee -a "$out/summary.txt"
		done
	done
fi
if has grid; then
	for b in old new; do
		"$root/gpu/p1/$b/gollm" bench attention --commit "$b" --json "$out/grid-$b.json" >"$out/grid-$b.txt" 2>"$out/grid-$b.log"
		echo "grid $b rc=$?" | tee -a "$out/summary.txt"
	done
fi
if has sdpa; then
	PYTHONUNBUFFERED=1 timeout 200 python3 scripts/bench/sdpa_peer.py --json "$out/sdpa.json" >"$out/sdpa.log" 2>&1
	echo "sdpa rc=$?" | tee -a "$out/summary.txt"
fi
date -u | tee -a "$out/summary.txt"
