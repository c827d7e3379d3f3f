#!/usr/bin/env bash
# families-build.sh OUT.tar.xz [SRCDIR] — builds here (no GPU needed) what families-check.sh runs on the
# device, from the checkout SRCDIR (default: this one): gollm with -tags cuda and the CUDA test binaries
# of attention, model and engine (go test -c -tags cuda), stripped (-trimpath -ldflags='-s -w'), in one
# xz tar (files at its root). The archive must stay under 22 MB (the device run carries it with the
# checkout); the script says so when it does not.
#
#   scripts/bench/families-build.sh gpu/families.tar.xz
#   (device, carry gpu) bash scripts/bench/families-check.sh gpu/families.tar.xz
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT.tar.xz [SRCDIR]" >&2; exit 2; }
mkdir -p "$(dirname "$1")"
out=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
cd "$src"
flags=(-tags cuda -trimpath -ldflags=-s\ -w)
go build "${flags[@]}" -o "$bins/gollm" ./cmd/gollm
for pkg in attention model engine; do
	go test -c "${flags[@]}" -o "$bins/$pkg.test" "./$pkg"
done
# One dictionary over the whole tar (192 MiB, more than its size): every binary embeds the same fat
# binaries, which a smaller window would store again (26 MB with xz -9e's 64 MiB, 19 MB with this).
tar -C "$bins" -cf - gollm attention.test model.test engine.test | xz --lzma2=preset=9e,dict=192MiB -T1 >"$out"
size=$(wc -c <"$out")
echo "$src ($(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet HEAD || echo ', with uncommitted changes')) → $out: $size bytes"
ls -l "$bins"
if [ "$size" -gt $((22 * 1000 * 1000)) ]; then
	echo "families-build: $out is $size bytes, over 22 MB" >&2
	exit 1
fi
