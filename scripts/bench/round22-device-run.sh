#!/usr/bin/env bash
# Twenty-second round, `run` calls (carry gpu/p2; results under $OUT, summary.txt first):
#   tests   the build's CUDA suites: attention, model, engine.
#   grid    gollm bench attention --json (the table's protocol; gollm-old's first where the build has one),
#           then sdpa_peer.py, in the same call.
#   atests  attention's CUDA suite only; mtests the model's.
#   decode  BenchmarkCUDADecode, VARIANTS (default "default attn-noevict"; calls 3 and 6 passed the variants
#           of their experiments' builds, attn-prefetch and attn-nocluster, since reverted) at BATCHES
#           (default 1|64), context CONTEXT (default 2048), ROUNDS (default 2) times.
#   ceiling BenchmarkCUDAReadCeiling (a read-only kernel over the same pages, permuted and in order, beside
#           the plan's decode call), then sdpa_peer.py --rounds 2: how fast can any paged kernel read them?
# Here:  go build -tags cuda -ldflags="-s -w" -o gpu/p1/new/gollm ./cmd/gollm; go test -c -tags cuda
#        -ldflags="-s -w" -o gpu/p1/new/X.test ./X for attention, model, engine;
#        tar -C gpu/p1 -cf - new | xz -9 -T8 > gpu/p2/all.tar.xz
# There: bash scripts/bench/round22-device-run.sh STEP...   Results of round 22: scripts/bench/results/round22/.
source scripts/bench/device-common.sh
steps=" $* "
has() { case "$steps" in *" $1 "*) return 0 ;; esac; return 1; }
stamp() { echo "$1 $(date -u +%H:%M:%S)" | tee -a "$out/summary.txt"; }
g=gpu/p1/new/gollm
if has tests; then
	for p in attention model engine; do suite $p; done
fi
has atests && suite attention "${ATIMEOUT:-400}"
has mtests && suite model
if has grid; then
	if [ -x gpu/p1/new/gollm-old ]; then # the build before the change, first
		gpu/p1/new/gollm-old bench attention --json "$out/grid-old.json" >"$out/grid-old.txt" 2>"$out/grid-old.log"
		stamp "grid old rc=$?"
	fi
	$g bench attention --json "$out/grid.json" >"$out/grid.txt" 2>"$out/grid.log"
	stamp "grid rc=$?"
	python3 scripts/bench/sdpa_peer.py --json "$out/sdpa.json" 2>"$out/sdpa.log"
	stamp "sdpa rc=$?"
fi
if has ceiling; then
	(cd attention && timeout 400 "$root/gpu/p1/new/attention.test" -test.run XXX -test.bench CUDAReadCeiling \
		-test.benchtime 1x -test.v) >"$out/ceiling.txt" 2>&1
	stamp "ceiling rc=$?"
	python3 scripts/bench/sdpa_peer.py --rounds 2 --json "$out/sdpa.json" 2>"$out/sdpa.log"
	stamp "sdpa rc=$?"
	grep -E "read kernel|grouped s" "$out/ceiling.txt" | sort -u >>"$out/summary.txt"
	awk '/^Benchmark/ {for (i = 2; i <= NF; i++) if ($i == "us") print $1, $(i-1)}' "$out/ceiling.txt" >>"$out/summary.txt"
fi
if has decode; then
	OUT="$out/decode" GOLLM_GPU_DIR=gpu/p1/new GOLLM_BENCH_CONTEXT=${CONTEXT:-2048} \
		VARIANTS="${VARIANTS:-default attn-noevict}" BATCHES="${BATCHES:-1|64}" ROUNDS="${ROUNDS:-2}" \
		bash scripts/bench/decode-variants-device-run.sh | tee -a "$out/summary.txt"
fi
date -u | tee -a "$out/summary.txt"
pack_results
