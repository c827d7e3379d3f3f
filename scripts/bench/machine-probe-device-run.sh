#!/usr/bin/env bash
# Which H100 is this, and how fast: its serial, its device-to-device copy bandwidth (internal/cuda's
# TestCopyBandwidth) and the Llama-3.2-1B / Llama-3-8B batch-1 decode graph (BenchmarkCUDADecode default,
# context 1088). For telling machines apart when the same binaries time differently.
# Here:  go test -c -tags cuda -o gpu/probe/cuda.test ./internal/cuda; go test -c -tags cuda -o gpu/probe/model.test ./model
# There (carry gpu/probe):  bash scripts/bench/machine-probe-device-run.sh
set -uo pipefail
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm,clocks.max.mem --format=csv,noheader
(cd internal/cuda && ../../gpu/probe/cuda.test -test.run CopyBandwidth -test.v -test.count=1 | grep "copy bandwidth")
(cd model && GOLLM_BENCH_CONTEXT=1088 timeout 200 ../gpu/probe/model.test -test.run XXX \
	-test.bench 'CUDADecode/.*/^batch=1$/^default$' -test.benchtime 20x 2>&1 |
	awk '/^BenchmarkCUDADecode/ {for(i=1;i<=NF;i++) if($i=="gpu-ms/step") print $1, $(i-1), "gpu-ms"}')
