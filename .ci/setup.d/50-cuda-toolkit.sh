#!/usr/bin/env bash
# Installs Debian's non-free CUDA 11.8 toolkit (nvcc, cuda.h, cuda_bf16.h, the libcuda stub) so that CI,
# which has no GPU, can compile the kernels and build/vet the `cuda`-tagged Go code
# (.ci/after.d/50-cuda.sh). Idempotent: does nothing when nvcc is already on the PATH.
# See docs: ../shared/docs/gpu.md ("The toolchain here").
set -euo pipefail

if command -v nvcc >/dev/null 2>&1; then
	echo "nvcc present: $(nvcc --version | tail -1)"
	exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

src=/etc/apt/sources.list.d/debian-nonfree.sources
if [ ! -e "$src" ]; then
	$SUDO tee "$src" >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: non-free contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
$SUDO apt-get update -q
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nvidia-cuda-toolkit
nvcc --version | tail -1
