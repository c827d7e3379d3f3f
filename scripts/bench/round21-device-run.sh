#!/usr/bin/env bash
# Twenty-first round, `run` calls (carry gpu/p2; results under $OUT, summary.txt first):
#   pages   BenchmarkCUDADecodePages: pages random / in order, K and V in two pools / side by side in one.
#   tests   the build's CUDA suites: attention, model, engine.
#   sweep   gollm bench attention on attention-batch-sweep.json (four models' heads, batch 1-128, contexts
#           1024 and 4096): is the dispatcher within 5% of the faster kernel at every batch, not only the grid's?
#   tail    gollm bench attention on attention-tail-sweep.json: batches just past one wave of programs.
#   decode  BenchmarkCUDADecode (default variant, context CONTEXT, default 1088) at BATCHES (default 1|4|16), the build
#           before the change (gpu/p1/new/model-old.test) and after (model.test), alternating, ROUNDS times.
# (The grid: round20-device-run.sh grid.)
# Here:  go build -tags cuda -ldflags="-s -w" -o gpu/p1/new/gollm ./cmd/gollm; model-old.test from a
#        worktree of the commit before; go test -c -tags cuda -ldflags="-s -w" -o gpu/p1/new/X.test ./X for attention, model, engine;
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
	for p in attention model engine; do suite $p; done
fi
if has sweep; then
	gpu/p1/new/gollm bench attention --shapes scripts/bench/attention-batch-sweep.json --json "$out/sweep.json" \
		>"$out/sweep.txt" 2>"$out/sweep.log"
	stamp "sweep rc=$?"
fi
if has tail; then
	gpu/p1/new/gollm bench attention --shapes scripts/bench/attention-tail-sweep.json --json "$out/tail.json" \
		>"$out/tail.txt" 2>"$out/tail.log"
	stamp "tail rc=$?"
fi
if has decode; then
	for r in $(seq 1 "${ROUNDS:-2}"); do
		for v in old new; do
			bin=model.test
			[ $v = old ] && bin=model-old.test
			(cd model && GOLLM_BENCH_CONTEXT=${CONTEXT:-1088} timeout 250 "$root/gpu/p1/new/$bin" -test.run XXX \
				-test.bench "CUDADecode/.*/^batch=(${BATCHES:-1|4|16})\$/^default\$" -test.benchtime 20x) >"$out/decode-$v-r$r.txt" 2>&1
			stamp "decode $v r$r rc=$?"
			awk -v v=$v '/^BenchmarkCUDADecode/ {g = ""; for (i = 1; i <= NF; i++) if ($i == "gpu-ms/step") g = $(i-1); print v, $1, g}' \
				"$out/decode-$v-r$r.txt" | tee -a "$out/summary.txt"
		done
	done
fi
date -u | tee -a "$out/summary.txt"
pack_results
