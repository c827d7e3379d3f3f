#!/usr/bin/env bash
# Reruns the tables of docs/bench on a GPU machine from binaries built elsewhere: nothing is compiled
# here. Build first, on any machine with Go (scripts/bench/build.sh), carry gpu/bench.tar.xz, then from
# the repository root on the GPU machine:
#
#   bash scripts/bench/device-run.sh SECTION...
#
# Sections (run one or a few a call where a call may last 10 minutes; `all` runs them all in turn):
#   tests       the CUDA test suites of internal/cuda, attention, model (CUDA and golden) and engine
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
#   memcheck    compute-sanitizer memcheck over the decode step's kernels, each pattern required to run
#               tests (a memcheck that ran nothing is a failure)
#
# Environment:
#   BIN     the build to run (default gpu/bench; BIN.tar.xz, if carried, is unpacked over it first)
#   BASE    a second build (e.g. gpu/base, the commit before a change): the timed sections run BASE then
#           BIN in turn, ROUNDS times, in the same call, so that before and after share the GPU
#   ROUNDS  rounds of each timed section (default 1)
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
builds=("$bin")
tags=(new)
if [ -n "${BASE:-}" ]; then
	unpack "$BASE"
	[ -x "$BASE/gollm" ] || { echo "device-run.sh: no build in BASE=$BASE" >&2; exit 2; }
	builds=("$(cd "$BASE" && pwd)" "$bin")
	tags=(base new)
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
	grep -E -- '--- FAIL|^panic' "$1" | head -10
}
# gpums FILE: each BenchmarkCUDADecode line's name and its ms/step, gpu-ms/step and pipe-ms/step.
gpums() {
	awk '/^BenchmarkCUDADecode/ { l = $1; for (i = 2; i <= NF; i++) if ($i ~ /^(ms|gpu-ms|pipe-ms)\/step$/) l = l " " $(i-1) " " $i; print l }' "$1"
}

nvidia-smi --query-gpu=name,serial,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$out/summary.txt"
say "$(date -u)"
for i in "${!builds[@]}"; do say "build ${tags[$i]}: $(head -1 "${builds[$i]}/COMMIT" 2>/dev/null)"; done

section_tests() {
	local d=$out/tests pkg name pat log
	mkdir -p "$d"
	for pkg in internal/cuda attention model engine; do
		name=$(basename "$pkg")
		case $name in cuda) pat=. ;; model) pat='CUDA|Golden' ;; *) pat=CUDA ;; esac
		log=$d/$name.log
		(cd "$root/$pkg" && timeout 400 "$bin/$name.test" -test.run "$pat" -test.count=1 -test.v) >"$log" 2>&1
		stamp "tests $pkg" $?
		count "$log" | tee -a "$out/summary.txt"
		gzip -f "$log"
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
	local d=$out/latency r i m
	mkdir -p "$d"
	for r in $(seq "$rounds"); do
		for i in "${!builds[@]}"; do
			for m in llama3.2-1b llama3-8b; do
				"${builds[$i]}/gollm" bench latency --config "$m" --device cuda --input-len 1024 --output-len 128 \
					--warmup 1 --iters 1 --max-batched-tokens 8192 --batch "${E2E_BATCHES:-1,16,64}" --json 2>>"$d/log.txt" |
					sed "s/^{/{\"build\":\"${tags[$i]}\",\"round\":$r,/" >>"$d/latency.jsonl"
				stamp "latency $m ${tags[$i]} r$r" "${PIPESTATUS[0]}"
			done
		done
	done
	python3 - "$d/latency.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    s = r["decode_step"]
    print(f"  {r['build']} r{r['round']} {r['model']:>12} batch {r['batch']:<3} step p50 {s['p50_ms']:.3f} p99 {s['p99_ms']:.3f} ms, "
          f"in model {r['decode_forward']['p50_ms']:.3f}, prefill {r['prefill_ms']:.1f} ms")
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
EOF
}

sections="$*"
[ "$sections" = all ] && sections="tests attention sweeps decode latency throughput serve gemm prefill memcheck"
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
