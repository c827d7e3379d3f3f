#!/usr/bin/env bash
# build-fatbin.sh OUT.fatbin FILE... — compiles the .cu files among FILE into ONE fat binary for go:embed
# and stamps the hash of every FILE (name the .cuh headers too) beside it (OUT.fatbin.sha256), so CI can
# check that the committed binary was built from the committed sources (.ci/after.d/50-cuda.sh).
#
# The fat binary holds SASS for sm_80, sm_86, sm_89 and sm_90 plus compute_80 PTX (any newer GPU JIT-
# compiles it); nvcc 11.8 from Debian's nvidia-cuda-toolkit is enough (../../../shared/docs/gpu.md).
# Several .cu files become one translation unit (each includes its headers with #pragma once), so that
# one module holds every kernel of the package.
#
#   build-fatbin.sh OUT.fatbin FILE...          build and stamp
#   build-fatbin.sh --hash FILE...              print the stamp of the files (what CI compares)
#
# Run from the package folder (go generate does). NVCC overrides the compiler; GOLLM_CUDA_ARCHS="90"
# builds one architecture for a quick local check (never commit such a build: the stamp records it);
# GOLLM_NVCC_FLAGS adds nvcc flags (a diagnostic build's -D switches; never for a committed binary).
set -euo pipefail

ARCHS=${GOLLM_CUDA_ARCHS:-"80 86 89 90"}

# stamp prints the sha256 of the named files, in name order, then the architectures: equal stamps mean
# the same sources built for the same targets.
stamp() {
	local files
	files=$(printf '%s\n' "$@" | LC_ALL=C sort -u)
	# shellcheck disable=SC2086
	echo "$(cat $files | sha256sum | cut -d' ' -f1)  $(echo $files)"
	echo "archs: $ARCHS + compute_80 PTX"
}

if [ "${1:-}" = "--hash" ]; then
	shift
	stamp "$@"
	exit 0
fi

out=$1
shift
nvcc=${NVCC:-nvcc}
gencode=()
for a in $ARCHS; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
gencode+=(-gencode "arch=compute_80,code=compute_80")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unit=$tmp/unit.cu
for src in "$@"; do case $src in *.cu) echo "#include \"$(pwd)/$src\"" ;; esac; done >"$unit"

# shellcheck disable=SC2086
"$nvcc" -std=c++17 -O3 -fatbin --threads 0 -Xfatbin=-compress-all -I"$(pwd)" ${GOLLM_NVCC_FLAGS:-} "${gencode[@]}" -o "$tmp/out.fatbin" "$unit"
mv "$tmp/out.fatbin" "$out"
stamp "$@" >"$out.sha256"
echo "$out: $(wc -c <"$out") bytes; $(head -1 "$out.sha256")"
