#!/usr/bin/env bash
# The skinny GEMM end to end, on the device (docs/bench/e2e-h100.md, "Seventh round"): internal/cuda's
# tests (tensor maps, cluster launch), then gollm bench latency (Llama-3.2-1B and Llama-3-8B shapes,
# batch 1, 16 and 64) and gollm bench throughput (Llama-3-8B, 512 prompts) with the binary before the
# GEMM was switched on (gollm-old) and after (gollm), alternating, in one call.
# Here:   mkdir -p gpu/g7; go test -c -tags cuda -o gpu/g7/cuda.test ./internal/cuda;
#         go build -tags cuda -o gpu/g7/gollm ./cmd/gollm (and gollm-old from the commit before);
#         tar -C gpu/g7 -cf - . | xz -T4 -3 > gpu/pack/g7.tar.xz
# There (carry gpu/pack):  [BATCHES=1,16,64] bash scripts/bench/gemm-e2e-device-run.sh [tests] [latency] [throughput]
# (also the folded norm's A/B, docs/bench/e2e-h100.md "Latest": gollm-old at ecfffde).
# Results under $OUT: tests.log, latency.jsonl, throughput.jsonl, log.txt.
set -uo pipefail
steps=${*:-tests latency throughput}
out=${OUT:-/tmp/out}
mkdir -p "$out" gpu/g7
out=$(cd "$out" && pwd)
root=$(pwd)
[ -f gpu/pack/g7.tar.xz ] && xz -dc gpu/pack/g7.tar.xz | tar -C gpu/g7 -xf -
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has tests; then
	(cd "$root/internal/cuda" && timeout 60 ../../gpu/g7/cuda.test -test.v -test.count=1) >"$out/tests.log" 2>&1
	echo "internal/cuda tests rc=$? passed $(grep -c -- '--- PASS' "$out/tests.log") failed $(grep -c -- '--- FAIL' "$out/tests.log")" |
		tee -a "$out/log.txt"
	grep -E -- '--- FAIL|panic' "$out/tests.log" | head -10
fi
C="--device cuda --input-len 1024 --output-len 128 --warmup 1 --iters 1 --max-batched-tokens 8192 --json"
if has latency; then
	for round in 1 2; do
		for bin in gollm-old gollm; do
			for m in llama3.2-1b llama3-8b; do
				gpu/g7/$bin bench latency --config $m $C --batch ${BATCHES:-1,16,64} |
					sed "s/^{/{\"bin\":\"$bin\",\"round\":$round,/" >>"$out/latency.jsonl" 2>>"$out/log.txt"
				echo "latency $bin $m round $round rc=$?" | tee -a "$out/log.txt"
			done
		done
	done
	python3 - "$out/latency.jsonl" <<'PY' | tee -a "$out/log.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['bin']:>9} r{r['round']} {r['model']:>12} b{r['batch']:<3}: step p50 {r['decode_step']['p50_ms']:.3f} p99 {r['decode_step']['p99_ms']:.3f} ms, in model {r['decode_forward']['p50_ms']:.3f}")
PY
fi
if has throughput; then
	for bin in gollm-old gollm; do
		gpu/g7/$bin bench throughput --config llama3-8b --device cuda --num-prompts 512 --input-len 128 --output-len 128 \
			--max-num-seqs 256 --max-batched-tokens 8192 --json | sed "s/^{/{\"bin\":\"$bin\",/" >>"$out/throughput.jsonl" 2>>"$out/log.txt"
		echo "throughput $bin rc=$?" | tee -a "$out/log.txt"
	done
	python3 - "$out/throughput.jsonl" <<'PY' | tee -a "$out/log.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["bin"], {k: v for k, v in r.items() if "tok" in k or "req" in k})
PY
fi
