#!/usr/bin/env bash
# Builds, here (no GPU needed), what model-device-run.sh runs on the device, into the ignored gpu/model/
# folder (carry "gpu/model"): the test binaries, with -tags cuda, of package model (the CUDA backend's
# tests, BenchmarkCUDAGemv and BenchmarkCUDADecode), package engine (the batching equivalence on the GPU),
# internal/cuda (the device layer) and package attention (its decode kernels).
#
#   scripts/gpu/model-build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p gpu/model
go test -c -tags cuda -ldflags="-s -w" -o gpu/model/model.test ./model
go test -c -tags cuda -ldflags="-s -w" -o gpu/model/engine.test ./engine
go test -c -tags cuda -ldflags="-s -w" -o gpu/model/cuda.test ./internal/cuda
go test -c -tags cuda -ldflags="-s -w" -o gpu/model/attention.test ./attention
ls -la gpu/model/
