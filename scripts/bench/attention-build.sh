#!/usr/bin/env bash
# Builds, here (no GPU needed), what scripts/bench/attention-device-run.sh runs on the device: the test
# binaries of internal/cuda and attention and gollm itself, with -tags cuda, into the ignored gpu/ folder
# (GOLLM_GPU_DIR names another, e.g. gpu/attn, to carry only these).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${GOLLM_GPU_DIR:-gpu}
mkdir -p "$bin"
go test -c -tags cuda -ldflags=-s -o "$bin/cuda.test" ./internal/cuda
go test -c -tags cuda -ldflags=-s -o "$bin/attention.test" ./attention
go build -tags cuda -ldflags="-s -w" -o "$bin/gollm" ./cmd/gollm
ls -la "$bin"
