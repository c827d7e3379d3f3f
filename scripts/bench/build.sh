#!/usr/bin/env bash
# Cross-builds, here (no GPU needed; nvcc is not needed either, the kernels ship as committed fat
# binaries), everything scripts/bench/device-run.sh runs on the GPU machine, so that nothing is built
# there:
#
#   scripts/bench/build.sh [OUTDIR [SRCDIR]]
#
# OUTDIR (default gpu/bench, an ignored folder) gets gollm (go build -tags cuda) and the CUDA test
# binaries of internal/cuda, attention, model and engine (go test -c -tags cuda), a COMMIT file naming the
# source, and OUTDIR.tar.xz packing them all (about 17 MB against 90 MB unpacked: carry the archive, the
# `run` tool carries 64 MiB at most). SRCDIR builds another tree instead of this one, e.g. a
# `git worktree add /tmp/base COMMIT` of the commit before a change, for device-run.sh's BASE (the
# before/after comparison in one call):
#
#   scripts/bench/build.sh gpu/bench                  # this tree
#   scripts/bench/build.sh gpu/base /tmp/base         # the base commit's tree
#   run: carry gpu/bench.tar.xz (and gpu/base.tar.xz), command
#        BASE=gpu/base bash scripts/bench/device-run.sh decode
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-gpu/bench}
src=${2:-$root}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$src"
flags=(-tags cuda -ldflags=-s\ -w)
go build "${flags[@]}" -o "$out/gollm" ./cmd/gollm
for pkg in internal/cuda attention model engine; do
	go test -c "${flags[@]}" -o "$out/$(basename "$pkg").test" "./$pkg"
done
{
	git rev-parse HEAD
	git status --porcelain --untracked-files=no | sed 's/^/dirty: /'
} >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -9 -T1 >"$out.tar.xz"
ls -la "$out" "$out.tar.xz"
