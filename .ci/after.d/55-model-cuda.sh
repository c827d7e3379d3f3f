#!/usr/bin/env bash
# Compiles the CUDA kernels of the model's GPU backend (model/kernels/*.cu and attention/prefill.cu) with
# nvcc and checks that the committed model/kernels/model.fatbin.sha256 stamp was made from the committed
# sources and that the committed gemm_sm90.ptx is what gemm_sm90.cu compiles to. nvcc comes from .ci/setup.d/50-cuda-toolkit.sh; `go vet -tags cuda` is run by another script.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v nvcc >/dev/null 2>&1; then
	echo "55-model-cuda: nvcc not found (.ci/setup.d/50-cuda-toolkit.sh installs it)" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model/kernels/build.sh --check "$tmp"
