#!/usr/bin/env bash
# Decode attention doing the step's RoPE and K/V write (attention.CUDARoPE), in one `run` call: the CUDA
# tests of packages attention (TestCUDADecodeRoPE among them), model (GPU against CPU, HF goldens) and
# engine, compute-sanitizer memcheck and racecheck on RoPE cases, then BenchmarkCUDADecode's default against
# no-attn-rope (the RoPE kernel between the Q/K/V product and attention), alternating ROUNDS times.
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/rope/X.test ./X   (X = attention, model, engine)
#        tar -C gpu -cf - rope/attention.test rope/model.test rope/engine.test | xz -T0 -6 > gpu/pack/rope.tar.xz
# There (carry gpu/pack/rope.tar.xz):  [BATCHES="16|64"] [ROUNDS=2] bash scripts/bench/attn-rope-device-run.sh [tests] [memcheck] [decode]
# Results under $OUT: attention-test.log, model-test.log, engine-test.log, memcheck.log, racecheck.log, decode-rN.txt,
# summary.txt.
set -uo pipefail
steps=${*:-tests memcheck decode}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
[ -f gpu/pack/rope.tar.xz ] && tar -C gpu -xJf gpu/pack/rope.tar.xz
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv,noheader | tee "$out/summary.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
count() { echo "$1 rc=$2 pass=$(grep -c -- '--- PASS' "$3") fail=$(grep -c -- '--- FAIL' "$3") skip=$(grep -c -- '--- SKIP' "$3")" | tee -a "$out/summary.txt"; grep -E -- '--- FAIL|panic' "$3" | head -20; }
if has tests; then
	(cd attention && timeout 300 "$root/gpu/rope/attention.test" -test.run CUDA -test.v -test.count=1) >"$out/attention-test.log" 2>&1
	count "attention CUDA tests" $? "$out/attention-test.log"
	(cd model && timeout 420 "$root/gpu/rope/model.test" -test.run 'CUDA|Golden' -test.v -test.count=1) >"$out/model-test.log" 2>&1
	count "model CUDA|Golden tests" $? "$out/model-test.log"
	(cd engine && timeout 200 "$root/gpu/rope/engine.test" -test.run CUDA -test.v -test.count=1) >"$out/engine-test.log" 2>&1
	count "engine CUDA tests" $? "$out/engine-test.log"
fi
if has memcheck; then
	san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
	for pat in 'TestCUDADecodeRoPE/bf16/d128/g4$' 'TestCUDADecodeRoPE/fp32/d64/g6$'; do
		(cd attention && timeout 240 "$san" --tool memcheck --error-exitcode 9 "$root/gpu/rope/attention.test" -test.run "$pat" -test.v) >>"$out/memcheck.log" 2>&1
		echo "memcheck $pat rc=$? passed=$(grep -c -- '--- PASS' "$out/memcheck.log") $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)" | tee -a "$out/summary.txt"
	done
	(cd attention && timeout 240 "$san" --tool racecheck --error-exitcode 9 "$root/gpu/rope/attention.test" -test.run 'TestCUDADecodeRoPE/bf16/d64/g8$' -test.v) >"$out/racecheck.log" 2>&1
	echo "racecheck TestCUDADecodeRoPE/bf16/d64/g8 rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/racecheck.log" | tail -1)" | tee -a "$out/summary.txt"
fi
if has decode; then
	OUT="$out" GOLLM_GPU_DIR=gpu/rope VARIANTS="default no-attn-rope" BATCHES="${BATCHES:-16|64}" ROUNDS="${ROUNDS:-2}" \
		bash "$root/scripts/bench/decode-variants-device-run.sh" | tee -a "$out/summary.txt"
fi
