#!/usr/bin/env bash
# families-check.sh ARCHIVE — the GPU check of the model families on the CUDA backend (issue 40), in one
# device run from the repository root, with the binaries families-build.sh packed into ARCHIVE:
#   1. the CUDA test suites of attention, model and engine in full (no -test.run), each under a timeout,
#      with their pass and fail counts and first failures;
#   2. gollm bench attention --shapes scripts/bench/attention-families-shapes.json: Mistral-7B-v0.1's
#      window of 4096 at context 16384 beside a 4096-token context, and head_dim 256 (Gemma 3) against
#      the copy bandwidth;
#   3. BenchmarkCUDAPrefill's 16384-token prompts with and without a window of 4096 (the windowed kernel
#      skips the tiles outside the window) and its head_dim 256 prompt;
#   4. gollm bench latency --config M --device cuda --random-weights --batch 1,64 --input-len 1024
#      --output-len 128 --json for M = llama3-8b, qwen3-8b, gemma3-12b, qwen2.5-7b;
#   5. a summary table, last: the suites; per model and batch the decode step, its roofline, the fraction
#      of the roofline and its ratio to Llama-3-8B's fraction in the same run; the windowed decode
#      attention at 16k against 4k; head_dim 256's share of the copy bandwidth; the prefill tiles skipped.
# Passing: every suite rc=0 and fail=0; each family's fraction of roofline at least 0.9 of Llama-3-8B's
# (ratio ≥ 0.90); windowed attention 16k/4k ≤ 1.10; head_dim 256 ≥ 90% of the copy bandwidth on the large
# shapes (batch 64 × 4096, 16 × 16384); the windowed 16k prefill well under the unwindowed one (about
# 0.45 of its time).
#
# Here:   scripts/bench/families-build.sh gpu/families.tar.xz
# There:  (carry gpu) bash scripts/bench/families-check.sh gpu/families.tar.xz
# Results under $OUT (default ./out): summary.txt and results.tar.gz (every log and JSON). About 6
# minutes on an H200; FAM_BUDGET (default 420 s) bounds the run: a step that would start past it is
# skipped, and each suite and benchmark has its own timeout.
set -uo pipefail
root=$(pwd)
[ $# -eq 1 ] || { echo "usage: $0 ARCHIVE (families-build.sh's)" >&2; exit 2; }
bins=$(mktemp -d)
xz -dc "$1" | tar -C "$bins" -xf - || { echo "families-check: cannot unpack $1" >&2; exit 2; }
out=${OUT:-out}
mkdir -p "$out/raw"
out=$(cd "$out" && pwd)
raw=$out/raw
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=$out/summary.txt
budget=${FAM_BUDGET:-420}
{
	nvidia-smi --query-gpu=name,serial,driver_version,clocks.max.sm --format=csv,noheader
	date -u
} | tee "$summary"
stamp() { echo "$* (t=${SECONDS}s)" | tee -a "$summary"; }
# room LIMIT: whether a step of up to LIMIT seconds still fits the budget.
room() { [ $((SECONDS + $1)) -le "$budget" ] || { stamp "skipped: $2 (budget ${budget}s)"; return 1; }; }

# 1. The suites, in their package folders (testdata); -test.timeout under the kill's, for a stack dump.
for spec in attention:150 model:210 engine:100; do
	pkg=${spec%%:*}
	lim=${spec#*:}
	(cd "$root/$pkg" && timeout $((lim + 10)) "$bins/$pkg.test" -test.count=1 -test.v -test.timeout "${lim}s") \
		>"$raw/$pkg-test.log" 2>&1
	rc=$?
	stamp "$pkg tests: rc=$rc pass=$(grep -c -- '--- PASS' "$raw/$pkg-test.log") fail=$(grep -c -- '--- FAIL' "$raw/$pkg-test.log")"
	grep -E -- '--- FAIL|^panic|timed out' "$raw/$pkg-test.log" | head -12 | tee -a "$summary"
done

# 2. Decode attention: windows and head_dim 256.
if room 90 "bench attention"; then
	timeout 90 "$bins/gollm" bench attention --shapes scripts/bench/attention-families-shapes.json --iters 50 \
		--partitions 128,256,512,1024 --json "$raw/attention.json" >"$raw/attention.txt" 2>"$raw/attention.log"
	stamp "bench attention rc=$?"
fi

# 3. Prefill: the window's skipped tiles, head_dim 256.
if room 60 "prefill benchmark"; then
	(cd "$root/attention" && timeout 60 "$bins/attention.test" -test.run '^$' -test.benchtime 1x \
		-test.bench 'CUDAPrefill/(d128-hq32-hkv8-L16384|d256)') >"$raw/prefill.txt" 2>&1
	stamp "prefill benchmark rc=$?"
fi

# 4. The decode steps against their rooflines, Llama-3-8B first (the yardstick).
for m in llama3-8b qwen3-8b gemma3-12b qwen2.5-7b; do
	room 100 "bench latency $m" || continue
	timeout 100 "$bins/gollm" bench latency --config "$m" --device cuda --random-weights --batch 1,64 --input-len 1024 \
		--output-len 128 --json >"$raw/latency-$m.jsonl" 2>"$raw/latency-$m.log"
	stamp "bench latency $m rc=$?"
done

# 5. The summary.
python3 - "$raw" <<'PY' | tee -a "$summary"
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
stamp "done"
tmp=$(mktemp)
tar -C "$out" -czf "$tmp" raw && rm -rf "$raw" && mv "$tmp" "$out/results.tar.gz"
rm -rf "$bins"
