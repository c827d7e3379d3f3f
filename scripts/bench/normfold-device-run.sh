#!/usr/bin/env bash
# The folded RMSNorm (kernels/gemv.cu, "Folded norm") on the device, in one `run` call: its tests (the
# kernel pair against float64, GPU against CPU with and without the fold, the goldens, the engine's
# batching equivalence), then BenchmarkCUDADecode default against no-normfold at batch 1 and 8, ROUNDS
# rounds alternating.
# Here:  bash scripts/gpu/model-build.sh && tar -C gpu -cf - model | xz -T0 -6 > gpu/pack/m.tar.xz
# There (carry gpu/pack):  bash scripts/bench/normfold-device-run.sh [tests] [bench]
set -uo pipefail
steps=${*:-tests bench}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -x gpu/model/model.test ] || tar -C gpu -xJf gpu/pack/m.tar.xz
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv,noheader
case " $steps " in *" tests "*)
	(cd model && timeout 240 ../gpu/model/model.test -test.run 'CUDAGemvNormFold|CUDAMatchesCPU|CUDAGolden|CUDAGemv$|CUDAGemvSwiGLU|CUDAGemvRoPE|CUDAPipelined|CUDAArgmax' \
		-test.v -test.count=1) >"$out/model-test.log" 2>&1
	echo "model tests rc=$? pass=$(grep -c -- '--- PASS' "$out/model-test.log") fail=$(grep -c -- '--- FAIL' "$out/model-test.log")"
	grep -E -- '--- FAIL|panic|FoldedNorms|norms folded|worst' "$out/model-test.log" | head -30
	(cd engine && timeout 200 ../gpu/model/engine.test -test.run CUDA -test.v -test.count=1) >"$out/engine-test.log" 2>&1
	echo "engine tests rc=$? pass=$(grep -c -- '--- PASS' "$out/engine-test.log") fail=$(grep -c -- '--- FAIL' "$out/engine-test.log")"
	grep -E -- '--- FAIL|panic' "$out/engine-test.log" | head
;; esac
case " $steps " in *" bench "*)
	OUT=$out GOLLM_GPU_DIR=gpu/model VARIANTS="${VARIANTS:-default no-normfold}" BATCHES="${BATCHES:-1|8}" \
		ROUNDS=${ROUNDS:-2} bash scripts/bench/decode-variants-device-run.sh
;; esac
