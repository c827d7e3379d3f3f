#!/usr/bin/env bash
# Twentieth round: the engine's CUDA tests at HEAD, then `gollm serve` with the built-in model on the GPU
# (--device cuda: its bfloat16) and on the CPU, each asked the same echo + logprobs + prompt_logprobs
# completion and a logit_bias one, for comparing the two backends through the HTTP API (here:
# scripts/bench/results/round20/call8-serve/compare.py).
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/p1/new/engine.test ./engine;
#        go build -tags cuda -ldflags="-s -w" -o gpu/p1/new/gollm ./cmd/gollm; tar | xz > gpu/p2/all.tar.xz
# There (carry gpu/p2):  bash scripts/bench/round20-serve-check.sh
source scripts/bench/device-common.sh
(cd engine && timeout 300 "$root/gpu/p1/new/engine.test" -test.run CUDA -test.count=1 -test.v) >"$out/engine.log" 2>&1
echo "engine CUDA tests: $(count "$out/engine.log" $?)" | tee -a "$out/summary.txt"
xz -9 "$out/engine.log"
body='{"prompt":"func main() {\n\tfmt.Println(","max_tokens":8,"temperature":0,"echo":true,"logprobs":3,"prompt_logprobs":2}'
bias='{"prompt":"package main","max_tokens":4,"temperature":0,"logit_bias":{"125":100}}'
for dev in cuda cpu; do
	port=$((18000 + RANDOM % 1000))
	gpu/p1/new/gollm serve --device "$dev" --port "$port" >"$out/serve-$dev.log" 2>&1 &
	pid=$!
	for i in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
	curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$out/echo-$dev.json"
	curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$bias" >"$out/bias-$dev.json"
	kill -TERM $pid; wait $pid
	echo "$dev: serve exit $? $(head -c 200 "$out/echo-$dev.json")" | tee -a "$out/summary.txt"
done
