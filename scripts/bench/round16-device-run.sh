#!/usr/bin/env bash
# Sixteenth round, one `run` call: correctness of the new build, then old against new (two builds, not
# tuning variants: the changes are in the kernels) on the GEMM's parts, decode attention at the step's
# shapes, the decode step's graph and gollm bench latency.
# Here:  for each of old (the commit before) and new: go test -c -tags cuda -ldflags="-s -w" -o
#        gpu/p1/BUILD/{model,attention,engine,cuda}.test ./{model,attention,engine,internal/cuda};
#        go build -tags cuda -ldflags="-s -w" -o gpu/p1/BUILD/gollm ./cmd/gollm;
#        tar -C gpu/p1 -cf - old new | xz -9 > gpu/p2/all.tar.xz
# There (carry gpu/p2):  [TESTS=regexp] bash scripts/bench/round16-device-run.sh [tests] [suite] [memcheck]
#                        [gemm] [attn] [decode] [e2e]
#   tests   the new build: internal/cuda's tests, the GEMM/attention/step tests (TESTS), attention's CUDA tests
#   suite   the new build: the model's and the engine's whole CUDA suites
#   gemm    BenchmarkCUDAGemmDiag, old and new
#   attn    gollm bench attention on scripts/bench/attention-step-shapes.json, old and new
#   decode  BenchmarkCUDADecode's default at BATCHES (16|64), ROUNDS rounds, old and new alternating (new
#           also with the VARIANTS named)
#   e2e     gollm bench latency, Llama-3-8B at E2E_BATCHES (64) and Llama-3.2-1B batch 1, E2E_ROUNDS rounds
#   memcheck  compute-sanitizer on a GPU-vs-CPU step through the SwiGLU epilogue and on TestCUDAGemmSwiGLU
# Results under $OUT (summary.txt first). Results of round 16: scripts/bench/results/round16/.
set -uo pipefail
steps=${*:-tests gemm attn decode}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
mkdir -p gpu/p1 && tar -C gpu/p1 -xJf gpu/p2/all.tar.xz # always: a warm machine keeps the last call's binaries
export GOLLM_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv,noheader | tee "$out/summary.txt"
date -u | tee -a "$out/summary.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
count() { echo "rc=$2 pass=$(grep -c -- '--- PASS' "$1") fail=$(grep -c -- '--- FAIL' "$1")"; grep -E -- '--- FAIL|^panic' "$1" | head -20; }
if has tests; then
	new=$root/gpu/p1/new
	(cd internal/cuda && timeout 60 "$new/cuda.test" -test.count=1 -test.v) >"$out/cuda-test.log" 2>&1
	echo "internal/cuda tests: $(count "$out/cuda-test.log" $?)" | tee -a "$out/summary.txt"
	(cd model && timeout 300 "$new/model.test" -test.run "${TESTS:-CUDAGemm|CUDAMatchesCPU|CUDAGolden|SplitOf|CUDAGreedy}" -test.count=1 -test.v) >"$out/model-test.log" 2>&1
	echo "model tests: $(count "$out/model-test.log" $?)" | tee -a "$out/summary.txt"
	(cd attention && timeout 300 "$new/attention.test" -test.run CUDA -test.count=1 -test.v) >"$out/attention-test.log" 2>&1
	echo "attention tests: $(count "$out/attention-test.log" $?)" | tee -a "$out/summary.txt"
fi
if has suite; then
	new=$root/gpu/p1/new
	(cd model && timeout 400 "$new/model.test" -test.run 'CUDA|Golden|SplitOf' -test.count=1 -test.v) >"$out/model-suite.log" 2>&1
	echo "model suite: $(count "$out/model-suite.log" $?)" | tee -a "$out/summary.txt"
	(cd engine && timeout 200 "$new/engine.test" -test.run CUDA -test.count=1 -test.v) >"$out/engine-test.log" 2>&1
	echo "engine tests: $(count "$out/engine-test.log" $?)" | tee -a "$out/summary.txt"
fi
if has memcheck; then # compute-sanitizer memcheck on the steps through the SwiGLU epilogue and the grouped kernel
	sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
	for pat in 'TestCUDAMatchesCPU/d128_BF16_gemm=true$' 'TestCUDAGemmSwiGLU/BF16/I200/m33/'; do
		log=$(mktemp)
		(cd model && timeout 200 "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
			"$root/gpu/p1/new/model.test" -test.count=1 -test.v -test.run "$pat") >"$log" 2>&1
		rc=$?
		echo "== memcheck $pat: exit $rc, $(grep -c -- '--- PASS' "$log") passed; $(grep 'ERROR SUMMARY' "$log")" | tee -a "$out/memcheck.log" "$out/summary.txt"
		[ "$rc" = 0 ] || tail -40 "$log" >>"$out/memcheck.log"
	done
fi
if has gemm; then
	for b in old new; do
		(cd model && timeout 120 "$root/gpu/p1/$b/model.test" -test.run XXX -test.bench CUDAGemmDiag -test.benchtime 1x -test.v) >"$out/gemm-diag-$b.txt" 2>&1
		echo "gemm diag $b rc=$?" | tee -a "$out/summary.txt"
		grep -E 'gate|swiglu|SwiGLU' "$out/gemm-diag-$b.txt" | head -8 | sed "s/^/$b /" | tee -a "$out/summary.txt"
	done
fi
if has attn; then
	for b in old new; do
		"$root/gpu/p1/$b/gollm" bench attention --shapes scripts/bench/attention-step-shapes.json --experiments --json "$out/attn-$b.json" >"$out/attn-$b.txt" 2>"$out/attn-$b.log"
		echo "attention $b rc=$?" | tee -a "$out/summary.txt"
		python3 - "$out/attn-$b.json" "$b" <<'PY' | tee -a "$out/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    ex = " ".join(f"{k} {v:.1f}" for k, v in sorted(r.get("experiments", {}).items()))
    print(f"{sys.argv[2]} {r['name']} {r['batch']}x{r['ctx']} d{r['head_dim']}: grouped {r['grouped_us']:.1f} us, split-k {r['splitk_us']:.1f} us; {ex}")
PY
	done
fi
if has decode; then
	for r in $(seq 1 "${ROUNDS:-2}"); do
		for b in old new; do
			v=default
			[ $b = new ] && v=$(echo "default ${VARIANTS:-}" | sed 's/ *$//; s/ /|/g')
			(cd model && GOLLM_BENCH_CONTEXT=1088 timeout 280 "$root/gpu/p1/$b/model.test" -test.run XXX \
				-test.bench "CUDADecode/.*/^batch=(${BATCHES:-16|64})\$/^($v)\$" -test.benchtime 20x) >"$out/decode-$b-r$r.txt" 2>&1
			awk -v r=$r -v b=$b '/^BenchmarkCUDADecode/ {g = p = ""; for (i = 1; i <= NF; i++) { if ($i == "gpu-ms/step") g = $(i-1); if ($i == "pipe-ms/step") p = $(i-1) }; print "r" r, b, $1, g, p}' \
				"$out/decode-$b-r$r.txt" | tee -a "$out/summary.txt"
		done
	done
fi
if has e2e; then
	C="--device cuda --input-len 1024 --output-len 128 --warmup 1 --iters 1 --max-batched-tokens 8192 --json"
	for r in $(seq 1 "${E2E_ROUNDS:-2}"); do
		for b in old new; do
			"$root/gpu/p1/$b/gollm" bench latency --config llama3-8b $C --batch "${E2E_BATCHES:-64}" |
				sed "s/^{/{\"bin\":\"$b\",\"round\":$r,/" >>"$out/latency.jsonl" 2>>"$out/e2e-log.txt"
			"$root/gpu/p1/$b/gollm" bench latency --config llama3.2-1b $C --batch 1 |
				sed "s/^{/{\"bin\":\"$b\",\"round\":$r,/" >>"$out/latency.jsonl" 2>>"$out/e2e-log.txt"
		done
	done
	python3 - "$out/latency.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['bin']:>4} r{r['round']} {r['model']:>12} b{r['batch']:<3}: step p50 {r['decode_step']['p50_ms']:.3f} p99 {r['decode_step']['p99_ms']:.3f} ms")
PY
fi
