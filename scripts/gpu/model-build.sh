#!/usr/bin/env bash
# Builds, here (no GPU needed), what model-device-run.sh runs on the device: the model package's test
# binary with -tags cuda (the CUDA backend's tests and BenchmarkCUDADecode), into the ignored gpu/model/ folder (carry "gpu/model").
#
#   scripts/gpu/model-build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p gpu/model
go test -c -tags cuda -o gpu/model/model.test ./model
ls -la gpu/model/model.test
