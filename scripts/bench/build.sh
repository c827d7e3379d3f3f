#!/usr/bin/env bash
# Cross-builds, here (no GPU needed; nvcc is not needed either, the kernels ship as committed fat
# binaries), everything scripts/bench/device-run.sh runs on the GPU machine, so that nothing is built
# there:
#
#   scripts/bench/build.sh [OUTDIR [SRCDIR]]
#
# OUTDIR (default gpu/bench, an ignored folder) gets gollm (go build -tags cuda) and the CUDA test
# binaries of the packages in TESTS (default "internal/cuda attention model engine"; go test -c -tags
# cuda), all stripped (-trimpath -ldflags='-s -w'), a COMMIT file naming the source, and OUTDIR.tar.xz
# packing them. Every binary embeds the same fat binaries: one xz dictionary larger than the whole tar
# (192 MiB) stores them once, where xz -9e's 64 MiB window stores them again (19 MB against 26 MB for
# gollm and three test binaries). The archive must stay under LIMIT_MB (default 30; four test binaries
# come to about 23 MB): the `run` tool carries 64 MiB of ignored paths at most, and a before/after
# carries two archives; the script fails when it does not. The tool's 64 MiB also counts the tracked
# tree, itself about 63 MiB, of which the committed fat binaries and PTX (attention/attention.fatbin,
# model/kernels/model.fatbin, model/kernels/prefill_sm90.ptx: 31 MiB) are embedded in every binary
# built here (the model and engine suites and the decode benchmark ran without the files): move them
# out of the working tree for the call, and back after it.
#
# SRCDIR builds another tree instead of this one, e.g. a `git worktree add /tmp/base COMMIT` of the
# commit before a change, for device-run.sh's BASE (before and after in one call). `compare` and the
# sections that run gollm alone need no test binaries there; `decode` needs model's:
#
#   scripts/bench/build.sh gpu/bench                     # this tree
#   TESTS= scripts/bench/build.sh gpu/base /tmp/base     # the base commit's gollm (TESTS=model for decode)
#   run: carry gpu/bench.tar.xz and gpu/base.tar.xz, command
#        BASE=gpu/base bash scripts/bench/device-run.sh compare
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-gpu/bench}
src=$(cd "${2:-$root}" && pwd)
tests=${TESTS-internal/cuda attention model engine}
limit=${LIMIT_MB:-30}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*.test
cd "$src"
flags=(-tags cuda -trimpath -ldflags=-s\ -w)
go build "${flags[@]}" -o "$out/gollm" ./cmd/gollm
for pkg in $tests; do
	go test -c "${flags[@]}" -o "$out/$(basename "$pkg").test" "./$pkg"
done
{
	git rev-parse HEAD
	git status --porcelain --untracked-files=no | sed 's/^/dirty: /'
} >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz --lzma2=preset=9e,dict=192MiB -T1 >"$out.tar.xz"
size=$(wc -c <"$out.tar.xz")
echo "$src ($(head -1 "$out/COMMIT" | cut -c1-7)$(grep -q '^dirty' "$out/COMMIT" && echo ', with uncommitted changes')) → $out.tar.xz: $size bytes"
ls -l "$out"
if [ "$size" -gt $((limit * 1000 * 1000)) ]; then
	echo "build.sh: $out.tar.xz is $size bytes, over $limit MB" >&2
	exit 1
fi
