#!/usr/bin/env bash
# Issue 10: run every fuzz target briefly on its seed corpus (testdata/fuzz/<target> and its f.Add
# seeds) plus 300 new inputs, so that a regression on a known input, or one found at once, fails CI;
# a target whose log shows no count of inputs run (it never reached f.Fuzz) fails too (issue 42). The targets are found by name (func FuzzXxx in *_test.go files without build
# constraints), so new ones are covered without editing this file. GOLLM_FUZZTIME sets the budget per
# target: a count of new inputs (300x) rather than a duration, because a duration also bounds the
# replay of the seed corpus ("gathering baseline coverage"), which on a loaded machine can outlast a
# second or two (FuzzRoundTrip loads two large tokenizers) and then fails with "context deadline
# exceeded". About a minute with a warm build cache, two to three when the instrumented test binaries
# must be compiled first. Long runs are for development:
#   go test -run '^$' -fuzz '^FuzzX$' -fuzztime 5m ./pkg
set -euo pipefail
cd "$(dirname "$0")/../.."
fuzztime=${GOLLM_FUZZTIME:-300x}
files=$(for f in $(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do
	grep -q '^//go:build' "$f" || echo "$f"
done)
pkgs=$(for f in $files; do dirname "$f"; done | sort -u)
status=0
ran=0
start=$(date +%s)
for dir in $pkgs; do
	targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $(echo "$files" | grep "^$dir/[^/]*$") | sed 's/^func //' | sort -u)
	for target in $targets; do
		# One log per package and target: two packages may have targets of the same name (FuzzParse).
		log="${TMPDIR:-/tmp}/fuzz-$(echo "${dir#./}" | tr / -)-$target.log"
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 2 "$dir" >"$log" 2>&1; then
			echo "-- $dir $target: FAILED"
			cat "$log"
			status=1
			continue
		fi
		# A target that never reached f.Fuzz (a skip, a seed that ended it) passes without fuzzing:
		# require the count of inputs it ran. Where the corpus cached in GOCACHE by earlier fuzzing holds
		# more inputs than the budget, the run ends while replaying it ("gathering baseline coverage:
		# N/M completed") before any count of new inputs: those N ran through f.Fuzz too.
		execs=$({ grep -oE 'execs: [0-9]+|baseline coverage: [0-9]+' "$log" || true; } | { grep -oE '[0-9]+$' || true; } | sort -n | tail -1)
		if [ -z "$execs" ] || [ "$execs" -eq 0 ]; then
			echo "-- $dir $target: ran no inputs"
			cat "$log"
			status=1
			continue
		fi
		echo "-- $dir $target: $execs execs"
		ran=$((ran + 1))
	done
done
echo "fuzzing took $(($(date +%s) - start))s: $ran targets ran"
exit "$status"
