#!/usr/bin/env bash
# Builds, here (no GPU needed), what scripts/bench/attention-device-run.sh runs on the device: the test
# binaries of internal/cuda and attention and gollm itself, with -tags cuda, into the ignored gpu/ folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p gpu
go test -c -tags cuda -ldflags=-s -o gpu/cuda.test ./internal/cuda
go test -c -tags cuda -ldflags=-s -o gpu/attention.test ./attention
go build -tags cuda -ldflags="-s -w" -o gpu/gollm ./cmd/gollm
ls -la gpu/
