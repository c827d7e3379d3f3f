#!/usr/bin/env bash
# Sourced by the per-round device scripts (rounds 17-19): unpacks
# gpu/p2/all.tar.xz into gpu/p1, sets out (an absolute $OUT) and root, the environment the test binaries
# need, starts summary.txt with the GPU's name, serial and clock and the date, and defines count.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
mkdir -p gpu/p1 && tar -C gpu/p1 -xJf gpu/p2/all.tar.xz
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv,noheader | tee "$out/summary.txt"
date -u | tee -a "$out/summary.txt"
# count LOG RC: a test log's exit status, passes and failures, then its first failures and panics.
count() { echo "rc=$2 pass=$(grep -c -- '--- PASS' "$1") fail=$(grep -c -- '--- FAIL' "$1")"; grep -E -- '--- FAIL|^panic' "$1" | head -20; }
# suite PKG [TIMEOUT]: PKG's CUDA tests (gpu/p1/new/PKG.test -test.run CUDA, run in PKG, TIMEOUT seconds,
# default 400) into $out/PKG-test.log, and their count into the summary; nothing where the build has no
# PKG.test.
suite() {
	[ -x "$root/gpu/p1/new/$1.test" ] || return 0
	(cd "$1" && timeout "${2:-400}" "$root/gpu/p1/new/$1.test" -test.run CUDA -test.count=1 -test.v) >"$out/$1-test.log" 2>&1
	echo "$1 tests: $(count "$out/$1-test.log" $?)" | tee -a "$out/summary.txt"
}
# pack_results: `run` returns at most 8 files, so everything under $out but summary.txt goes into
# results.tar.gz.
pack_results() {
	local tmp
	tmp=$(mktemp) && tar -C "$out" -czf "$tmp" --exclude summary.txt . && find "$out" -type f ! -name summary.txt -delete &&
		mv "$tmp" "$out/results.tar.gz"
}
