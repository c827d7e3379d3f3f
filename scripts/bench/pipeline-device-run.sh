#!/usr/bin/env bash
# Pipelined decode on the device: correctness, then the engine's decode step with and without it, in one
# `run` call (docs/bench/e2e-h100.md, "Pipelined decode").
# Here:  scripts/gpu/model-build.sh && go build -tags cuda -ldflags="-s -w" -o gpu/e2e/gollm ./cmd/gollm
# There (carry gpu/model and gpu/e2e):  bash scripts/bench/pipeline-device-run.sh [tests] [decode] [latency] [throughput]
#   tests       the CUDA tests of packages model, engine, internal/cuda and attention
#   decode      BenchmarkCUDADecode at batch 1, 16 and 64, variants $VARIANTS (default "default pdl8 attn-late"),
#               at the context $GOLLM_BENCH_CONTEXT (default 1088, the mean context of the latency runs)
#   latency     gollm bench latency, Llama-3.2-1B and Llama-3-8B shapes, batch 1 and 64, modes $MODES
#               (default: pipelined and --no-pipelining)
#   throughput  gollm bench throughput, Llama-3-8B shape, 512 prompts of $THROUGHPUT_LENS tokens (default 128),
#               each mode
# Results under $OUT: pipeline-tests.log, decode.txt, latency.jsonl (one object per model, batch and mode),
# throughput.jsonl, log.txt.
set -uo pipefail
steps=${*:-tests latency throughput}
modes=${MODES-"pipelined --no-pipelining"}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	(cd "$root/model" && timeout 240 ../gpu/model/model.test -test.run 'CUDA|Golden' -test.v -test.count=1) >"$out/pipeline-tests.log" 2>&1
	echo "model tests rc=$?" | tee -a "$out/log.txt"
	(cd "$root/engine" && timeout 200 ../gpu/model/engine.test -test.run 'CUDA|Pipelined' -test.v -test.count=1) >>"$out/pipeline-tests.log" 2>&1
	echo "engine tests rc=$?" | tee -a "$out/log.txt"
	(cd "$root/internal/cuda" && timeout 60 ../../gpu/model/cuda.test -test.v -test.count=1) >>"$out/pipeline-tests.log" 2>&1
	echo "internal/cuda tests rc=$?" | tee -a "$out/log.txt"
	if [ -x gpu/model/attention.test ]; then
		(cd "$root/attention" && timeout 240 ../gpu/model/attention.test -test.run CUDA -test.v -test.count=1) >>"$out/pipeline-tests.log" 2>&1
		echo "attention tests rc=$?" | tee -a "$out/log.txt"
	fi
	echo "passed $(grep -c -- '--- PASS' "$out/pipeline-tests.log"), failed $(grep -c -- '--- FAIL' "$out/pipeline-tests.log")" | tee -a "$out/log.txt"
	grep -E -- '--- FAIL|panic|steps eager' "$out/pipeline-tests.log" | head -30
fi
if has decode; then
	pat=$(echo "${VARIANTS:-default pdl8 attn-late}" | tr ' ' '|')
	(cd "$root/model" && GOLLM_BENCH_CONTEXT=${GOLLM_BENCH_CONTEXT:-1088} timeout 400 ../gpu/model/model.test -test.run XXX \
		-test.bench "CUDADecode/llama/batch=(1|16|64)/($pat)\$" -test.benchtime 30x -test.v) >"$out/decode.txt" 2>&1
	echo "decode bench rc=$?" | tee -a "$out/log.txt"
	grep -E '^BenchmarkCUDADecode' "$out/decode.txt" | awk '{
		line=$1; for (i=2;i<=NF;i++) if ($(i) ~ /^(ms\/step|gpu-ms\/step|host-ms\/step|%floor)$/) line=line" "$(i-1)" "$(i);
		print line }' | tee -a "$out/log.txt"
fi
C="--device cuda --input-len 1024 --output-len 128 --warmup 1 --iters 1 --max-batched-tokens 8192 --json"
if has latency; then
	for m in llama3.2-1b llama3-8b; do
		for mode in $modes; do
			flag=${mode#pipelined}
			gpu/e2e/gollm bench latency --config $m $C --batch 1,64 $flag | sed "s/^{/{\"mode\":\"$mode\",/" >>"$out/latency.jsonl" 2>>"$out/log.txt"
			echo "latency $m $mode rc=$?" | tee -a "$out/log.txt"
		done
	done
	python3 - "$out/latency.jsonl" <<'PY' | tee -a "$out/log.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['model']:>12} b{r['batch']:<3} {r['mode']:>15}: step p50 {r['decode_step']['p50_ms']:.3f} ms, in model {r['decode_forward']['p50_ms']:.3f}, engine {r['engine_overhead_ms']:.3f}")
PY
fi
if has throughput; then
	for len in ${THROUGHPUT_LENS:-128}; do
		for mode in $modes; do
			flag=${mode#pipelined}
			gpu/e2e/gollm bench throughput --config llama3-8b --device cuda --num-prompts 512 --input-len $len --output-len 128 \
				--max-num-seqs 256 --max-batched-tokens 8192 --json $flag | sed "s/^{/{\"mode\":\"$mode\",/" >>"$out/throughput.jsonl" 2>>"$out/log.txt"
			echo "throughput $len $mode rc=$?" | tee -a "$out/log.txt"
		done
	done
	cut -c1-600 "$out/throughput.jsonl"
fi
