#!/usr/bin/env bash
# Round 14's throughput A/B in one `run` call (carry gpu/pack6): gollm bench throughput with gollm-old
# (f40bd92) and gollm (this round), alternating: Llama-3-8B, 512 prompts of 128 tokens and 128 out (up
# to 256 sequences), and the mixed workload (1024 prompts of 32-512 tokens, 16-256 out, up to 128
# sequences) for Llama-3.2-1B and Llama-3-8B. Here: go build -tags cuda -o gpu/g7/gollm ./cmd/gollm
# (gollm-old from f40bd92); (cd gpu && tar -cf - g7/gollm g7/gollm-old | xz -9 > pack6/g7.tar.xz).
# Results under $OUT: throughput.jsonl, log.txt.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" gpu
xz -dc gpu/pack6/g7.tar.xz | tar -C gpu -xf -
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,driver_version --format=csv,noheader | tee "$out/log.txt"
run() { # bin label args...
	local bin=$1 label=$2
	shift 2
	gpu/g7/$bin bench throughput --device cuda --json "$@" 2>>"$out/log.txt" |
		sed "s/^{/{\"bin\":\"$bin\",\"label\":\"$label\",/" >>"$out/throughput.jsonl"
}
for bin in gollm-old gollm; do
	run $bin 8b-128 --config llama3-8b --num-prompts 512 --input-len 128 --output-len 128 --max-num-seqs 256 --max-batched-tokens 8192
	for m in llama3.2-1b llama3-8b; do
		run $bin "$m-mixed" --config $m --num-prompts 1024 --input-len 32:512 --output-len 16:256 --max-num-seqs 128 --max-batched-tokens 4096
	done
done
python3 - "$out/throughput.jsonl" <<'PY' | tee -a "$out/log.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['bin']:>9} {r['label']:>16}: {r['output_tok_s']:.0f} output tok/s, {r['elapsed_s']:.2f} s, steps {r.get('steps')}")
PY
