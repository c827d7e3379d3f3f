#!/usr/bin/env bash
# house-build.sh OUTDIR [SRCDIR] — builds here (no GPU needed) what house-check.sh runs on the device, from
# the checkout SRCDIR (default: this one): gollm with -tags cuda and, unless HOUSE_TESTS says otherwise,
# the CUDA test binaries of attention, model and engine (go test -c -tags cuda), stripped, into OUTDIR.
#
#   scripts/bench/house-build.sh /tmp/house/new                 # this checkout: gollm and the tests
#   git worktree add /tmp/house-src-old OLDCOMMIT
#   HOUSE_TESTS= scripts/bench/house-build.sh /tmp/house/old /tmp/house-src-old   # the old: gollm alone
#   mkdir -p gpu && tar -C /tmp/house -cf - old new | xz -9 -T0 >gpu/house.tar.xz
#
# Each binary embeds the fat binaries (about 12 MB) and gollm the built-in model: the five come to about
# 120 MB, the archive (xz -9 finds some of the copies) to 19-27 MB, well under the 64 MiB a device
# run carries (carry gpu, run scripts/bench/house-check.sh gpu/house.tar.xz).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [SRCDIR]" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
src=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
tests=${HOUSE_TESTS-attention model engine}
cd "$src"
flags=(-tags cuda -trimpath -ldflags=-s\ -w)
go build "${flags[@]}" -o "$out/gollm" ./cmd/gollm
for pkg in $tests; do
	go test -c "${flags[@]}" -o "$out/$pkg.test" "./$pkg"
done
echo "$src ($(git -C "$src" rev-parse --short HEAD)) → $out:"
ls -l "$out"
du -sh "$out"
