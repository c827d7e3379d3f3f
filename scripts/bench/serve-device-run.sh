#!/usr/bin/env bash
# gollm serve on the GPU under load: the built-in model on CUDA (pipelined decode, device sampling),
# driven by gollm bench serve (streaming requests), then Ctrl-C while requests are in flight (the server
# must drain and exit 0). Results under $OUT: serve.log, bench-*.json, metrics.txt, log.txt.
# Here:  go build -tags cuda -o gpu/e2e/gollm ./cmd/gollm
# There (carry gpu/e2e): bash scripts/bench/serve-device-run.sh
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
url=http://127.0.0.1:8011
gpu/e2e/gollm serve --device cuda --port 8011 ${SERVE_FLAGS:-} >"$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 120); do curl -sf "$url/health" >/dev/null && break; sleep 0.5; done
curl -sf "$url/health" >/dev/null || { echo "server did not come up"; tail -20 "$out/serve.log"; exit 1; }
status=0
for c in 1 32 128; do
	gpu/e2e/gollm bench serve --url $url --concurrency $c --num-prompts $((c * 4)) --input-len 16:256 --output-len 8:128 \
		--json >"$out/bench-c$c.json" 2>>"$out/log.txt" || status=1
	echo "bench serve concurrency $c rc=$?" | tee -a "$out/log.txt"
	python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r[k] for k in r if not isinstance(r[k], (dict, list))})" "$out/bench-c$c.json" | tee -a "$out/log.txt"
done
curl -s "$url/metrics" | grep -E '^gollm:(engine_|request_success|num_preempt|generation_tokens_total)' | tee "$out/metrics.txt"
# Ctrl-C with requests in flight: the server drains them and exits 0.
# (1024 requests of 800 tokens: seconds of work even for the small built-in model; those not admitted
# before the Ctrl-C fail with 503, which is the point.)
gpu/e2e/gollm bench serve --url $url --concurrency 64 --num-prompts 1024 --output-len 800 --json >"$out/bench-drain.json" 2>"$out/bench-drain.err" &
bpid=$!
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
wait $bpid
echo "server exit status after Ctrl-C: $rc; bench during drain exit: $?" | tee -a "$out/log.txt"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('during drain: completed', r['completed'], 'failed', r['failed'], 'output tokens', r['output_tokens'])" "$out/bench-drain.json" | tee -a "$out/log.txt"
[ $rc = 0 ] || status=1
tail -5 "$out/serve.log"
exit $status
