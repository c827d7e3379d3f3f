#!/usr/bin/env bash
# The skinny GEMM (model/kernels/gemm_sm90.cu) on the device, in one `run` call: ptxas (Triton's, the
# newest on the device) on its PTX for the registers and errors, its tests and the cluster launch's, the
# product benchmark against cuBLAS (BenchmarkCUDAGemm) and its parts (BenchmarkCUDAGemmDiag), and the
# decode step at batch 16 and 64 with and without it (BenchmarkCUDADecode variants $VARIANTS, default
# "no-gemm default gemm-all").
# Here:  go test -c -tags cuda -ldflags="-s -w" -o $GOLLM_GPU_DIR/model.test ./model   (and cuda.test of
#        ./internal/cuda), GOLLM_GPU_DIR defaulting to gpu/g1 (the fourth attempt ran with gpu/gb)
# There (carry that folder):  bash scripts/gpu/gemm-device-run.sh [ptxas] [tests] [bench] [diag] [decode]
# Results under $OUT: ptxas.txt, tests.log, gemm-bench.txt, gemm-diag.txt, decode.txt, log.txt.
set -uo pipefail
steps=${*:-ptxas tests bench diag decode}
dir=${GOLLM_GPU_DIR:-gpu/g1}
variants=${VARIANTS:-"no-gemm default gemm-all"}
out=${OUT:-/tmp/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(pwd)
dir=$(cd "$dir" && pwd)
export GOLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
if has ptxas; then
	ptxas=$(python3 -c 'import triton, os; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas"))' 2>/dev/null)
	"$ptxas" --version | tail -1
	head -c -1 "$root/model/kernels/gemm_sm90.ptx" >/tmp/gemm_sm90.ptx
	timeout 120 "$ptxas" -arch=sm_90 -O3 -v -o /tmp/gemm_sm90.cubin /tmp/gemm_sm90.ptx >"$out/ptxas.txt" 2>&1
	echo "ptxas rc=$?" | tee -a "$out/log.txt"
	grep -E 'error|Used|spill' "$out/ptxas.txt" | head -40
fi
if has tests; then
	(cd "$root/internal/cuda" && timeout 60 "$dir/cuda.test" -test.run 'Cluster|PDL' -test.v -test.count=1) >"$out/tests.log" 2>&1
	echo "internal/cuda tests rc=$?" | tee -a "$out/log.txt"
	(cd "$root/model" && timeout 240 "$dir/model.test" -test.run 'CUDAGemm' -test.v -test.count=1) >>"$out/tests.log" 2>&1
	echo "gemm tests rc=$?" | tee -a "$out/log.txt"
	echo "passed $(grep -c -- '--- PASS' "$out/tests.log"), failed $(grep -c -- '--- FAIL' "$out/tests.log")" | tee -a "$out/log.txt"
	grep -E -- '--- FAIL|panic' "$out/tests.log" | head -20
	grep -B2 -A8 -m3 -- '--- FAIL' "$out/tests.log" | head -60
fi
if has bench; then
	(cd "$root/model" && timeout 200 "$dir/model.test" -test.run XXX -test.bench 'CUDAGemm$' -test.benchtime 1x) >"$out/gemm-bench.txt" 2>&1
	echo "gemm bench rc=$?" | tee -a "$out/log.txt"
	grep -E 'm=[0-9]+: cublas' "$out/gemm-bench.txt" | sed 's/^ *//'
fi
if has diag; then
	(cd "$root/model" && timeout 120 "$dir/model.test" -test.run XXX -test.bench 'CUDAGemmDiag$' -test.benchtime 1x) >"$out/gemm-diag.txt" 2>&1
	echo "gemm diag rc=$?" | tee -a "$out/log.txt"
	grep -E 'm=[0-9]+ w' "$out/gemm-diag.txt" | sed 's/^ *//'
fi
if has decode; then
	re=$(echo "$variants" | sed 's/ /|/g')
	(cd "$root/model" && GOLLM_BENCH_CONTEXT=${GOLLM_BENCH_CONTEXT:-1088} timeout 240 "$dir/model.test" -test.run XXX \
		-test.bench "CUDADecode/.*/^batch=(16|64)\$/^($re)\$" -test.benchtime 20x) >"$out/decode.txt" 2>&1
	echo "decode rc=$?" | tee -a "$out/log.txt"
	grep -E '^BenchmarkCUDADecode' "$out/decode.txt" | awk '{for(i=1;i<=NF;i++) if($i=="gpu-ms/step") print $1, $(i-1)}'
fi
