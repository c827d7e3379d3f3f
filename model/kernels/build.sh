#!/usr/bin/env bash
# build.sh — compiles the model's CUDA kernels (the *.cu files here and ../../attention/prefill.cu, the
# prefill attention kernel that package attention owns but the model's fat binary carries) into ONE fat
# binary, model.fatbin, the Hopper skinny GEMM (gemm_sm90.cu) into gemm_sm90.ptx and the Hopper FP8
# product (fp8_sm90.cu) into fp8_sm90.ptx, all embedded by kernels_cuda.go, and stamps the sources' hash beside them (model.fatbin.sha256) so that CI can check
# that the committed binaries were built from the committed sources (.ci/after.d/55-model-cuda.sh).
#
# model.fatbin: SASS for sm_80, sm_86, sm_89 and sm_90 plus compute_80 PTX (any newer GPU JIT-compiles
# it); nvcc 11.8 from Debian's nvidia-cuda-toolkit is enough (see ../../../shared/docs/gpu.md, "The
# toolchain here"). gemm_sm90.ptx: gemm_sm90.cu needs PTX ISA 8.0 and target sm_90a (tensor copies,
# mbarrier transaction counts, wgmma), which nvcc 11.8's ptxas cannot compile; its front end passes the
# inline PTX through, so the kernel is compiled to PTX for compute_90, the PTX's version and target are
# raised, and the driver (CUDA 12 or newer) compiles it at load. fp8_sm90.ptx: the same route for the e4m3
# mma.sync (PTX ISA 8.4, target sm_90). prefill_sm90.ptx: ../../attention/prefill_sm90.cu, the Hopper prefill
# attention (wgmma), by the GEMM's route (PTX ISA 8.0, target sm_90a).
#
#   build.sh               build model.fatbin, the two PTX files and the stamp (go generate ./model/kernels)
#   build.sh --stamp       print the stamp of the sources as they are now
#   build.sh --check DIR   compile the sources into DIR (proves they compile) and fail when the committed
#                          PTX or stamp differs from the sources' (CI)
#
# NVCC overrides the compiler.
set -euo pipefail
cd "$(dirname "$0")"

SOURCES=(allreduce.cu argmax.cu bias.cu embed.cu fp8.cu gather.cu gemv.cu norm.cu qknorm.cu rope.cu sample.cu softcap.cu swiglu.cu ../../attention/prefill.cu)
SM90_SOURCE=gemm_sm90.cu
FP8_SM90_SOURCE=fp8_sm90.cu
PREFILL_SM90_SOURCE=../../attention/prefill_sm90.cu
HEADERS=(common.cuh fp8.cuh sm90.cuh ../../attention/prefill.cuh)
ARCHS="80 86 89 90"

stamp() {
	echo "$(cat "${HEADERS[@]}" "${SOURCES[@]}" | sha256sum | cut -d' ' -f1)  ${HEADERS[*]} ${SOURCES[*]}"
	echo "archs: $ARCHS + compute_80 PTX"
	echo "$(cat "${HEADERS[@]}" $SM90_SOURCE | sha256sum | cut -d' ' -f1)  ${HEADERS[*]} $SM90_SOURCE (gemm_sm90.ptx)"
	echo "$(cat "${HEADERS[@]}" $FP8_SM90_SOURCE | sha256sum | cut -d' ' -f1)  ${HEADERS[*]} $FP8_SM90_SOURCE (fp8_sm90.ptx)"
	echo "$(cat "${HEADERS[@]}" $PREFILL_SM90_SOURCE | sha256sum | cut -d' ' -f1)  ${HEADERS[*]} $PREFILL_SM90_SOURCE (prefill_sm90.ptx)"
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

compile_sm90() { # compile_sm90 SOURCE OUT.ptx VERSION TARGET (NUL-terminated, for the driver's module loader)
	local src=$1 out=$2 nvcc=${NVCC:-nvcc} tmp
	tmp=$(mktemp -d)
	"$nvcc" -std=c++17 -O3 -ptx -arch=compute_90 -I"$(pwd)" -o "$tmp/g.ptx" "$src"
	grep -q '^\.version 7\.8$' "$tmp/g.ptx" || { echo "build.sh: $src: expected PTX ISA 7.8 from nvcc" >&2; exit 1; }
	sed -e "s/^\.version 7\.8\$/.version $3/" -e "s/^\.target sm_90\$/.target $4/" "$tmp/g.ptx" >"$out"
	printf '\0' >>"$out"
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
	compile_sm90 $SM90_SOURCE "$dir/gemm_sm90.ptx" 8.0 sm_90a
	compile_sm90 $FP8_SM90_SOURCE "$dir/fp8_sm90.ptx" 8.4 sm_90
	compile_sm90 $PREFILL_SM90_SOURCE "$dir/prefill_sm90.ptx" 8.0 sm_90a
	for f in gemm_sm90 fp8_sm90 prefill_sm90; do
		if ! cmp -s "$dir/$f.ptx" $f.ptx; then
			echo "model/kernels: $f.ptx is not what its source compiles to: run go generate ./model/kernels and commit it" >&2
			exit 1
		fi
	done
	if ! diff <(stamp) model.fatbin.sha256; then
		echo "model/kernels: model.fatbin.sha256 does not match the sources: run go generate ./model/kernels and commit model.fatbin" >&2
		exit 1
	fi
	echo "model/kernels: sources compile; stamp matches ($(head -c 16 model.fatbin.sha256)…)"
	;;
"")
	compile model.fatbin.tmp
	compile_sm90 $SM90_SOURCE gemm_sm90.ptx.tmp 8.0 sm_90a
	compile_sm90 $FP8_SM90_SOURCE fp8_sm90.ptx.tmp 8.4 sm_90
	compile_sm90 $PREFILL_SM90_SOURCE prefill_sm90.ptx.tmp 8.0 sm_90a
	mv model.fatbin.tmp model.fatbin
	mv gemm_sm90.ptx.tmp gemm_sm90.ptx
	mv fp8_sm90.ptx.tmp fp8_sm90.ptx
	mv prefill_sm90.ptx.tmp prefill_sm90.ptx
	stamp >model.fatbin.sha256
	echo "model.fatbin: $(wc -c <model.fatbin) bytes, gemm_sm90.ptx: $(wc -c <gemm_sm90.ptx) bytes, fp8_sm90.ptx: $(wc -c <fp8_sm90.ptx) bytes, prefill_sm90.ptx: $(wc -c <prefill_sm90.ptx) bytes; $(head -1 model.fatbin.sha256)"
	;;
*)
	echo "usage: build.sh [--stamp | --check DIR]" >&2
	exit 2
	;;
esac
