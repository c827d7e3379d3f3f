#!/usr/bin/env bash
# The host boundary of a pipelined decode step, on the device (docs/bench/e2e-h100-decode.md, fifth
# round): the CUDA tests of the packages the change touches, BenchmarkCUDAStepBoundary (what each way of
# crossing between graphs costs the GPU), and gollm bench latency at batch 1 with the binary before the
# change (gollm-old) and after (gollm), alternating, in one call.
# Here:   mkdir -p gpu/b5; go test -c -tags cuda -o gpu/b5/{model,engine,cuda}.test ./{model,engine,internal/cuda};
#         go build -tags cuda -o gpu/b5/gollm ./cmd/gollm (and gollm-old from the commit before);
#         tar -C gpu/b5 -cf - . | xz -T4 -3 > gpu/pack/b5.tar.xz
# There (carry gpu/pack):  bash scripts/bench/boundary-device-run.sh [tests] [boundary] [latency]
set -uo pipefail
steps=${*:-tests boundary latency}
out=${OUT:-/tmp/out}
mkdir -p "$out" gpu/b5
out=$(cd "$out" && pwd)
root=$(pwd)
[ -f gpu/pack/b5.tar.xz ] && xz -dc gpu/pack/b5.tar.xz | tar -C gpu/b5 -xf -
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	(cd "$root/internal/cuda" && timeout 60 ../../gpu/b5/cuda.test -test.v -test.count=1) >"$out/tests.log" 2>&1
	echo "internal/cuda tests rc=$?" | tee -a "$out/log.txt"
	(cd "$root/model" && timeout 240 ../gpu/b5/model.test -test.run 'CUDA|Golden' -test.v -test.count=1) >>"$out/tests.log" 2>&1
	echo "model tests rc=$?" | tee -a "$out/log.txt"
	(cd "$root/engine" && timeout 200 ../gpu/b5/engine.test -test.run 'CUDA|Pipelined' -test.v -test.count=1) >>"$out/tests.log" 2>&1
	echo "engine tests rc=$?" | tee -a "$out/log.txt"
	echo "passed $(grep -c -- '--- PASS' "$out/tests.log"), failed $(grep -c -- '--- FAIL' "$out/tests.log")" | tee -a "$out/log.txt"
	grep -E -- '--- FAIL|panic' "$out/tests.log" | head -30 | tee -a "$out/log.txt"
fi
if has boundary; then
	(cd "$root/model" && timeout 300 ../gpu/b5/model.test -test.run XXX -test.bench CUDAStepBoundary -test.benchtime 3x) \
		>"$out/boundary.txt" 2>&1
	echo "boundary bench rc=$?" | tee -a "$out/log.txt"
	grep -E '^BenchmarkCUDAStepBoundary' "$out/boundary.txt" | awk '{print $1, $(NF-1), $NF}' | tee -a "$out/log.txt"
fi
C="--device cuda --input-len 1024 --output-len 128 --warmup 1 --iters 1 --max-batched-tokens 8192 --json"
if has latency; then
	for round in 1 2; do
		for bin in gollm-old gollm; do
			for m in llama3.2-1b llama3-8b; do
				gpu/b5/$bin bench latency --config $m $C --batch ${LATENCY_BATCHES:-1} |
					sed "s/^{/{\"bin\":\"$bin\",\"round\":$round,/" >>"$out/latency.jsonl" 2>>"$out/log.txt"
				echo "latency $bin $m round $round rc=$?" | tee -a "$out/log.txt"
			done
		done
	done
	python3 - "$out/latency.jsonl" <<'PY' | tee -a "$out/log.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['bin']:>10} r{r['round']} {r['model']:>12} b{r['batch']:<3}: step p50 {r['decode_step']['p50_ms']:.3f} ms, in model {r['decode_forward']['p50_ms']:.3f}, engine {r['engine_overhead_ms']:.3f}")
PY
fi
