#!/usr/bin/env bash
# house-check.sh ARCHIVE | OLD NEW — a change that must not move the GPU's numbers (a refactor), checked
# in one device run with its old and new builds (folders house-build.sh made, or an xz tar of them holding
# old/ and new/):
#   1. NEW's CUDA test binaries of attention, model and engine, each suite in full (no -test.run), with
#      their pass and fail counts;
#   2. OLD and NEW alternating twice (OLD NEW OLD NEW) over
#        gollm bench latency --config llama3-8b --device cuda --random-weights --batch 1,64 \
#          --input-len 1024 --output-len 128 --json           (and --config llama3.2-1b)
#        gollm bench attention --shapes scripts/bench/attention-shapes.json (the grid; HOUSE_SHAPES
#          names another)
#   3. one table: shape, old, new, new/old, each build's figure the mean of its two runs (the decode
#      step's median in ms; the dispatcher's median in µs for the grid's shapes).
# Passing: every suite rc=0 and fail=0, and every ratio within 1% of 1.
#
# Here:   the commands in house-build.sh's header (gpu/house.tar.xz)
# There:  (carry gpu) bash scripts/bench/house-check.sh gpu/house.tar.xz
# Results under $OUT (default ./out): summary.txt (counts and table) and results.tar.gz (every log and
# JSON). About 7 minutes on an H200 (estimated from the suites' and benchmarks' earlier runs); HOUSE_TEST_TIMEOUT
# bounds each suite (default 300 s).
set -uo pipefail
root=$(pwd)
case $# in
1)
	bins=$(mktemp -d)
	xz -dc "$1" | tar -C "$bins" -xf - || { echo "house-check: cannot unpack $1" >&2; exit 2; }
	set -- "$bins/old" "$bins/new"
	;;
2) ;;
*)
	echo "usage: $0 ARCHIVE | OLD NEW (folders of house-build.sh)" >&2
	exit 2
	;;
esac
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
out=${OUT:-out}
mkdir -p "$out/raw"
out=$(cd "$out" && pwd)
raw=$out/raw
shapes=${HOUSE_SHAPES:-scripts/bench/attention-shapes.json}
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=$out/summary.txt
{
	nvidia-smi --query-gpu=name,serial,driver_version,clocks.max.sm --format=csv,noheader
	date -u
} | tee "$summary"
stamp() { echo "$* $(date -u +%T)" | tee -a "$summary"; }

# 1. The suites, in their package folders (testdata).
for pkg in attention model engine; do
	if [ ! -x "$new/$pkg.test" ]; then
		stamp "$pkg tests: no $new/$pkg.test"
		continue
	fi
	(cd "$root/$pkg" && timeout "${HOUSE_TEST_TIMEOUT:-300}" "$new/$pkg.test" -test.count=1 -test.v) >"$raw/$pkg-test.log" 2>&1
	rc=$?
	stamp "$pkg tests: rc=$rc pass=$(grep -c -- '--- PASS' "$raw/$pkg-test.log") fail=$(grep -c -- '--- FAIL' "$raw/$pkg-test.log")"
	grep -E -- '--- FAIL|^panic' "$raw/$pkg-test.log" | head -10 | tee -a "$summary"
done

# 2. The benchmarks, OLD and NEW alternating.
for r in 1 2; do
	for b in old new; do
		bin=$old/gollm
		[ "$b" = new ] && bin=$new/gollm
		for m in llama3-8b llama3.2-1b; do
			"$bin" bench latency --config "$m" --device cuda --random-weights --batch 1,64 --input-len 1024 \
				--output-len 128 --json >"$raw/latency-$m-$b-r$r.jsonl" 2>"$raw/latency-$m-$b-r$r.log"
			stamp "latency $m $b r$r rc=$?"
		done
		"$bin" bench attention --shapes "$shapes" --json "$raw/attention-$b-r$r.json" \
			>"$raw/attention-$b-r$r.txt" 2>"$raw/attention-$b-r$r.log"
		stamp "attention $b r$r rc=$?"
	done
done

# 3. The table.
python3 - "$raw" <<'PY' | tee -a "$summary"
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
stamp "done"
tmp=$(mktemp)
tar -C "$out" -czf "$tmp" raw && rm -rf "$raw" && mv "$tmp" "$out/results.tar.gz"
