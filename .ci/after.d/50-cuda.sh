#!/usr/bin/env bash
# CI has no GPU, but it can prove that the CUDA side builds (nvcc from .ci/setup.d/50-cuda-toolkit.sh):
#   (a) the kernel sources of every fat binary stamped by internal/cuda/build-fatbin.sh compile (for one
#       architecture, sm_80, to stay quick: ptxas runs, so register and syntax errors show);
#   (b) each committed stamp (X.fatbin.sha256) equals the stamp of the committed sources, i.e. the
#       committed fat binary was regenerated (go generate) after the last edit of its sources, for the
#       full set of architectures;
#   (c) each committed PTX file beside a .cu of the same name whose header names its nvcc -ptx command (a
#       benchmark's kernel, loaded through the driver) is what that command makes of the .cu now (other
#       PTX, model/kernels', is checked by that package's own script);
#   (d) go vet and go build with -tags cuda over the whole module.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v nvcc >/dev/null 2>&1; then
	echo "50-cuda: nvcc not found (.ci/setup.d/50-cuda-toolkit.sh installs it)" >&2
	exit 1
fi
builder=$PWD/internal/cuda/build-fatbin.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for stampfile in $(git ls-files '*.fatbin.sha256'); do
	dir=$(dirname "$stampfile")
	fatbin=$(basename "$stampfile" .sha256)
	# Stamps written by build-fatbin.sh name their files on the first line; others (model/kernels has its
	# own build.sh and CI script) are not ours to check.
	if ! grep -q "build-fatbin.sh $fatbin" "$dir"/*.go 2>/dev/null; then
		continue
	fi
	read -r _ files < <(head -1 "$stampfile")
	# shellcheck disable=SC2086
	want=$(cd "$dir" && "$builder" --hash $files)
	if [ "$want" != "$(cat "$stampfile")" ]; then
		echo "50-cuda: $stampfile is stale: run go generate ./$dir and commit $dir/$fatbin" >&2
		echo "  committed: $(tr '\n' ' ' <"$stampfile")" >&2
		echo "  sources:   $(echo "$want" | tr '\n' ' ')" >&2
		status=1
	fi
	# shellcheck disable=SC2086
	if ! (cd "$dir" && GOLLM_CUDA_ARCHS=80 "$builder" "$tmp/$fatbin" $files >/dev/null); then
		echo "50-cuda: $dir: the kernel sources do not compile" >&2
		status=1
	fi
	echo "50-cuda: $dir/$fatbin: sources compile, stamp current"
done
for ptx in $(git ls-files '*.ptx'); do
	cu=${ptx%.ptx}.cu
	[ -f "$cu" ] || continue
	# The header's command, e.g. "//	nvcc -ptx -arch=compute_90 -O3 -o readceiling.ptx readceiling.cu".
	line=$(sed -n 's|^//[[:space:]]*\(nvcc -ptx .*\)$|\1|p' "$cu" | head -1)
	[ -n "$line" ] || continue
	read -r -a cmd <<<"$line"
	# Its output file replaced by one in $tmp (the -o argument follows -o).
	for i in "${!cmd[@]}"; do
		if [ "${cmd[$i]}" = -o ]; then cmd[i + 1]=$tmp/$(basename "$ptx"); fi
	done
	if ! (cd "$(dirname "$cu")" && "${cmd[@]}") || ! cmp -s "$tmp/$(basename "$ptx")" "$ptx"; then
		echo "50-cuda: $ptx is not what its header's command makes of $cu: regenerate and commit it" >&2
		status=1
		continue
	fi
	echo "50-cuda: $ptx: current"
done
go vet -tags cuda ./...
go build -tags cuda ./...
echo "50-cuda: go vet and go build -tags cuda ./... pass"
exit $status
