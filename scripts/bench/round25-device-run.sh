#!/usr/bin/env bash
# Twenty-fifth round, `run` calls (carry gpu/p2; results under $OUT, summary.txt first). Call 1 ran
# round24-device-run.sh (see scripts/bench/results/round25/README.md); this script is call 2's:
#   sweeps  each shape file of SWEEPFILES (default: the batch, tail and overflow sweeps) by each binary of
#           SWEEPBINS (default "gollm-old gollm") in turn, files sweep-<file>-<tag>.json, --partitions
#           SWEEPPARTS (default 64,...,8192);
#   then    round24-device-run.sh with the remaining steps (abgrid, decodex, tests, decode, ...).
# Here: build as round22-device-run.sh's header says, gollm-old and old/model.test from the commit before
# the change. There: bash scripts/bench/round25-device-run.sh sweeps abgrid ...
set -uo pipefail
rest=()
for s in "$@"; do [ "$s" = sweeps ] || rest+=("$s"); done
source scripts/bench/device-common.sh
if [ ${#rest[@]} -ne $# ]; then
	for f in ${SWEEPFILES:-batch tail overflow}; do
		for b in ${SWEEPBINS:-gollm-old gollm}; do
			tag=new && [ "$b" != gollm ] && tag=${b#gollm-}
			gpu/p1/new/$b bench attention --shapes "scripts/bench/attention-$f-sweep.json" \
				--partitions "${SWEEPPARTS:-64,128,256,512,1024,2048,4096,8192}" \
				--json "$out/sweep-$f-$tag.json" >"$out/sweep-$f-$tag.txt" 2>"$out/sweep-$f-$tag.log"
			echo "sweep $f $tag rc=$? $(date -u +%H:%M:%S)" | tee -a "$out/summary.txt"
		done
	done
fi
[ ${#rest[@]} -eq 0 ] && { pack_results; exit 0; }
keep=$(mktemp) && mv "$out/summary.txt" "$keep"
OUT="$out" bash scripts/bench/round24-device-run.sh "${rest[@]}"
rc=$?
cat "$keep" "$out/summary.txt" >"$out/s" && mv "$out/s" "$out/summary.txt"
exit $rc
