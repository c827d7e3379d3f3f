#!/usr/bin/env bash
# Twenty-first round, `run` calls (carry gpu/p2; results under $OUT, summary.txt first):
#   pages   BenchmarkCUDADecodePages: pages random / in order, K and V in two pools / side by side in one.
#   tests   the build's CUDA suites: attention, model, engine.
# (The grid and the model's decode step: round20-device-run.sh grid decode.)
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/p1/new/X.test ./X for attention, model, engine;
#        tar -C gpu/p1 -cf - new | xz -9 > gpu/p2/all.tar.xz
# There: bash scripts/bench/round21-device-run.sh STEP...   Results of round 21: scripts/bench/results/round21/.
source scripts/bench/device-common.sh
steps=" $* "
has() { case "$steps" in *" $1 "*) return 0 ;; esac; return 1; }
stamp() { echo "$1 $(date -u +%H:%M:%S)" | tee -a "$out/summary.txt"; }
if has pages; then
	(cd attention && timeout 500 "$root/gpu/p1/new/attention.test" -test.run XXX -test.bench CUDADecodePages \
		-test.benchtime 1x) >"$out/pages.txt" 2>&1
	stamp "pages rc=$?"
fi
if has tests; then
	for p in attention model engine; do
		[ -x "$root/gpu/p1/new/$p.test" ] || continue
		(cd $p && timeout 400 "$root/gpu/p1/new/$p.test" -test.run CUDA -test.count=1 -test.v) >"$out/$p-test.log" 2>&1
		echo "$p tests: $(count "$out/$p-test.log" $?)" | tee -a "$out/summary.txt"
	done
fi
date -u | tee -a "$out/summary.txt"
pack_results
