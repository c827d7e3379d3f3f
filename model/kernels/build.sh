#!/usr/bin/env bash
# build.sh — compiles the model's CUDA kernels (the *.cu files here and ../../attention/prefill.cu, the
# prefill attention kernel that package attention owns but the model's fat binary carries) into ONE fat
# binary, model.fatbin, embedded by kernels_cuda.go, and stamps the sources' hash beside it
# (model.fatbin.sha256) so that CI can check that the committed binary was built from the committed
# sources (.ci/after.d/55-model-cuda.sh).
#
# SASS for sm_80, sm_86, sm_89 and sm_90 plus compute_80 PTX (any newer GPU JIT-compiles it); nvcc 11.8
# from Debian's nvidia-cuda-toolkit is enough (see ../../../shared/docs/gpu.md, "The toolchain here").
#
#   build.sh               build model.fatbin and its stamp (go generate ./model/kernels runs this)
#   build.sh --stamp       print the stamp of the sources as they are now
#   build.sh --check DIR   compile the sources into DIR (proves they compile) and fail when the committed
#                          stamp differs from the sources' (CI)
#
# NVCC overrides the compiler.
set -euo pipefail
cd "$(dirname "$0")"

SOURCES=(argmax.cu embed.cu gather.cu gemv.cu norm.cu rope.cu sample.cu swiglu.cu ../../attention/prefill.cu)
HEADERS=(common.cuh)
ARCHS="80 86 89 90"

stamp() {
	echo "$(cat "${HEADERS[@]}" "${SOURCES[@]}" | sha256sum | cut -d' ' -f1)  ${HEADERS[*]} ${SOURCES[*]}"
	echo "archs: $ARCHS + compute_80 PTX"
}

compile() { # compile OUT.fatbin
	local out=$1 nvcc=${NVCC:-nvcc} gencode=() tmp
	for a in $ARCHS; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
	gencode+=(-gencode "arch=compute_80,code=compute_80")
	tmp=$(mktemp -d)
	for src in "${SOURCES[@]}"; do echo "#include \"$(pwd)/$src\""; done >"$tmp/unit.cu"
	"$nvcc" -std=c++17 -O3 -fatbin --threads 0 -Xfatbin -compress-all -I"$(pwd)" "${gencode[@]}" -o "$out" "$tmp/unit.cu"
	rm -rf "$tmp"
}

case "${1:-}" in
--stamp)
	stamp
	;;
--check)
	dir=${2:?usage: build.sh --check DIR}
	mkdir -p "$dir"
	compile "$dir/model.fatbin"
	if ! diff <(stamp) model.fatbin.sha256; then
		echo "model/kernels: model.fatbin.sha256 does not match the sources: run go generate ./model/kernels and commit model.fatbin" >&2
		exit 1
	fi
	echo "model/kernels: sources compile; stamp matches ($(head -c 16 model.fatbin.sha256)…)"
	;;
"")
	compile model.fatbin.tmp
	mv model.fatbin.tmp model.fatbin
	stamp >model.fatbin.sha256
	echo "model.fatbin: $(wc -c <model.fatbin) bytes; $(head -1 model.fatbin.sha256)"
	;;
*)
	echo "usage: build.sh [--stamp | --check DIR]" >&2
	exit 2
	;;
esac
