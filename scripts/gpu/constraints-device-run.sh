#!/usr/bin/env bash
# The GPU half of issue 41's structured output (the masked pick on the device), for `run` calls on the
# GPU machine. Build here first (no GPU needed): scripts/bench/build.sh gpu/bench, then carry
# gpu/bench.tar.xz and run from the repository root:
#
#   bash scripts/gpu/constraints-device-run.sh [STEP...]   STEP: tests (the default), bench, model, engine
#
# Each step fits one call (10 minutes). With GOLLM_REQUIRE_GPU=1 (a missing GPU fails, not skips):
#   tests   package model: TestCUDAMaskedPickMatchesTwin (MaskRows and the sampling kernel against the
#           CPU twin, MaskLogits then the pick, on rows of 128256 logits: one token allowed, 0.1%, half,
#           all but the best, unmasked, and a NaN the mask leaves out, greedy and sampled),
#           TestCUDAPipelinedPicks (its masked modes: steps begun before the previous step's picks are
#           read, their masks committed after), TestCUDASampleMatchesTwin, TestCUDASampleTies;
#           package engine: TestCUDAConstraintMatchesHost (constrained requests picked on the device,
#           pipelined and not, give the tokens of the same requests drawn on the host, f32);
#   bench   BenchmarkCUDAMaskedPick (the pick of 1 and 64 rows with and without masks) and
#           BenchmarkCUDAConstrainedStep (a Llama-3.2-1B-shaped model, random bf16 weights, the engine's
#           step at batch 1 and 64, with and without a JSON Schema constraint on every request);
#   model, engine  package model's and package engine's whole CUDA suites (the fat binary changed).
# Passing: every test line of the summary says "0 failed" and ends in "ok"; in the bench table,
# constraint/none at most 1.05 at batch 1 and 64 (the issue's bound).
# Logs under $OUT (or ./out).
set -uo pipefail
steps=${*:-tests}
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
root=$(pwd)
[ -f go.mod ] || { echo "constraints-device-run.sh: run from the repository root" >&2; exit 2; }
out=${OUT:-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${BIN:-gpu/bench}
if [ -f "$bin.tar.xz" ]; then
	rm -rf "$bin" && tar -C "$(dirname "$bin")" -xJf "$bin.tar.xz"
fi
[ -x "$bin/model.test" ] && [ -x "$bin/engine.test" ] || { echo "no build in $bin (scripts/bench/build.sh gpu/bench, then carry gpu/bench.tar.xz)" >&2; exit 2; }
bin=$(cd "$bin" && pwd)
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
cat "$bin/COMMIT" 2>/dev/null | head -1
summary=""
run() { # run NAME PKGDIR BINARY PATTERN TIMEOUT
	local log="$out/$1.log"
	(cd "$root/$2" && timeout "$5" "$bin/$3" -test.run "$4" -test.v -test.count=1) >"$log" 2>&1
	summary+="$1: $(grep -c -- '--- PASS' "$log") passed, $(grep -c -- '--- FAIL' "$log") failed, $(grep -c -- '--- SKIP' "$log") skipped; $(grep -E '^(ok|FAIL|PASS)' "$log" | tail -1)"$'\n'
	grep -E -- '--- FAIL|panic' "$log" | head -20
}
bench() { # bench NAME PKGDIR BINARY PATTERN BENCHTIME TIMEOUT
	local log="$out/$1.log"
	(cd "$root/$2" && timeout "$6" "$bin/$3" -test.run '^$' -test.bench "$4" -test.benchtime "$5" -test.count=1) >"$log" 2>&1
	grep -E '^Benchmark|^(ok|FAIL|PASS)|panic' "$log"
}
if has tests; then
	run model-masked model model.test '^(TestCUDAMaskedPickMatchesTwin|TestCUDAPipelinedPicks|TestCUDASampleMatchesTwin|TestCUDASampleTies)$' 400
	run engine-constraint engine engine.test '^TestCUDAConstraintMatchesHost$' 150
fi
if has bench; then
	bench masked-pick model model.test '^BenchmarkCUDAMaskedPick$' 300x 200
	bench constrained-step engine engine.test '^BenchmarkCUDAConstrainedStep$' 4x 380
	# The step's ms per batch and mode, and constraint/none.
	awk '/^BenchmarkCUDAConstrainedStep/ {
		split($1, p, "/"); b = p[2]; m = p[3]; sub(/-[0-9]+$/, "", m)
		for (i = 1; i < NF; i++) if ($(i+1) == "ms/step") ms[b, m] = $i
		bs[b] = 1
	} END {
		for (b in bs) printf "%s: none %s ms, constraint %s ms (%.3f), host %s ms, constraint-host %s ms\n", b, ms[b, "none"],
			ms[b, "constraint"], ms[b, "constraint"] / ms[b, "none"], ms[b, "host"], ms[b, "constraint-host"]
	}' "$out/constrained-step.log" | tee "$out/constrained-step.txt"
fi
has model && run model-cuda model model.test 'CUDA' 570
has engine && run engine-cuda engine engine.test 'CUDA' 570
printf '%s' "$summary" | tee "$out/summary.txt"
