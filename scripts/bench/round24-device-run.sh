#!/usr/bin/env bash
# Twenty-fourth round, `run` calls (carry gpu/p2; results under $OUT, summary.txt first). As
# round22-device-run.sh (its steps tests, atests, mtests, grid, ceiling, decode are run by it), plus:
#   abgrid  GRIDS (default 2) rounds of the grid (gollm bench attention --json) by each binary of GRIDBINS
#           (default "gollm-old gollm", files grid-old-rN and grid-new-rN; gollm-X writes grid-X-rN) in turn,
#           so that no build has the card to itself; then sdpa_peer.py.
#   sweep   SWEEPS (default 2) rounds of gollm bench attention $SWEEPARGS (e.g. --shapes
#           scripts/bench/attention-batch-sweep.json --only 32,...,95: its head_dim 64 shapes) by each binary of
#           SWEEPBINS in turn, files sweep-<tag>-rN.json as abgrid names them.
#   decodex as round22's decode step, by the model.test of gpu/p1/new/$XDIR (another build's), into decode-$XDIR.
# Here: build as round22-device-run.sh's header says, gollm-old from the commit before the change.
# There: bash scripts/bench/round24-device-run.sh STEP...   Results: scripts/bench/results/round24/.
set -uo pipefail
steps=" $* "
has() { case "$steps" in *" $1 "*) return 0 ;; esac; return 1; }
rest=()
for s in "$@"; do case $s in abgrid | sweep | decodex) ;; *) rest+=("$s") ;; esac; done
if has abgrid || has sweep || has decodex; then
	source scripts/bench/device-common.sh
	stamp() { echo "$1 $(date -u +%H:%M:%S)" | tee -a "$out/summary.txt"; }
	tagof() { if [ "$1" = gollm ]; then echo new; else echo "${1#gollm-}"; fi; }
	for r in $(seq 1 "${SWEEPS:-2}"); do
		has sweep || break
		for b in ${SWEEPBINS:-gollm-old gollm}; do
			tag=$(tagof "$b")
			# shellcheck disable=SC2086
			gpu/p1/new/$b bench attention ${SWEEPARGS:-} --json "$out/sweep-$tag-r$r.json" >"$out/sweep-$tag-r$r.txt" 2>"$out/sweep-$tag-r$r.log"
			stamp "sweep $tag r$r rc=$?"
		done
	done
	if has decodex; then
		: "${XDIR:?decodex needs XDIR: the folder under gpu/p1/new holding the other build model.test}"
		OUT="$out/decode-$XDIR" GOLLM_GPU_DIR=gpu/p1/new/$XDIR GOLLM_BENCH_CONTEXT=${CONTEXT:-2048} \
			VARIANTS="${VARIANTS:-default attn-noevict}" BATCHES="${BATCHES:-1|64}" ROUNDS="${ROUNDS:-2}" \
			bash scripts/bench/decode-variants-device-run.sh | tee -a "$out/summary.txt"
	fi
	for r in $(seq 1 "${GRIDS:-2}"); do
		has abgrid || break
		for b in ${GRIDBINS:-gollm-old gollm}; do
			tag=$(tagof "$b")
			gpu/p1/new/$b bench attention --json "$out/grid-$tag-r$r.json" >"$out/grid-$tag-r$r.txt" 2>"$out/grid-$tag-r$r.log"
			stamp "grid $tag r$r rc=$?"
		done
	done
	if has abgrid; then
		python3 scripts/bench/sdpa_peer.py --json "$out/sdpa.json" 2>"$out/sdpa.log"
		stamp "sdpa rc=$?"
	fi
	if [ ${#rest[@]} -eq 0 ]; then
		date -u | tee -a "$out/summary.txt"
		pack_results
		exit 0
	fi
	# round22-device-run.sh unpacks again and restarts summary.txt: keep this part's lines.
	keep=$(mktemp) && mv "$out/summary.txt" "$keep"
	OUT="$out" bash scripts/bench/round22-device-run.sh "${rest[@]}"
	rc=$?
	cat "$keep" "$out/summary.txt" >"$out/s" && mv "$out/s" "$out/summary.txt"
	exit $rc
fi
exec bash scripts/bench/round22-device-run.sh "${rest[@]}"
