#!/usr/bin/env bash
# Reruns the tables of docs/bench on a GPU machine from binaries built elsewhere: nothing is compiled
# here. Build first, on any machine with Go (scripts/bench/build.sh), carry gpu/bench.tar.xz, then from
# the repository root on the GPU machine:
#
#   bash scripts/bench/device-run.sh SECTION...
#
# Each section fits one call of 10 minutes alone (`all` runs every one in turn, where nothing limits it):
#   tests       the CUDA test binaries of TEST_PKGS (default internal/cuda, attention, model and engine),
#               each suite in full (every test, the pure-Go ones too), with their pass and fail counts and
#               first failures; the four take more than one call: TEST_PKGS="internal/cuda attention",
#               then TEST_PKGS="model engine"
#   attention   the decode-attention grid (gollm bench attention) and SDPA beside it (sdpa_peer.py):
#               docs/bench/attention-h100.md and attention-h200.md, their first table
#   sweeps      the dispatcher beyond the grid: gollm bench attention on the batch, tail and overflow
#               sweeps (SWEEPS, default "batch tail overflow"), and how many plans are within 5% of the
#               fastest kernel
#   decode      BenchmarkCUDADecode, the step's CUDA graph: GPU ms per step at BATCHES (default 1,16,64),
#               context CONTEXT (default 1088), VARIANTS (default "default"): docs/bench/e2e-h100.md
#   latency     gollm bench latency, Llama-3.2-1B and Llama-3-8B shapes, 1024 tokens in, 128 out, at
#               E2E_BATCHES (default 1,16,64): docs/bench/e2e-h100.md
#   throughput  gollm bench throughput, Llama-3-8B 512 × (128 or 1024 in, 128 out) and the mixed-length
#               workload on both models: docs/bench/e2e-h100.md
#   serve       gollm serve (the built-in model on CUDA) under gollm bench serve, then Ctrl-C with requests
#               in flight: docs/bench/e2e-h100.md
#   gemm        BenchmarkCUDAGemv (1-64 rows), BenchmarkCUDAGemm (16-64 rows), BenchmarkCUDAGemmDiag (the
#               GEMM's products as the step runs them, and their parts), BenchmarkCUDAGemmSplit and
#               scripts/bench/cublaslt_probe.py: docs/bench/gemm-h100.md
#   prefill     BenchmarkCUDAPrefill and scripts/bench/prefill_sdpa.py: docs/bench/prefill-h100.md
#   families    the model families against Llama-3-8B: gollm bench attention on
#               attention-families-shapes.json (a window of 4096 at context 16384 beside a 4096-token
#               context; head_dim 256 against the copy bandwidth), BenchmarkCUDAPrefill's 16384-token
#               prompts with and without a window of 4096 and its head_dim 256 prompt, gollm bench latency
#               for llama3-8b, qwen3-8b, gemma3-12b and qwen2.5-7b at batch 1 and 64, and a table of each
#               decode step's fraction of its roofline and its ratio to Llama-3-8B's: docs/bench/
#               families-h200.md (FAM_BUDGET, default 480 s, bounds the section: a step that would start
#               past it is skipped)
#   constraints the masked pick on the device (TestCUDAMaskedPickMatchesTwin, TestCUDAPipelinedPicks,
#               TestCUDASampleMatchesTwin, TestCUDASampleTies; engine's TestCUDAConstraintMatchesHost),
#               BenchmarkCUDAMaskedPick and BenchmarkCUDAConstrainedStep with constraint/none per batch:
#               docs/bench/constraint.md
#   hardening   TestIsContextLost (internal/cuda) and model's tests of the pick kernels' NaN and +Inf
#               sentinel, the non-finite picks and the KV pool checked against free device memory
#               (docs/hardening.md)
#   tp          tensor parallelism on the GPUs present (NCCL from GOLLM_NCCL, else PyTorch's nvidia-nccl
#               wheel): internal/cuda's NCCL tests, the one-shot all-reduce's and model's TP tests (on one
#               GPU: one NCCL rank, one-shot kernels with ranks sharing it, and TP 2 and 4 sharing it through host memory),
#               BenchmarkCUDAAllReduce (one-shot beside NCCL) and BenchmarkCUDATensorParallelStep
#               (Llama-3-8B's decode step whole and as one NCCL rank, batch 1 and 64): docs/bench/tp-h200.md
#   tpgroup     Llama-3-70B sharded over each of TP_SIZES (default 2 4 8) the machine has GPUs for, decode
#               step at TP_BATCHES (default 1,64), all-reduces through NCCL and one-shot: docs/bench/tp-h200.md
#   tprank      one rank of Llama-3-70B at TP_SIZES (default 2 4 8) alone on one GPU (scripts/bench/tp-ranks),
#               the latency section's runs at TP_BATCHES (default 1,64): the step each GPU computes,
#               without the collectives
#   compare     before/after (needs BASE): BASE and BIN alternated ROUNDS times (default 2 here) over gollm
#               bench latency (llama3-8b and llama3.2-1b, batch 1 and 64, 1024 in, 128 out) and gollm bench
#               attention (SHAPES, default attention-shapes.json), then one table: each figure's mean per
#               build and new/old (decode step p50 in ms, the dispatcher's median in µs). Passing: every
#               ratio within 1% of 1. `tests compare` is a refactor's whole check (docs/bench/README.md)
#   prefix      shared-prefix decode attention: the tests (the shared-prefix kernels against the
#               CPU twin and the float64 reference, every decode kernel beside them since the split-k
#               reduce shares its merge, the model's logits and the engine's tokens with and without the
#               shared path), BenchmarkCUDADecodeShared (Llama-3-8B heads, 64
#               sequences behind 4k, 16k and 64k tokens, plain and shared in one run, against the unique
#               K/V bytes over the copy bandwidth it measures), BenchmarkCUDADecodeSharedTimeline (when
#               each pass of that call is done, forked and serial), and the standard grid (gollm bench
#               attention, BASE's too when set) for the plain path's numbers; BenchmarkCUDADecodeSharedStep (Llama-3-8B's step at
#               batch 64 behind 16k shared tokens, shared and plain); gollm bench serve in process with
#               --shared-prefix off and auto at concurrency 64 behind one system prompt of 4096 tokens
#               (SERVE_CONFIG's shape, default llama3-8b, or SERVE_MODEL's folder):
#               docs/bench/shared-prefix-h200.md.
#               Passing: the tests,
#               shared ≤ 1.2× the bound at every prefix and ≥ 10× faster than plain at 16k, the grid
#               within 1% of main's (BASE, or attention-h200.md's table)
#   prefixserve the prefix section's serve comparison alone (prefix_serve) and its table
#   memcheck    compute-sanitizer memcheck over the decode step's kernels, each pattern required to run
#               tests (a memcheck that ran nothing is a failure)
#   longctx     long prompts on Llama-3.1-8B's shape (docs/bench/prefill-h200.md), in order: gollm bench
#               latency at 8192, 32768 and 131071 tokens in, 1 out (131072 in all, the whole context):
#               time to first token, prefill tok/s, chunks of LC_CHUNK (default 8192) tokens;
#               scripts/bench/prefill_peer.py, PyTorch's prefill at the
#               same lengths; BenchmarkCUDAPrefill at 8192 and 32768 (attention's TFLOP/s and its share
#               of the H200's 989 dense bf16 TFLOP/s; over bf16 and FP8 pages); TestCUDAPrefillLongContext and
#               TestCUDALongPromptBoundedMemory; gollm bench
#               throughput, Llama-3-8B 512 × (1024 in, 128 out) and its compute roofline; gollm bench
#               serve in process on a mix of 1 in 10 prompts of 32768 tokens among 256-1024-token ones at
#               LC_CHUNKS (default 2048,8192) tokens a step, each prompt's chunk capped at LC_THRESHOLD
#               when set (TTFT and ITL p50/p90/p99 per class); then a
#               table with the gaps to the peer and the issue's targets. LC_STEPS picks steps (default
#               "latency peer prefill tests throughput serve"; latencyfp8, not among them, is bench
#               latency at 8192 and 32768 tokens with --kv-cache-dtype fp8, latency-fp8.txt: prefill-h200.md's
#               "Over FP8 pages" table is LC_STEPS="latency latencyfp8 peer prefill"). LC_BUDGET (default 540 s)
#               bounds the section: a step that would start past it is skipped
#   fp8         FP8 weights (docs/fp8.md): the FP8 CUDA tests (model's TestCUDAFP8*, TestFP8Golden and
#               TestPlanFP8, internal/cuda's TestMatmulE4M3 and its candidates'), BenchmarkLtE4M3Candidates
#               (every cuBLASLt algorithm of the FP8 products at 16-8192 rows), BenchmarkCUDAFP8MatMul (GB/s of the weight
#               stream against the copy bandwidth it measures; prefill TFLOP/s and its parts),
#               BenchmarkCUDAFP8GemmShapes (the e4m3 GEMM's launch shapes at 16 and 64 rows beside
#               cuBLASLt), BenchmarkLtE4M3Forms (cuBLASLt's e4m3 forms at 1024 rows), gollm bench
#               attention over bf16 and FP8 pages (the standard grid and the step's shapes), BenchmarkCUDAFP8Fused
#               and the FP8 prefill of Qwen2.5-7B and Llama-3-8B with each quantizing form (prefill-forms.txt:
#               the staged kernels against the loops and the register forms), BenchmarkCUDADecode's
#               FP8 step at batch 1 with its per-op profile (decode-profile.txt) and at batch 16 with
#               and without the e4m3 GEMM (default, fp8-lt), gollm bench latency of llama3-8b (random
#               weights, prompt 1024, 128 out, batch 1, 16 and 64) in bf16, with --quantization fp8 and
#               with an FP8 KV cache too, and scripts/bench/fp8_peer.py (torch, e4m3 weights through
#               _scaled_mm); then a table with the gaps. Targets: FP8 decode step ≤ 2.1 ms at batch 1;
#               prefill of 1024 tokens ≥ 1.6× bf16's speed (docs/bench/fp8-h200.md)
#   fp8e2e      the fp8 section's end to end part alone (gollm bench latency in bf16, FP8 and FP8 KV, the
#               torch peer, the table of gaps) and gollm bench throughput (512 × 1024 in, 128 out) in bf16,
#               FP8 and FP8 with an FP8 KV cache, with their ratios (target ≥ 1.5×): docs/bench/fp8-h200.md's
#               current table
#
# Environment:
#   BIN     the build to run (default gpu/bench; BIN.tar.xz, if carried, is unpacked over it first)
#   BASE    a second build (e.g. gpu/base, the commit before a change), "old" in the results: the timed
#           sections (attention, sweeps, decode, latency, throughput) run BASE then BIN in turn, ROUNDS
#           times, in the same call, so that before and after share the GPU; `compare` tabulates them
#   ROUNDS  rounds of each timed section (default 1; compare 2)
#   OUT     where results go (default out): summary.txt, and a folder per section; where the call's
#           files would exceed the `run` tool's 8, everything but summary.txt is packed into results.tar.gz
#
# Results are raw: copy the figures into docs/bench with the device (summary.txt's first line: name,
# serial, driver, clocks), the date and the commit (BIN/COMMIT); scripts/bench/attention_report.py
# formats the attention grid.
set -uo pipefail
root=$(pwd)
[ -f go.mod ] && [ -d scripts/bench ] || { echo "device-run.sh: run from the repository root" >&2; exit 2; }
[ $# -gt 0 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
out=${OUT:-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
rounds=${ROUNDS:-1}
status=0

# unpack DIR: DIR.tar.xz, when carried, replaces DIR (a warm machine keeps the last call's binaries).
unpack() {
	[ -f "$1.tar.xz" ] || return 0
	rm -rf "$1" && tar -C "$(dirname "$1")" -xJf "$1.tar.xz"
}
bin=${BIN:-gpu/bench}
unpack "$bin"
[ -x "$bin/gollm" ] || { echo "device-run.sh: no build in $bin (scripts/bench/build.sh, then carry $bin.tar.xz)" >&2; exit 2; }
bin=$(cd "$bin" && pwd)
commit=$(head -1 "$bin/COMMIT" 2>/dev/null)
builds=("$bin")
tags=(new)
if [ -n "${BASE:-}" ]; then
	unpack "$BASE"
	[ -x "$BASE/gollm" ] || { echo "device-run.sh: no build in BASE=$BASE" >&2; exit 2; }
	builds=("$(cd "$BASE" && pwd)" "$bin")
	tags=(old new)
fi

say() { echo "$*" | tee -a "$out/summary.txt"; }
# stamp WHAT RC: one line of the summary, with the time, and the call's status.
stamp() {
	say "$1 rc=$2 $(date -u +%H:%M:%S)"
	[ "$2" = 0 ] || status=1
}
# count LOG: the passes and failures of a verbose go test log, then its first failures.
count() {
	echo "pass=$(grep -c -- '--- PASS' "$1") fail=$(grep -c -- '--- FAIL' "$1") skip=$(grep -c -- '--- SKIP' "$1")"
	grep -E -- '--- FAIL|^panic|timed out' "$1" | head -12
}
# gotest DIR NAME PKG PATTERN LIMIT: PKG's test binary (BIN's), in PKG's folder (its testdata), runs the
# tests PATTERN selects (all where it is empty) into DIR/NAME.log under -test.timeout LIMIT seconds (a
# stack dump) and a kill 10 s later; stamped and counted. A pattern that ran no test fails: a renamed
# test must not pass unseen.
gotest() {
	local log=$1/$2.log test=$bin/$(basename "$3").test rc
	[ -x "$test" ] || { stamp "$2: no $test" 1; return; }
	(cd "$root/$3" && timeout $(($5 + 10)) "$test" -test.run "$4" -test.count=1 -test.v -test.timeout "$5s") >"$log" 2>&1
	rc=$?
	[ "$(grep -c -- '--- PASS' "$log")" -gt 0 ] || rc=1
	stamp "$2 ($3${4:+ -test.run '$4'})" "$rc"
	count "$log" | sed 's/^/  /' | tee -a "$out/summary.txt"
}
# gobench DIR NAME PKG PATTERN BENCHTIME LIMIT: PKG's benchmarks PATTERN selects, no tests, into
# DIR/NAME.log under a kill after LIMIT seconds; their lines go to the summary.
gobench() {
	local log=$1/$2.log test=$bin/$(basename "$3").test
	[ -x "$test" ] || { stamp "$2: no $test" 1; return; }
	(cd "$root/$3" && timeout "$6" "$test" -test.run '^$' -test.bench "$4" -test.benchtime "$5" -test.count=1) >"$log" 2>&1
	stamp "$2 ($3 -test.bench '$4' -test.benchtime $5)" $?
	grep -E '^Benchmark|^(ok|FAIL|PASS)|panic' "$log" | sed 's/^/  /' | tee -a "$out/summary.txt"
}
# gpums FILE: each BenchmarkCUDADecode line's name and its ms/step, gpu-ms/step and pipe-ms/step.
gpums() {
	awk '/^BenchmarkCUDADecode/ { l = $1; for (i = 2; i <= NF; i++) if ($i ~ /^(ms|gpu-ms|pipe-ms)\/step$/) l = l " " $(i-1) " " $i; print l }' "$1"
}

nvidia-smi --query-gpu=name,serial,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$out/summary.txt"
say "$(date -u)"
for i in "${!builds[@]}"; do say "build ${tags[$i]}: $(head -1 "${builds[$i]}/COMMIT" 2>/dev/null)"; done

section_tests() {
	local d=$out/tests spec pkg
	mkdir -p "$d"
	for spec in internal/cuda:60 attention:300 model:240 engine:100; do
		pkg=${spec%%:*}
		[[ " ${TEST_PKGS:-internal/cuda attention model engine} " == *" $pkg "* ]] || continue
		gotest "$d" "$(basename "$pkg")" "$pkg" "" "${spec#*:}"
		gzip -f "$d/$(basename "$pkg").log"
	done
}

section_attention() {
	local d=$out/attention r i
	mkdir -p "$d"
	for r in $(seq "$rounds"); do
		for i in "${!builds[@]}"; do
			"${builds[$i]}/gollm" bench attention --commit "$(head -1 "${builds[$i]}/COMMIT")" \
				--json "$d/grid-${tags[$i]}-r$r.json" >"$d/grid-${tags[$i]}-r$r.txt" 2>>"$d/log.txt"
			stamp "attention grid ${tags[$i]} r$r" $?
		done
	done
	PYTHONUNBUFFERED=1 python3 scripts/bench/sdpa_peer.py --json "$d/sdpa.json" 2>>"$d/log.txt"
	stamp "attention sdpa_peer.py" $?
}

section_sweeps() {
	local d=$out/sweeps f i
	mkdir -p "$d"
	for f in ${SWEEPS:-batch tail overflow}; do
		for i in "${!builds[@]}"; do
			"${builds[$i]}/gollm" bench attention --shapes "scripts/bench/attention-$f-sweep.json" \
				--json "$d/$f-${tags[$i]}.json" >/dev/null 2>>"$d/log.txt"
			stamp "sweep $f ${tags[$i]}" $?
			python3 - "$d/$f-${tags[$i]}.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))["results"]
ok = sum(x["dispatch_us"] <= 1.05 * min([x["grouped_us"]] + [s["us"] for s in x["splitk_sweep"]]) for x in r)
print(f"  plan within 5% of the fastest kernel: {ok}/{len(r)}")
PY
		done
	done
}

section_decode() {
	local d=$out/decode r i pat
	mkdir -p "$d"
	pat="CUDADecode/.*/^batch=($(echo "${BATCHES:-1,16,64}" | tr , '|'))\$/^($(echo "${VARIANTS:-default}" | tr ' ' '|'))\$"
	for r in $(seq "$rounds"); do
		for i in "${!builds[@]}"; do
			(cd "$root/model" && GOLLM_BENCH_CONTEXT=${CONTEXT:-1088} GOLLM_BENCH_BATCHES=${BATCHES:-1,16,64} \
				timeout 500 "${builds[$i]}/model.test" -test.run XXX -test.bench "$pat" -test.benchtime 20x) \
				>"$d/decode-${tags[$i]}-r$r.txt" 2>&1
			stamp "decode ${tags[$i]} r$r (context ${CONTEXT:-1088})" $?
			gpums "$d/decode-${tags[$i]}-r$r.txt" | sed "s/^/  ${tags[$i]} /" | tee -a "$out/summary.txt"
		done
	done
}

section_latency() {
	latency_rounds "$out/latency" llama3.2-1b llama3-8b
}

# latency_rounds DIR CONFIG...: gollm bench latency of each --config (a preset's name or a config.json)
# on each build, ROUNDS times, at E2E_BATCHES (default 1,16,64), prompt 1024, 128 out, into
# DIR/latency.jsonl; a line of the summary per run and batch.
latency_rounds() {
	local d=$1 r i m
	shift
	mkdir -p "$d"
	for r in $(seq "$rounds"); do
		for i in "${!builds[@]}"; do
			for m in "$@"; do
				# shellcheck disable=SC2086 # LAT_ARGS: more flags, split on spaces
				"${builds[$i]}/gollm" bench latency --config "$m" --device cuda --input-len 1024 --output-len 128 \
					--warmup 1 --iters 1 --max-batched-tokens 8192 --batch "${E2E_BATCHES:-1,16,64}" ${LAT_ARGS:-} --json 2>>"$d/log.txt" |
					sed "s/^{/{\"build\":\"${tags[$i]}\",\"round\":$r,/" >>"$d/latency.jsonl"
				stamp "latency $m ${tags[$i]} r$r" "${PIPESTATUS[0]}"
			done
		done
	done
	python3 - "$d/latency.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    s, roof = r["decode_step"], r["roofline"]
    print(f"  {r['build']} r{r['round']} {r['model']:>14} batch {r['batch']:<3} step p50 {s['p50_ms']:.3f} p99 {s['p99_ms']:.3f} ms "
          f"({roof['percent']:.0f}% of its {roof['step_ms']:.3f} ms roofline), in model {r['decode_forward']['p50_ms']:.3f}, "
          f"prefill {r['prefill_ms']:.1f} ms")
PY
}

section_throughput() {
	local d=$out/throughput r i
	mkdir -p "$d"
	# run LABEL BUILD-INDEX ARGS...: one gollm bench throughput, its JSON labelled.
	run() {
		local label=$1 i=$2
		shift 2
		"${builds[$i]}/gollm" bench throughput --device cuda --json "$@" 2>>"$d/log.txt" |
			sed "s/^{/{\"build\":\"${tags[$i]}\",\"round\":$r,\"label\":\"$label\",/" >>"$d/throughput.jsonl"
		stamp "throughput $label ${tags[$i]} r$r" "${PIPESTATUS[0]}"
	}
	for r in $(seq "$rounds"); do
		for i in "${!builds[@]}"; do
			run 8b-128 "$i" --config llama3-8b --num-prompts 512 --input-len 128 --output-len 128 --max-num-seqs 256 --max-batched-tokens 8192
			run 8b-1024 "$i" --config llama3-8b --num-prompts 512 --input-len 1024 --output-len 128 --max-num-seqs 256 --max-batched-tokens 8192
			run 1b-mixed "$i" --config llama3.2-1b --num-prompts 1024 --input-len 32:512 --output-len 16:256 --max-num-seqs 128 --max-batched-tokens 4096
			run 8b-mixed "$i" --config llama3-8b --num-prompts 1024 --input-len 32:512 --output-len 16:256 --max-num-seqs 128 --max-batched-tokens 4096
		done
	done
	python3 - "$d/throughput.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"  {r['build']} r{r['round']} {r['label']:>9}: {r['output_tok_s']:.0f} output tok/s, {r['total_tok_s']:.0f} total, {r['elapsed_s']:.2f} s")
PY
}

section_serve() {
	local d=$out/serve url=http://127.0.0.1:8011 pid bpid c rc
	mkdir -p "$d"
	"$bin/gollm" serve --device cuda --port 8011 >"$d/serve.log" 2>&1 &
	pid=$!
	for _ in $(seq 240); do curl -sf "$url/health" >/dev/null && break; sleep 0.5; done
	curl -sf "$url/health" >/dev/null || { stamp "serve: the server did not come up" 1; kill "$pid"; return; }
	for c in 1 32 128; do
		"$bin/gollm" bench serve --url "$url" --concurrency "$c" --num-prompts $((c * 4)) --input-len 16:256 \
			--output-len 8:128 --json >"$d/bench-c$c.json" 2>>"$d/log.txt"
		stamp "serve concurrency $c" $?
		python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("  ", {k: v for k, v in r.items() if not isinstance(v, (dict, list))})' \
			"$d/bench-c$c.json" | tee -a "$out/summary.txt"
	done
	curl -s "$url/metrics" | grep -E '^gollm:(engine_|request_success|num_preempt|generation_tokens_total)' >"$d/metrics.txt"
	# Ctrl-C with requests in flight: the server drains what it admitted and exits 0; requests it had not
	# admitted are refused.
	"$bin/gollm" bench serve --url "$url" --concurrency 64 --num-prompts 1024 --output-len 800 --json \
		>"$d/bench-drain.json" 2>>"$d/log.txt" &
	bpid=$!
	sleep 0.5
	kill -INT "$pid"
	wait "$pid"
	rc=$?
	wait "$bpid"
	stamp "serve exit after Ctrl-C" "$rc"
	python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("   during the drain: completed", r["completed"], "failed", r["failed"], "output tokens", r["output_tokens"])' \
		"$d/bench-drain.json" | tee -a "$out/summary.txt"
}

section_gemm() {
	local d=$out/gemm b
	mkdir -p "$d"
	for b in CUDAGemv CUDAGemm CUDAGemmDiag CUDAGemmSplit; do
		(cd "$root/model" && timeout 180 "$bin/model.test" -test.run XXX -test.bench "^Benchmark$b\$" -test.benchtime 1x -test.v) \
			>"$d/$b.txt" 2>&1
		stamp "gemm $b" $?
	done
	python3 scripts/bench/cublaslt_probe.py --rows 16,64 >"$d/cublaslt.txt" 2>>"$d/log.txt"
	stamp "gemm cublaslt_probe.py" $?
}

section_prefill() {
	local d=$out/prefill
	mkdir -p "$d"
	(cd "$root/attention" && timeout 300 "$bin/attention.test" -test.run XXX -test.bench CUDAPrefill -test.benchtime 1x -test.v) \
		>"$d/prefill.txt" 2>&1
	stamp "prefill BenchmarkCUDAPrefill" $?
	grep -E '^BenchmarkCUDAPrefill' "$d/prefill.txt" | tee -a "$out/summary.txt"
	python3 scripts/bench/prefill_sdpa.py >"$d/sdpa.txt" 2>&1
	stamp "prefill prefill_sdpa.py" $?
	sed 's/^/  sdpa /' "$d/sdpa.txt" | tee -a "$out/summary.txt"
}

section_memcheck() {
	local d=$out/memcheck sanitizer pkg pat log rc ran
	mkdir -p "$d"
	sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
	# One sanitizer run a pattern: go test splits -run at slashes level by level, so alternatives of whole
	# paths in one pattern select nothing.
	while read -r pkg pat; do
		log=$(mktemp)
		(cd "$root/$pkg" && timeout 150 "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
			"$bin/$(basename "$pkg").test" -test.count=1 -test.v -test.run "$pat") >"$log" 2>&1
		rc=$?
		ran=$(grep -c -- '--- PASS' "$log")
		{ echo "== $pkg $pat: exit $rc, $ran passed; $(grep 'ERROR SUMMARY' "$log")"; grep -v -- '--- PASS\|^=== RUN' "$log" | tail -25; } >>"$d/memcheck.log"
		[ "$ran" -gt 0 ] || rc=1
		stamp "memcheck $pkg $pat ($ran tests)" "$rc"
		rm -f "$log"
	done <<'EOF'
model TestCUDAGemmSwiGLU/BF16/I200/
model TestCUDAGemm/BF16/odd-300-300x1280/m33/
model TestCUDAMatchesCPU/d128_BF16_gemm=true$
model TestCUDAMatchesCPU/d64_BF16_gemm=false$
model TestCUDAMatchesCPU/d128_F32_gemm=false$
model TestCUDAGemv(SwiGLU|RoPE|Argmax|NormFold)$
model TestCUDAGolden/llama3_bf16_tied_v5/(f32|native)$
attention TestCUDADecodeKernels/bf16/d128/
attention TestCUDADecodeOddRows
attention TestCUDADecodeShared/bf16/g4_kv2_d128_page16/groups_and_loners$
model TestCUDASharedPrefixMatchesCPU/d128_BF16$
EOF
}

section_fp8() {
	local d=$out/fp8 q extra
	mkdir -p "$d"
	gotest "$d" model-fp8 model '^(TestCUDAFP8.*|TestFP8Golden.*|TestPlanFP8)$' 200
	gotest "$d" cuda-lt internal/cuda '^TestMatmulE4M3(Candidates)?$' 60
	gobench "$d" lt-candidates internal/cuda '^BenchmarkLtE4M3Candidates$' 1x 120
	gotest "$d" attention-fp8kv attention '^(TestCUDADecodeFP8KV|TestCUDAPrefillFP8KV)$' 400
	gotest "$d" engine-fp8kv engine '^TestCUDAConcurrentFP8KV$' 200
	gobench "$d" fp8-matmul model '^BenchmarkCUDAFP8MatMul$' 1x 120
	gobench "$d" fp8-gemm-shapes model '^BenchmarkCUDAFP8GemmShapes$' 1x 120
	gobench "$d" fp8-fused model '^BenchmarkCUDAFP8Fused$' 1x 120
	# The quantizing kernels' forms in the step: Qwen2.5-7B's intermediate (no register shape) staged
	# against the loops, Llama-3-8B's register forms against staging every row (prefill per-op profile).
	(cd "$root/model" && GOLLM_BENCH_MODELS=qwen2.5-7b,llama-3-8b GOLLM_BENCH_CONTEXT=1088 GOLLM_BENCH_BATCHES=1 GOLLM_BENCH_QUANTIZATION=fp8 \
		timeout 200 "$bin/model.test" -test.run XXX -test.bench 'CUDADecode/.*/^prefill1024(-regs|-staged)?$' -test.benchtime 10x -test.v) \
		>"$d/prefill-forms.txt" 2>&1
	stamp "fp8 BenchmarkCUDADecode prefill, quantizing kernels' forms" $?
	gobench "$d" lt-forms internal/cuda 'LtE4M3Forms/.*/m=1024/' 1x 100
	# Decode attention over FP8 pages beside bf16 pages: the standard grid, the step's shapes and groups of
	# more than 8 heads.
	for kv in auto fp8; do
		timeout 120 "$bin/gollm" bench attention --kv-cache-dtype "$kv" --iters 30 --warmup 5 --partitions 256,1024 \
			--json "$d/attention-$kv.json" >"$d/attention-$kv.txt" 2>"$d/attention-$kv.log"
		stamp "fp8 bench attention, $kv pages" $?
		timeout 60 "$bin/gollm" bench attention --shapes "$root/scripts/bench/attention-step-shapes.json" --kv-cache-dtype "$kv" \
			--iters 50 --partitions 256,512 >"$d/attention-step-$kv.txt" 2>>"$d/attention-$kv.log"
		stamp "fp8 bench attention, the step's shapes, $kv pages" $?
		timeout 60 "$bin/gollm" bench attention --shapes "$root/scripts/bench/attention-wide-group-shapes.json" --kv-cache-dtype "$kv" \
			--iters 30 --warmup 5 >"$d/attention-wide-$kv.txt" 2>>"$d/attention-$kv.log"
		stamp "fp8 bench attention, groups of more than 8 heads, $kv pages" $?
	done
	# The step's per-op profile (logged by the benchmark: -test.v).
	(cd "$root/model" && GOLLM_BENCH_MODELS=llama-3-8b GOLLM_BENCH_CONTEXT=1088 GOLLM_BENCH_BATCHES=1 GOLLM_BENCH_QUANTIZATION=fp8 \
		timeout 100 "$bin/model.test" -test.run XXX -test.bench 'CUDADecode/.*/^batch=1$/^default$' -test.benchtime 20x -test.v) \
		>"$d/decode-profile.txt" 2>&1
	stamp "fp8 BenchmarkCUDADecode profile (batch 1)" $?
	(cd "$root/model" && GOLLM_BENCH_MODELS=llama-3-8b GOLLM_BENCH_CONTEXT=1088 GOLLM_BENCH_BATCHES=16 GOLLM_BENCH_QUANTIZATION=fp8 \
		timeout 100 "$bin/model.test" -test.run XXX -test.bench '^BenchmarkCUDADecode$/.*/^batch=16$/^(default|fp8-lt)$' -test.benchtime 1x) \
		>"$d/decode-b16.txt" 2>&1
	stamp "fp8 BenchmarkCUDADecode batch 16, e4m3 GEMM and cuBLASLt" $?
	fp8_e2e "$d"
}

# fp8_e2e DIR: gollm bench latency of llama3-8b in bf16, FP8 and FP8 with an FP8 KV cache, the torch
# peer in bf16 and FP8 beside it, and the table of gaps (the fp8 and fp8e2e sections).
fp8_e2e() {
	local d=$1 q extra
	for q in bf16 fp8 fp8kv; do
		extra=()
		[ "$q" = fp8 ] && extra=(--quantization fp8)
		[ "$q" = fp8kv ] && extra=(--quantization fp8 --kv-cache-dtype fp8)
		timeout 150 "$bin/gollm" bench latency --config llama3-8b --device cuda --random-weights --batch 1,16,64 \
			--input-len 1024 --output-len 128 "${extra[@]}" --json >"$d/latency-$q.jsonl" 2>"$d/latency-$q.log"
		stamp "fp8 bench latency llama3-8b $q" $?
	done
	PYTHONUNBUFFERED=1 timeout 320 python3 scripts/bench/fp8_peer.py --batches 1,64 --dtypes fp8,bf16 --iters 30 --json "$d/peer.json" \
		>"$d/peer.txt" 2>"$d/peer.log"
	stamp "fp8 fp8_peer.py" $?
	sed 's/^/  /' "$d/peer.txt" | tee -a "$out/summary.txt"
	python3 - "$d" <<'PY' | tee -a "$out/summary.txt"
import json, os, sys
raw = sys.argv[1]
def rows(name):
    out = {}
    path = os.path.join(raw, name)
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                out[r["batch"]] = r
    return out
bf, fp, kv = rows("latency-bf16.jsonl"), rows("latency-fp8.jsonl"), rows("latency-fp8kv.jsonl")
peer, peer16 = {}, {}
if os.path.exists(os.path.join(raw, "peer.json")):
    runs = json.load(open(os.path.join(raw, "peer.json")))
    peer = {r["batch"]: r for r in runs if r["dtype"] == "fp8"}
    peer16 = {r["batch"]: r for r in runs if r["dtype"] == "bf16"}
print("\n== FP8 weights, Llama-3-8B shape, random weights, prompt 1024, 128 out (decode step p50 ms)")
print(f"{'batch':>5} {'gollm bf16':>11} {'torch bf16':>11} {'bf16/torch':>11} {'gollm fp8':>10} {'fp8 roof':>9} {'% roof':>7} {'torch fp8':>10} {'fp8/torch':>10} {'bf16/fp8':>9} {'fp8+fp8 KV':>11} {'its roof':>9}")
for b in sorted(set(bf) | set(fp)):
    x, y, t = bf.get(b), fp.get(b), peer.get(b)
    t16 = peer16[b]["step_ms"] if b in peer16 else float("nan")
    xs = x["decode_step"]["p50_ms"] if x else float("nan")
    ys = y["decode_step"]["p50_ms"] if y else float("nan")
    roof = y["roofline"]["step_ms"] if y else float("nan")
    ts = t["step_ms"] if t else float("nan")
    z = kv.get(b)
    zs = z["decode_step"]["p50_ms"] if z else float("nan")
    zroof = z["roofline"]["step_ms"] if z else float("nan")
    flag = "  > 2.1 ms" if b == 1 and not ys <= 2.1 else ""
    flag += "  > 3.6 ms" if b == 64 and not zs <= 3.6 else ""
    print(f"{b:>5} {xs:>11.3f} {t16:>11.3f} {xs / t16:>11.3f} {ys:>10.3f} {roof:>9.3f} {100 * roof / ys:>6.0f}% {ts:>10.3f} {ys / ts:>10.3f} {xs / ys:>9.3f} {zs:>11.3f} {zroof:>9.3f}{flag}")
if 1 in bf and 1 in fp:
    a, c = bf[1]["prefill_ms"], fp[1]["prefill_ms"]
    print(f"prefill of 1024 tokens (batch 1): bf16 {a:.1f} ms, fp8 {c:.1f} ms, {a / c:.2f}x" + ("" if a / c >= 1.6 else "  < 1.6x"))
PY
}

section_fp8e2e() {
	local d=$out/fp8e2e q extra
	mkdir -p "$d"
	fp8_e2e "$d"
	for q in bf16 fp8 fp8kv; do
		extra=()
		[ "$q" = fp8 ] && extra=(--quantization fp8)
		[ "$q" = fp8kv ] && extra=(--quantization fp8 --kv-cache-dtype fp8)
		timeout 120 "$bin/gollm" bench throughput --config llama3-8b --device cuda --random-weights --num-prompts 512 \
			--input-len 1024 --output-len 128 "${extra[@]}" >"$d/throughput-$q.txt" 2>&1
		stamp "fp8e2e bench throughput llama3-8b $q" $?
		grep -E 'output tok/s|roofline' "$d/throughput-$q.txt" | sed "s/^/  $q /" | tee -a "$out/summary.txt"
	done
	local x y z
	x=$(awk '/output tok\/s/ {print $3; exit}' "$d/throughput-bf16.txt") y=$(awk '/output tok\/s/ {print $3; exit}' "$d/throughput-fp8.txt")
	z=$(awk '/output tok\/s/ {print $3; exit}' "$d/throughput-fp8kv.txt")
	[ -n "$x" ] && [ -n "$y" ] && [ -n "$z" ] && python3 -c "x, y, z = $x, $y, $z; print(f'bench throughput 512 x (1024 in, 128 out): bf16 {x:,.1f}, fp8 {y:,.1f} ({y / x:.3f}x), fp8 with FP8 KV {z:,.1f} output tok/s ({z / x:.3f}x)' + ('' if max(y, z) / x >= 1.5 else '  < 1.5x'))" | tee -a "$out/summary.txt"
}

# room LIMIT WHAT: whether a step of up to LIMIT seconds still fits the families section's budget
# (fam_start, fam_budget); a step that does not is skipped, and the call fails.
room() {
	[ $((SECONDS - fam_start + $1)) -le "$fam_budget" ] && return 0
	stamp "families: skipped $2 (budget ${fam_budget}s)" 1
	return 1
}

section_families() {
	local d=$out/families m fam_start=$SECONDS fam_budget=${FAM_BUDGET:-480}
	mkdir -p "$d"
	# Decode attention: windows and head_dim 256.
	if room 90 "bench attention"; then
		timeout 90 "$bin/gollm" bench attention --shapes scripts/bench/attention-families-shapes.json --iters 50 \
			--partitions 128,256,512,1024 --commit "$commit" --json "$d/attention.json" >"$d/attention.txt" 2>"$d/attention.log"
		stamp "families bench attention" $?
	fi
	# Prefill: the window's skipped tiles, head_dim 256.
	if room 60 "prefill benchmark"; then
		(cd "$root/attention" && timeout 60 "$bin/attention.test" -test.run '^$' -test.benchtime 1x \
			-test.bench 'CUDAPrefill/(d128-hq32-hkv8-L16384|d256)') >"$d/prefill.txt" 2>&1
		stamp "families prefill benchmark" $?
	fi
	# The decode steps against their rooflines, Llama-3-8B first (the yardstick).
	for m in llama3-8b qwen3-8b gemma3-12b qwen2.5-7b; do
		room 100 "bench latency $m" || continue
		timeout 100 "$bin/gollm" bench latency --config "$m" --device cuda --random-weights --batch 1,64 --input-len 1024 \
			--output-len 128 --json >"$d/latency-$m.jsonl" 2>"$d/latency-$m.log"
		stamp "families bench latency $m" $?
	done
	# The table. Targets: each family's fraction of roofline at least 0.9 of Llama-3-8B's; windowed
	# attention 16k/4k ≤ 1.10; head_dim 256 ≥ 90% of the copy bandwidth on the large shapes (batch
	# 64 × 4096, 16 × 16384); the windowed 16k prefill well under the unwindowed one.
	python3 - "$d" <<'PY' | tee -a "$out/summary.txt"
import json, os, re, sys
raw = sys.argv[1]
print("\n== decode step vs roofline (bench latency, random weights, prompt 1024, 128 new tokens)")
lat = {}
for m in ("llama3-8b", "qwen3-8b", "gemma3-12b", "qwen2.5-7b"):
    path = os.path.join(raw, f"latency-{m}.jsonl")
    if not os.path.exists(path):
        continue
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            lat[(m, r["batch"])] = r
print(f"{'model':<12} {'batch':>5} {'step ms':>9} {'roofline ms':>12} {'% roofline':>11} {'vs llama3-8b':>13}")
for (m, b), r in sorted(lat.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    pct = r["roofline"]["percent"]
    ref = lat.get(("llama3-8b", b))
    ratio = pct / ref["roofline"]["percent"] if ref and ref["roofline"]["percent"] else float("nan")
    flag = "" if m == "llama3-8b" or ratio >= 0.9 else "  < 0.90"
    print(f"{m:<12} {b:>5} {r['decode_step']['p50_ms']:>9.3f} {r['roofline']['step_ms']:>12.3f} {pct:>10.1f}% {ratio:>13.3f}{flag}")
path = os.path.join(raw, "attention.json")
if os.path.exists(path):
    res = json.load(open(path))["results"]
    print("\n== decode attention (bench attention, bf16, page 16; plan µs, share of copy bandwidth)")
    for r in res:
        print(f"{r['name']:<24} b{r['batch']:<3} ctx {r['ctx']:>6} window {r.get('window', 0):>5} d{r['head_dim']:<3} "
              f"{r['plan_kernel']}x{r['plan_partitions']:<3} {r['dispatch_us']:>9.1f} µs {100 * r['bw_fraction']:>5.1f}%")
    by = {(r["name"], r["batch"], r["ctx"]): r for r in res}
    for b in (1, 64):
        w, n = by.get(("mistral-7b-v0.1-w4096", b, 16384)), by.get(("mistral-7b-v0.1", b, 4096))
        if w and n:
            ratio = w["dispatch_us"] / n["dispatch_us"]
            print(f"window 4096 at 16k vs 4k, batch {b}: {w['dispatch_us']:.1f} / {n['dispatch_us']:.1f} µs = {ratio:.3f}"
                  + ("" if ratio <= 1.1 else "  > 1.10"))
    for r in res:
        if r["head_dim"] == 256 and not r.get("window") and r["batch"] * r["ctx"] >= 64 * 4096:
            print(f"head_dim 256 b{r['batch']} ctx {r['ctx']}: {100 * r['bw_fraction']:.1f}% of copy bandwidth"
                  + ("" if r["bw_fraction"] >= 0.9 else "  < 90%"))
path = os.path.join(raw, "prefill.txt")
if os.path.exists(path):
    print("\n== prefill attention (BenchmarkCUDAPrefill, tensor-core kernel, bf16)")
    us = {}
    for line in open(path):
        m = re.match(r"BenchmarkCUDAPrefill/(\S+?)(-\d+)?\s.*?([\d.]+) mma-us", line)
        if m:
            us[m.group(1)] = float(m.group(3))
            print(f"{m.group(1):<30} {float(m.group(3)):>10.1f} µs")
    a, b = us.get("d128-hq32-hkv8-L16384-W4096"), us.get("d128-hq32-hkv8-L16384")
    if a and b:
        print(f"16k prefill, window 4096 vs none: {a / b:.3f} of the time (the tiles outside the window skipped: ~0.44 of the work)")
PY
}

# lc_room LIMIT WHAT STEP: whether STEP is one of LC_STEPS (default all: latency peer prefill tests
# throughput serve) and a step of up to LIMIT seconds still fits the longctx section's budget (lc_start,
# lc_budget); a step past the budget is skipped, and the call fails.
lc_room() {
	case " ${LC_STEPS:-latency peer prefill tests throughput serve} " in
	*" $3 "*) ;;
	*) return 1 ;;
	esac
	[ $((SECONDS - lc_start + $1)) -le "$lc_budget" ] && return 0
	stamp "longctx: skipped $2 (budget ${lc_budget}s)" 1
	return 1
}

section_longctx() {
	local d=$out/longctx lc_start=$SECONDS lc_budget=${LC_BUDGET:-540}
	mkdir -p "$d"
	# Time to first token of one prompt (batch 1), one load for the three lengths: a warm-up iteration
	# then a measured one each (the 128k prefill runs twice). 131071 prompt tokens and the one generated fill
	# the 131072-token context: a prompt of the whole context leaves no room for a token (engine.ErrPromptTooLong).
	if lc_room 220 "bench latency" latency; then
		timeout 220 "$bin/gollm" bench latency --config llama3.1-8b --device cuda --batch 1 --input-len 8192,32768,131071 \
			--output-len 1 --warmup 1 --iters 1 --max-batched-tokens "${LC_CHUNK:-8192}" --json >"$d/latency.jsonl" 2>"$d/latency.log"
		stamp "longctx bench latency llama3.1-8b (chunk ${LC_CHUNK:-8192})" $?
	fi
	# The same over an FP8 KV cache (8k and 32k): latencyfp8 is not among lc_room's default steps.
	if lc_room 120 "bench latency fp8 KV" latencyfp8; then
		timeout 120 "$bin/gollm" bench latency --config llama3.1-8b --device cuda --batch 1 --input-len 8192,32768 \
			--output-len 1 --warmup 1 --iters 1 --max-batched-tokens "${LC_CHUNK:-8192}" --kv-cache-dtype fp8 \
			>"$d/latency-fp8.txt" 2>&1
		stamp "longctx bench latency llama3.1-8b, FP8 KV (chunk ${LC_CHUNK:-8192})" $?
	fi
	# The peer: the same model's prefill in PyTorch (cuBLAS, SDPA's flash kernel), and SDPA alone.
	if lc_room 150 "prefill_peer.py" peer; then
		PYTHONUNBUFFERED=1 timeout 150 python3 scripts/bench/prefill_peer.py --lens 8192,32768,131071 --iters 3 \
			--json "$d/peer.jsonl" >"$d/peer.txt" 2>&1
		stamp "longctx prefill_peer.py" $?
	fi
	# The prefill attention kernel alone at 8k and 32k.
	if lc_room 60 "BenchmarkCUDAPrefill" prefill; then
		(cd "$root/attention" && timeout 60 "$bin/attention.test" -test.run '^$' -test.benchtime 1x \
			-test.bench 'CUDAPrefill/d128-hq32-hkv8-L(8192|32768)(-fp8)?$') >"$d/prefill.txt" 2>&1
		stamp "longctx BenchmarkCUDAPrefill 8k, 32k" $?
	fi
	# Correctness at long contexts: the kernel on a 128k prompt's last rows; the model's memory bound.
	if lc_room 100 "TestCUDAPrefillLongContext" tests; then
		gotest "$d" prefill-long attention '^TestCUDAPrefillLongContext$' 90
	fi
	if lc_room 70 "TestCUDALongPromptBoundedMemory" tests; then
		gotest "$d" bounded model '^TestCUDALongPromptBoundedMemory$' 60
	fi
	# Throughput with 1024-token prompts against its compute roofline.
	if lc_room 120 "bench throughput" throughput; then
		timeout 120 "$bin/gollm" bench throughput --device cuda --config llama3-8b --num-prompts 512 --input-len 1024 \
			--output-len 128 --max-num-seqs 256 --max-batched-tokens 8192 --json >"$d/throughput.json" 2>"$d/throughput.log"
		stamp "longctx bench throughput 8b 1024 in" $?
	fi
	# The chunk's trade-off: long prompts delay the short ones (TTFT) and stretch the decodes' steps (ITL).
	if lc_room 200 "bench serve (mixed)" serve; then
		timeout 200 "$bin/gollm" bench serve --config llama3.1-8b --device cuda --concurrency 16 --num-prompts 80 \
			--input-len 256:1024 --output-len 128 --long-fraction 0.1 --long-input-len 32768 \
			--max-batched-tokens "${LC_CHUNKS:-2048,8192}" ${LC_THRESHOLD:+--long-prefill-token-threshold "$LC_THRESHOLD"} \
			--json >"$d/serve.jsonl" 2>"$d/serve.log"
		stamp "longctx bench serve mixed (chunks ${LC_CHUNKS:-2048,8192}${LC_THRESHOLD:+, threshold $LC_THRESHOLD})" $?
	fi
	python3 - "$d" <<'PY' | tee -a "$out/summary.txt"
import json, os, re, sys
raw = sys.argv[1]
H200_BF16 = 989e12  # dense bf16 tensor-core FLOP/s
def lines(name):
    path = os.path.join(raw, name)
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip().startswith("{")]
gollm = {r["input_len"]: r for r in lines("latency.jsonl")}
peer = {r["tokens"]: r for r in lines("peer.jsonl")}
print("\n== time to first token, Llama-3.1-8B shape, batch 1, bf16 random weights (gollm/peer: target <= 0.95 at 8k, <= 0.90 at 32k)")
print(f"{'tokens':>7} {'chunk':>6} {'gollm ms':>10} {'gollm tok/s':>12} {'peer ms':>10} {'peer tok/s':>11} {'gollm/peer':>11}")
targets = {8192: 0.95, 32768: 0.90}
for n in (8192, 32768, 131071):
    g, p = gollm.get(n), peer.get(n)
    gm = g["prefill_ms"] if g else float("nan")
    pm = p["prefill_ms"] if p else float("nan")
    ratio = gm / pm if g and p else float("nan")
    flag = "" if n not in targets or ratio <= targets[n] else f"  > {targets[n]:.2f}"
    print(f"{n:>7} {g['max_num_batched_tokens'] if g else '-':>6} {gm:>10.1f} {g['prefill_tok_s'] if g else float('nan'):>12.0f} "
          f"{pm:>10.1f} {p['prefill_tok_s'] if p else float('nan'):>11.0f} {ratio:>11.3f}{flag}")
print("\n== prefill attention, one layer, d128 hq32 hkv8 (target: gollm >= 50% of 989 TFLOP/s at 32k)")
us = {}
path = os.path.join(raw, "prefill.txt")
if os.path.exists(path):
    for line in open(path):
        m = re.match(r"BenchmarkCUDAPrefill/d128-hq32-hkv8-L(\d+)(-\d+)?\s", line)
        metrics = {unit: float(v) for v, unit in re.findall(r"([\d.]+) (\S+)", line)}
        # The kernel the model runs: the first of attention.CUDAPrefill.Kernels the benchmark timed.
        for k in ("sm90", "mma", "fma"):
            if m and k + "-us" in metrics and k + "-TFLOP/s" in metrics:
                us[int(m.group(1))] = (metrics[k + "-us"], metrics[k + "-TFLOP/s"], k)
                break
print(f"{'tokens':>7} {'kernel':>7} {'gollm us':>10} {'TFLOP/s':>8} {'of 989':>7} {'SDPA us':>9} {'SDPA TFLOP/s':>13} {'gollm/SDPA':>11}")
for n in (8192, 32768):
    g, p = us.get(n), peer.get(n)
    if not g:
        continue
    sdpa_us = p["attn_ms"] / 32 * 1e3 if p else float("nan")
    flag = "" if n != 32768 or g[1] * 1e12 >= 0.5 * H200_BF16 else "  < 50%"
    print(f"{n:>7} {g[2]:>7} {g[0]:>10.1f} {g[1]:>8.1f} {100 * g[1] * 1e12 / H200_BF16:>6.1f}% {sdpa_us:>9.1f} "
          f"{p['attn_tflops'] if p else float('nan'):>13.1f} {g[0] / sdpa_us if p else float('nan'):>11.3f}{flag}")
for n in (8192, 32768, 131071):
    g, p = gollm.get(n), peer.get(n)
    if g and p:
        print(f"peer at {n}: attention {p['attn_ms']:.1f} of {p['prefill_ms']:.1f} ms ({100 * p['attn_ms'] / p['prefill_ms']:.0f}%)")
path = os.path.join(raw, "throughput.json")
if os.path.exists(path) and os.path.getsize(path):
    r = json.load(open(path))
    pct = r["roofline"].get("percent", 0)
    print(f"\n== bench throughput, Llama-3-8B, 512 x (1024 in, 128 out): {r['output_tok_s']:.0f} output tok/s, "
          f"{pct:.1f}% of its compute roofline" + ("" if pct >= 75 else "  < 75%"))
rs = lines("serve.jsonl")
if rs:
    print("\n== mixed load in process (16 in flight, 1 in 10 prompts of 32768 tokens, others 256-1024; 128 out), ms")
    print(f"{'chunk':>6} {'cap':>5} {'short TTFT p50/p90/p99':>24} {'short ITL p50/p90/p99':>24} {'long TTFT p50':>14} {'long ITL p99':>13} {'out tok/s':>10}")
    for r in rs:
        s, l = r.get("short") or {}, r.get("long") or {}
        f = lambda x: f"{x.get('p50_ms', 0):.0f}/{x.get('p90_ms', 0):.0f}/{x.get('p99_ms', 0):.0f}"
        print(f"{r['max_num_batched_tokens']:>6} {r.get('long_prefill_token_threshold', 0) or '-':>5} {f(s.get('ttft', {})):>24} {f(s.get('itl', {})):>24} "
              f"{l.get('ttft', {}).get('p50_ms', 0):>14.0f} {l.get('itl', {}).get('p99_ms', 0):>13.1f} {r['output_tok_s']:>10.0f}")
PY
}

# prefix_serve DIR: gollm bench serve with the engine in process, --shared-prefix off, then auto, at
# concurrency 64 with one system prompt of 4096 tokens before every request's 128 (128 out): random
# weights of SERVE_CONFIG's shape (default llama3-8b), or SERVE_MODEL's folder.
prefix_serve() {
	local d=$1 mode model=(--config "${SERVE_CONFIG:-llama3-8b}")
	[ -n "${SERVE_MODEL:-}" ] && model=(--model "$SERVE_MODEL")
	for mode in off auto; do
		timeout 200 "$bin/gollm" bench serve "${model[@]}" --device cuda --concurrency 64 --num-prompts 256 \
			--shared-prefix-len 4096 --input-len 128 --output-len 128 --shared-prefix "$mode" \
			--json >"$d/serve-$mode.json" 2>>"$d/serve-bench.log"
		stamp "prefix serve --shared-prefix $mode (system prompt 4096 tokens, concurrency 64, in process)" $?
	done
}

section_prefix() {
	local d=$out/prefix i
	mkdir -p "$d"
	gotest "$d" attention-shared attention '^(TestCUDADecodeKernels|TestCUDADecodeShared|TestDecodeShared|TestAttendShared|TestFindSharedGroups|TestSharedLayout|TestDecideShared.*|TestDecode)$' 300
	gotest "$d" model-shared model '^TestCUDASharedPrefixMatchesCPU$' 90
	gotest "$d" engine-shared engine '^(TestCUDASharedPrefixGreedyIdentical|TestSharedPrefixGreedyIdentical)$' 60
	gobench "$d" shared-bench attention '^BenchmarkCUDADecodeShared$' 1x 240
	gobench "$d" shared-timeline attention '^BenchmarkCUDADecodeSharedTimeline$' 1x 60
	gobench "$d" shared-step model '^BenchmarkCUDADecodeSharedStep$' 20x 300
	prefix_serve "$d"
	for i in "${!builds[@]}"; do
		timeout 150 "${builds[$i]}/gollm" bench attention --commit "$(head -1 "${builds[$i]}/COMMIT")" \
			--json "$d/attention-${tags[$i]}.json" >"$d/attention-${tags[$i]}.txt" 2>"$d/attention-${tags[$i]}.log"
		stamp "prefix bench attention (the standard grid) ${tags[$i]}" $?
	done
	prefix_report "$d"
}

# section_prefixserve: the prefix section's serve comparison alone (prefix_serve), with its table.
section_prefixserve() {
	local d=$out/prefix
	mkdir -p "$d"
	prefix_serve "$d"
	prefix_report "$d"
}

# prefix_report DIR: the prefix section's tables from what DIR holds (a part not run prints nothing).
prefix_report() {
	python3 - "$1" <<'PY' | tee -a "$out/summary.txt"
import json, os, re, sys
raw = sys.argv[1]
print("\n== shared-prefix decode attention (Llama-3-8B heads, bf16, page 16, 64 sequences, 128-token suffixes)")
print(f"{'prefix':>7} {'plain us':>10} {'shared us':>10} {'bound us':>9} {'flop us':>8} {'shared/bound':>13} {'plain/shared':>13}")
for line in open(os.path.join(raw, "shared-bench.log")) if os.path.exists(os.path.join(raw, "shared-bench.log")) else []:
    m = re.match(r"BenchmarkCUDADecodeShared/llama3_b64_prefix(\d+)_suffix128(_e4m3)?\S*\s+\d+\s+(.*)", line)
    if not m:
        continue
    v = {unit: float(x) for x, unit in re.findall(r"([\d.e+-]+) (\S+)", m.group(3))}
    prefix = int(m.group(1))
    flags = ("" if v["shared/bound"] <= 1.2 else "  > 1.2x bound") + \
            ("" if prefix != 16384 or v["plain/shared"] >= 10 else "  < 10x at 16k") + \
            ("  (FP8 pages)" if m.group(2) else "")
    print(f"{prefix:>7} {v['plain_us']:>10.1f} {v['shared_us']:>10.1f} {v['bound_us']:>9.1f} {v.get('flop_us', 0):>8.1f} "
          f"{v['shared/bound']:>13.3f} {v['plain/shared']:>13.2f}{flags}")
    variants = {re.match(r"shared_(.+)_us", k).group(1): x for k, x in v.items()
                if re.match(r"shared_(.+)_us", k) and k != "shared_serial_us"}
    if variants:
        print("        prefix kernels: " + ", ".join(f"{name} {x:.1f} us" for name, x in variants.items()))
    if "shared_serial_us" in v:
        print(f"        suffix pass after the prefix pass (SharedSerial): {v['shared_serial_us']:.1f} us; each launch alone: " +
              ", ".join(f"{st} {v[st + '_us']:.1f} us" for st in ("gather", "prefix", "suffix", "merge") if st + "_us" in v))
step = {}
for line in open(os.path.join(raw, "shared-step.log")) if os.path.exists(os.path.join(raw, "shared-step.log")) else []:
    m = re.match(r"BenchmarkCUDADecodeSharedStep/(\S+?)(-\d+)?\s+\d+\s+(.*)", line)
    if m:
        step[m.group(1)] = {unit: float(x) for x, unit in re.findall(r"([\d.e+-]+) (\S+)", m.group(3))}
if step:
    print("\n== Llama-3-8B decode step, batch 64 behind a 16k shared prefix (128 own tokens each), random bf16 weights")
    for name, v in step.items():
        print(f"{name:<12} {v.get('ms/step', 0):>9.3f} ms/step  shared-frac {v.get('shared-frac', 0):.2f}  graph-frac {v.get('graph-frac', 0):.2f}")
    if "shared" in step and "plain-graph" in step:
        print(f"plain (graph) / shared: {step['plain-graph']['ms/step'] / step['shared']['ms/step']:.2f}")
for mode in ("off", "auto", "always"):
    path = os.path.join(raw, f"serve-{mode}.json")
    if os.path.exists(path):
        r = json.load(open(path))
        if mode == "off":
            print("\n== gollm bench serve, concurrency 64, one system prompt of", r.get("shared_prefix_len"), "tokens")
        print(f"--shared-prefix {mode:<4}: {r['output_tok_s']:.0f} output tok/s, ITL p50 {r['itl']['p50_ms']:.2f} ms "
              f"p99 {r['itl']['p99_ms']:.2f} ms, TTFT p50 {r['ttft']['p50_ms']:.1f} ms, failed {r['failed']}")
grids = {}
for tag in ("old", "new"):
    path = os.path.join(raw, f"attention-{tag}.json")
    if os.path.exists(path):
        grids[tag] = {f"{r['name']} {r['batch']}x{r['ctx']}": r["dispatch_us"] for r in json.load(open(path))["results"]}
if "new" in grids:
    print("\n== the standard grid (no sharing: the plain path), dispatcher µs" + (", new/old" if "old" in grids else ""))
    worst = 0.0
    for key, us in grids["new"].items():
        old = grids.get("old", {}).get(key)
        ratio = us / old if old else None
        if ratio:
            worst = max(worst, ratio - 1)
        print(f"{key:<36} {us:>9.1f}" + (f" {ratio:>7.3f}" + ("  > 1%" if ratio > 1.01 else "") if ratio else ""))
    if "old" in grids:
        print(f"slowest against old: {100 * worst:+.2f}%")
PY
}

section_constraints() {
	local d=$out/constraints
	mkdir -p "$d"
	# The masked pick (the sampling kernel reading the masks beside the logits) against its CPU twin on
	# rows of 128256 logits (one token allowed, 0.1%, half, all but the best, first and last words,
	# unmasked, a NaN or +Inf the mask leaves out; greedy and sampled; picks and kept sets) and on
	# hand-made rows (ties through the cuts, a partial last word, −∞), pipelined picks with masks
	# committed after the step began, sampling; constrained requests picked on the device give the
	# tokens of the same requests drawn on the host.
	gotest "$d" model-masked model '^(TestCUDAMaskedPickMatchesTwin|TestCUDAMaskedPickTies|TestCUDAPipelinedPicks|TestCUDASampleMatchesTwin|TestCUDASampleTies)$' 120
	gotest "$d" engine-constraint engine '^TestCUDAConstraintMatchesHost$' 60
	# The pick of 1 and 64 rows without masks, with dense and with sparse ones; the engine's decode step
	# (step-ms: the median interval between two tokens of the batch) on a Llama-3.2-1B-shaped model at
	# batch 1 and 64 with and without a JSON Schema constraint on every request (target: constraint
	# within 5% of none), and its phases (wait, host, begin, commit, masks: docs/bench/constraint.md).
	gobench "$d" masked-pick model '^BenchmarkCUDAMaskedPick$' 300x 60
	gobench "$d" constrained-step engine '^BenchmarkCUDAConstrainedStep$' 3x 240
	awk '/^BenchmarkCUDAConstrainedStep/ {
		split($1, p, "/"); b = p[2]; m = p[3]; sub(/-[0-9]+$/, "", m)
		for (i = 1; i < NF; i++) v[b, m, $(i+1)] = $i
		bs[b] = 1
	} END {
		for (b in bs) {
			r = v[b, "none", "step-ms"] ? v[b, "constraint", "step-ms"] / v[b, "none", "step-ms"] : 0
			printf "%s: step none %s ms, constraint %s ms (%.3f%s), host %s ms, constraint-host %s ms\n", b,
				v[b, "none", "step-ms"], v[b, "constraint", "step-ms"], r, (r > 1.05 ? ", over 1.05" : ""),
				v[b, "host", "step-ms"], v[b, "constraint-host", "step-ms"]
			split("none constraint", ms, " ")
			for (k = 1; k <= 2; k++)
				printf "  %s %s: wait %s, host %s, begin %s, commit %s, masks %s ms; elapsed/steps %s ms\n", b, ms[k],
					v[b, ms[k], "wait-ms"], v[b, ms[k], "host-ms"], v[b, ms[k], "begin-ms"], v[b, ms[k], "commit-ms"],
					v[b, ms[k], "masks-ms"], v[b, ms[k], "ms/step"]
		}
	}' "$d/constrained-step.log" | sort -s -t= -k2,2n | tee -a "$out/summary.txt"
}

section_hardening() {
	local d=$out/hardening
	mkdir -p "$d"
	# The sticky driver errors that mark a device lost.
	gotest "$d" cuda-lost internal/cuda '^TestIsContextLost$' 60
	# The pick kernels' NaN/+Inf sentinel against the CPU twin on rows of 128256 logits; a NaN embedding
	# row poisons one sequence (f32 and bf16, graphs and eager; the skinny GEMM's fused argmax); argmax,
	# GEMV and GEMM argmax with NaN and −Inf rows; sampling; pipelined picks; the KV pool checked against
	# free device memory after the weights.
	gotest "$d" model-hardening model '^(TestCUDAPickNonFinite|TestCUDANonFinitePicks|TestCUDAKVTooLarge|TestCUDAArgmaxTies|TestCUDAGemvArgmax|TestCUDAGemmArgmax|TestCUDASample.*|TestCUDAPipelinedPicks)$' 300
}

# nccl_env exports GOLLM_NCCL: its value if set, else the library of PyTorch's nvidia-nccl wheel.
nccl_env() {
	export GOLLM_NCCL=${GOLLM_NCCL:-$(python3 -c "import glob,site;print((sorted(glob.glob(site.getsitepackages()[0]+'/nvidia/nccl/lib/libnccl.so*'))+[''])[0])" 2>/dev/null)}
}

section_tp() {
	local d=$out/tp
	mkdir -p "$d"
	nccl_env
	gotest "$d" cuda-nccl internal/cuda '^TestNCCL.*$' 60
	gotest "$d" model-tp model '^(TestCUDAPeerAllReduce.*|TestCUDAGoldenTensorParallel|TestCUDATensorParallel.*|TestTensorParallel.*|TestParallelCombine|TestSizeKVRanks)$' 240
	gobench "$d" allreduce model '^BenchmarkCUDAAllReduce$' 200x 120
	gobench "$d" tp-step model '^BenchmarkCUDATensorParallelStep$' 20x 200
}

# section_tprank: one rank of Llama-3-70B's TP_SIZES (default 2 4 8) shardings run alone on one GPU
# (scripts/bench/tp-ranks: rank 0's heads, features and vocabulary shard as planTP cuts them), the
# decode step without its all-reduces: what each GPU of a tensor-parallel group computes, beside the
# step targets that include the collectives (docs/bench/tp-h200.md).
section_tprank() {
	local n configs=()
	for n in ${TP_SIZES:-2 4 8}; do
		configs+=("scripts/bench/tp-ranks/llama3-70b-tp$n.json")
	done
	E2E_BATCHES=${TP_BATCHES:-1,64} latency_rounds "$out/tprank" "${configs[@]}"
}

# section_tpgroup: Llama-3-70B (random bf16 weights) sharded over each of TP_SIZES (default 2 4 8) that
# the machine has the GPUs for, the latency section's runs at TP_BATCHES (default 1,64), with every
# all-reduce through NCCL (GOLLM_TP_ALLREDUCE=nccl) and with the decode steps' sums one-shot (auto):
# beside tprank's rank alone, the all-reduces' share of the step (docs/bench/tp-h200.md).
section_tpgroup() {
	local n mode gpus
	gpus=$(nvidia-smi -L | wc -l)
	nccl_env
	for n in ${TP_SIZES:-2 4 8}; do
		if [ "$n" -gt "$gpus" ]; then
			say "tpgroup: TP $n needs $n GPUs, this machine has $gpus"
			continue
		fi
		for mode in nccl auto; do
			say "tpgroup: TP $n, GOLLM_TP_ALLREDUCE=$mode"
			GOLLM_TP_ALLREDUCE=$mode LAT_ARGS="--tensor-parallel-size $n" E2E_BATCHES=${TP_BATCHES:-1,64} \
				latency_rounds "$out/tpgroup/tp$n-$mode" llama3-70b
		done
	done
}

section_compare() {
	local d=$out/compare r i b m shapes=${SHAPES:-scripts/bench/attention-shapes.json}
	[ "${#builds[@]}" = 2 ] || { stamp "compare: no BASE to compare with" 1; return; }
	mkdir -p "$d"
	for r in $(seq "${ROUNDS:-2}"); do
		for i in 0 1; do
			b=${tags[$i]}
			for m in llama3-8b llama3.2-1b; do
				"${builds[$i]}/gollm" bench latency --config "$m" --device cuda --random-weights --batch 1,64 --input-len 1024 \
					--output-len 128 --json >"$d/latency-$m-$b-r$r.jsonl" 2>"$d/latency-$m-$b-r$r.log"
				stamp "compare latency $m $b r$r" $?
			done
			"${builds[$i]}/gollm" bench attention --shapes "$shapes" --commit "$(head -1 "${builds[$i]}/COMMIT")" \
				--json "$d/attention-$b-r$r.json" >"$d/attention-$b-r$r.txt" 2>"$d/attention-$b-r$r.log"
			stamp "compare attention $b r$r" $?
		done
	done
	python3 - "$d" <<'PY' | tee -a "$out/summary.txt"
import json, sys, glob, os
raw = sys.argv[1]
def latency(build):
    out = {}
    for path in sorted(glob.glob(os.path.join(raw, f"latency-*-{build}-r*.jsonl"))):
        for line in open(path):
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            key = f"{r['model']} batch {r['batch']} decode step (ms)"
            out.setdefault(key, []).append(r["decode_step"]["p50_ms"])
    return out
def grid(build):
    out = {}
    for path in sorted(glob.glob(os.path.join(raw, f"attention-{build}-r*.json"))):
        for r in json.load(open(path))["results"]:
            key = f"{r['name']} {r['batch']}x{r['ctx']} hq{r['hq']} hkv{r['hkv']} d{r['head_dim']} (us)"
            out.setdefault(key, []).append(r["dispatch_us"])
    return out
rows, worst = [], 0.0
for kind in (latency, grid):
    o, n = kind("old"), kind("new")
    for key in o:
        if key not in n or not o[key] or not n[key]:
            continue
        a, b = sum(o[key]) / len(o[key]), sum(n[key]) / len(n[key])
        ratio = b / a if a else float("nan")
        worst = max(worst, abs(ratio - 1))
        rows.append((key, a, b, ratio, len(o[key]), len(n[key])))
w = max([len(r[0]) for r in rows] + [5])
print(f"{'shape':<{w}}  {'old':>10}  {'new':>10}  {'new/old':>8}  runs")
for key, a, b, ratio, na, nb in rows:
    flag = "" if abs(ratio - 1) <= 0.01 else "  > 1%"
    print(f"{key:<{w}}  {a:10.4f}  {b:10.4f}  {ratio:8.4f}  {na}+{nb}{flag}")
print(f"{len(rows)} shapes; largest difference {100 * worst:.2f}%")
PY
}

sections="$*"
[ "$sections" = all ] && sections="tests attention sweeps decode latency throughput serve gemm prefill families longctx constraints hardening fp8 prefix tp tprank ${BASE:+compare }memcheck"
for s in $sections; do
	if ! declare -F "section_$s" >/dev/null; then
		echo "device-run.sh: no section $s" >&2
		status=2
		continue
	fi
	say "== $s $(date -u +%H:%M:%S)"
	"section_$s"
done
say "$(date -u)"
# The run tool brings back at most 8 files: past that, pack all but the summary.
if [ "$(find "$out" -type f | wc -l)" -gt 8 ]; then
	tmp=$(mktemp) && tar -C "$out" -czf "$tmp" --exclude ./summary.txt . &&
		find "$out" -mindepth 1 ! -name summary.txt -delete && mv "$tmp" "$out/results.tar.gz"
fi
exit $status
