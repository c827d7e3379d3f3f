#!/usr/bin/env bash
# Pipelined steps with admissions on the device: the engine's and the model's CUDA tests, then mixed-length
# throughput (1024 prompts of 32-512 tokens, 16-256 out) pipelined and not, and the latency runs, for
# Llama-3.2-1B and Llama-3-8B shapes (docs/bench/e2e-h100.md). Results under $OUT: mixed.jsonl, latency.jsonl.
# Here:  go test -c -tags cuda -o gpu/model/model.test ./model; go test -c -tags cuda -o gpu/model/engine.test ./engine;
#        go build -tags cuda -o gpu/e2e/gollm ./cmd/gollm
# There (carry gpu/model and gpu/e2e): bash scripts/bench/admit-device-run.sh
set -uo pipefail
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64
(cd engine && timeout 200 ../gpu/model/engine.test -test.count=1 2>&1 | tail -3)
(cd model && timeout 200 ../gpu/model/model.test -test.run 'CUDA|Golden' -test.count=1 2>&1 | tail -2)
for mode in "" --no-pipelining; do for m in llama3.2-1b llama3-8b; do gpu/e2e/gollm bench throughput --config $m --device cuda --num-prompts 1024 --input-len 32:512 --output-len 16:256 --max-num-seqs 128 --max-batched-tokens 4096 --json $mode 2>/dev/null | tee -a $OUT/mixed.jsonl | python3 -c "import json,sys; r=json.load(sys.stdin); print('$m', '${mode:-pipelined}', round(r['output_tok_s']), 'steps', r['steps'], 'pipelined', r['pipelined_steps'], 'elapsed', round(r['elapsed_s'],2))"; done; done
for m in llama3.2-1b llama3-8b; do gpu/e2e/gollm bench latency --config $m --device cuda --input-len 1024 --output-len 128 --warmup 1 --iters 1 --max-batched-tokens 8192 --batch 1,64 --json 2>/dev/null | tee -a $OUT/latency.jsonl | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['model'], r['batch'], 'step p50', round(r['decode_step']['p50_ms'],3))"; done
