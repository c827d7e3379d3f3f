#!/usr/bin/env bash
# Twentieth round, `run` calls (carry gpu/p2; results under $OUT, summary.txt first):
#   order   call 1: does a kernel's time depend on where in the run it is measured? gollm bench attention
#           and sdpa_peer.py on the >= 256 MB shapes (gpu/p1/new/big.json), twice each, with the GPU's
#           clocks, power and throttle reasons logged every 100 ms beside them.
#   tests   the new build's CUDA suites: attention, model, engine.
#   grid    gollm bench attention --json (the table's protocol), then with --experiments (each tuning
#           switch timed after the plan), then sdpa_peer.py.
#   decode  BenchmarkCUDADecode, VARIANTS (default "default attn-no-touch") at BATCHES, ROUNDS times.
# Here:  go build -tags cuda -ldflags="-s -w" -o gpu/p1/new/gollm ./cmd/gollm; go test -c -tags cuda
#        -ldflags="-s -w" -o gpu/p1/new/X.test ./X for attention, model, engine;
#        tar -C gpu/p1 -cf - new | xz -9 > gpu/p2/all.tar.xz
# There: bash scripts/bench/round20-device-run.sh STEP...   Results of round 20: scripts/bench/results/round20/.
source scripts/bench/device-common.sh
steps=" $* "
has() { case "$steps" in *" $1 "*) return 0 ;; esac; return 1; }
g=gpu/p1/new/gollm
stamp() { echo "$1 $(date -u +%H:%M:%S)" | tee -a "$out/summary.txt"; }
if has order; then
	nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 >"$out/smi.csv" 2>&1 &
	smi=$!
	for r in 1 2; do
		$g bench attention --shapes gpu/p1/new/big.json --experiments --json "$out/gollm-r$r.json" >"$out/gollm-r$r.txt" 2>"$out/gollm-r$r.log"
		stamp "gollm r$r rc=$?"
		python3 scripts/bench/sdpa_peer.py --shapes gpu/p1/new/big.json --rounds 3 --json "$out/sdpa-r$r.json" 2>"$out/sdpa-r$r.log"
		stamp "sdpa r$r rc=$?"
		sleep 3
	done
	kill $smi
fi
if has tests; then
	for p in attention model engine; do suite $p; done
fi
if has grid; then
	$g bench attention --json "$out/grid.json" >"$out/grid.txt" 2>"$out/grid.log"
	stamp "grid rc=$?"
	$g bench attention --experiments --json "$out/grid-exp.json" >"$out/grid-exp.txt" 2>"$out/grid-exp.log"
	stamp "grid experiments rc=$?"
	python3 scripts/bench/sdpa_peer.py --json "$out/sdpa.json" 2>"$out/sdpa.log"
	stamp "sdpa rc=$?"
fi
if has decode; then
	OUT="$out/decode" GOLLM_GPU_DIR=gpu/p1/new VARIANTS="${VARIANTS:-default attn-no-touch}" BATCHES="${BATCHES:-1|64}" \
		ROUNDS="${ROUNDS:-2}" bash scripts/bench/decode-variants-device-run.sh | tee -a "$out/summary.txt"
fi
date -u | tee -a "$out/summary.txt"
# `run` returns at most 8 files: pack everything but the summary.
tmp=$(mktemp) && tar -C "$out" -czf "$tmp" --exclude summary.txt . && find "$out" -type f ! -name summary.txt -delete &&
	mv "$tmp" "$out/results.tar.gz"
