#!/usr/bin/env bash
# Twentieth round, one `run` call: does a kernel's time depend on where in the run it is measured?
# gollm bench attention and sdpa_peer.py on the ≥ 256 MB shapes, twice each, with the GPU's clocks, power
# and throttle reasons logged every 100 ms beside them.
# Here:  go build -tags cuda -ldflags="-s -w" -o gpu/p1/new/gollm ./cmd/gollm; gpu/p1/new/big.json (the
#        grid's ≥ 256 MB shapes); tar -C gpu/p1 -cf - new | xz -9 > gpu/p2/all.tar.xz
# There (carry gpu/p2):  bash scripts/bench/round20-device-run.sh
# Results under $OUT (summary.txt first). Results of round 20: scripts/bench/results/round20/.
source scripts/bench/device-common.sh
nvidia-smi -q -d PERFORMANCE,CLOCK,POWER >"$out/smi-q.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 >"$out/smi.csv" 2>&1 &
smi=$!
g=gpu/p1/new/gollm
shapes=${SHAPES:-gpu/p1/new/big.json}
stamp() { echo "$1 $(date -u +%H:%M:%S.%N)" | tee -a "$out/summary.txt"; }
for r in 1 2; do
	stamp "gollm r$r start"
	$g bench attention --shapes "$shapes" --experiments --json "$out/gollm-r$r.json" >"$out/gollm-r$r.txt" 2>"$out/gollm-r$r.log"
	stamp "gollm r$r rc=$?"
	python3 scripts/bench/sdpa_peer.py --shapes "$shapes" --rounds 3 --json "$out/sdpa-r$r.json" 2>"$out/sdpa-r$r.log"
	stamp "sdpa r$r rc=$?"
	sleep 3
done
kill $smi
date -u | tee -a "$out/summary.txt"
# `run` returns at most 8 files: pack everything but the summary.
(cd "$out" && tar -czf results.tar.gz --exclude summary.txt --exclude results.tar.gz . && find . -type f ! -name summary.txt ! -name results.tar.gz -delete)
