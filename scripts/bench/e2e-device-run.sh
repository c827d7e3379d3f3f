#!/usr/bin/env bash
# Runs gollm bench latency and throughput on the device machine (docs/bench/e2e-h100.md).
# Here:  go build -tags cuda -o gpu/e2e/gollm ./cmd/gollm
# There: scripts/bench/e2e-device-run.sh gpu/e2e   (results under $OUT)
set -uo pipefail
dir=${1:-gpu/e2e}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
C="--device cuda --input-len 1024 --output-len 128 --warmup 1 --iters 1 --max-batched-tokens 8192"
for m in llama3.2-1b llama3-8b; do
	"$dir/gollm" bench latency --config $m $C --batch 1,64 --json --plot "$out/$m.svg" >>"$out/raw.jsonl" 2>>"$out/log.txt"
	echo "latency $m rc=$?" | tee -a "$out/log.txt"
done
"$dir/gollm" bench throughput --config llama3-8b --device cuda --num-prompts 512 --input-len 1024 --output-len 128 \
	--max-num-seqs 256 --max-batched-tokens 8192 --json >>"$out/raw.jsonl" 2>>"$out/log.txt"
echo "throughput rc=$?" | tee -a "$out/log.txt"
"$dir/gollm" bench throughput --config llama3-8b --device cuda --num-prompts 512 --input-len 128 --output-len 128 \
	--max-num-seqs 256 --max-batched-tokens 8192 --json >>"$out/raw.jsonl" 2>>"$out/log.txt"
echo "throughput short rc=$?" | tee -a "$out/log.txt"
tail -c 3000 "$out/raw.jsonl"
