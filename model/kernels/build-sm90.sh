#!/usr/bin/env bash
# build-sm90.sh — compiles gemm_sm90.cu to PTX for compute_90, then raises the PTX's ISA version to 8.0
# and its target to sm_90a (cp.async.bulk.tensor, mbarrier expect_tx and wgmma need them; nvcc 11.8
# writes 7.8 for sm_90 and its ptxas cannot compile 8.0, so the driver compiles the PTX at load). Output: gemm_sm90.ptx, NUL-terminated, embedded by
# kernels_cuda.go. NVCC overrides the compiler.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
"${NVCC:-nvcc}" -std=c++17 -O3 -ptx -arch=compute_90 -I"$(pwd)" -o "$tmp/g.ptx" gemm_sm90.cu
grep -q '^\.version 7\.8$' "$tmp/g.ptx" || { echo "build-sm90.sh: unexpected PTX version" >&2; exit 1; }
sed -e 's/^\.version 7\.8$/.version 8.0/' -e 's/^\.target sm_90$/.target sm_90a/' "$tmp/g.ptx" >gemm_sm90.ptx
printf '\0' >>gemm_sm90.ptx
rm -rf "$tmp"
echo "gemm_sm90.ptx: $(wc -c <gemm_sm90.ptx) bytes"
