#!/usr/bin/env bash
# gollm bench throughput (Llama-3-8B shape, 512 prompts, 128 in / 128 out, pipelined) with the binary
# before this session's step-boundary change (gollm-old, ea93255) and after (gollm), alternating, in
# one call. Here: both binaries in gpu/b5, tar -C gpu/b5 -cf - gollm gollm-old | xz -T1 -9 >
# gpu/pack/ab.tar.xz. There (carry gpu/pack): this script.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" gpu/b5 && xz -dc gpu/pack/ab.tar.xz | tar -C gpu/b5 -xf -
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
for round in 1 2; do
	for bin in gollm-old gollm; do
		gpu/b5/$bin bench throughput --config llama3-8b --device cuda --num-prompts 512 --input-len 128 --output-len 128 \
			--max-num-seqs 256 --max-batched-tokens 8192 --json 2>>"$out/log.txt" | sed "s/^{/{\"bin\":\"$bin\",\"round\":$round,/" >>"$out/ab.jsonl"
	done
done
python3 - "$out/ab.jsonl" <<'PY' | tee "$out/ab.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['bin']:>10} r{r['round']}: output {r['output_tok_s']:.0f} tok/s, total {r['total_tok_s']:.0f}, steps {r['steps']}")
PY
