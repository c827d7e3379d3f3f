#!/usr/bin/env bash
# The fourteenth round's device calls: unpack gpu/pack/all.tar.xz (built here: gpu/s1/{new,old}/model.test,
# gpu/s1/new/engine.test, gpu/g7/{gollm,gollm-old,cuda.test}; tar | xz -9, which keeps the near-identical
# binaries small), then
#   round14-device-run.sh check   the CUDA tests of the new build and BenchmarkCUDADecode, old and new
#                                 alternating (split-device-run.sh)
#   round14-device-run.sh tests   the CUDA tests of the new build, and compute-sanitizer memcheck on them
#   round14-device-run.sh e2e     gollm bench latency, old and new alternating (gemm-e2e-device-run.sh)
# Results under $OUT.
set -uo pipefail
[ -f gpu/pack/all.tar.xz ] && [ ! -x gpu/g7/gollm ] && xz -dc gpu/pack/all.tar.xz | tar -C gpu -xf -
export TESTS=${TESTS:-'CUDAGemmArgmax|CUDAGreedyPicksGemm|CUDAMatchesCPU|CUDAGolden|CUDAPipelinedPicks|CUDAArgmaxTies|CUDAGemvArgmax'}
case "${1:-check}" in
check)
	TESTBIN=new BINS="old new" ROUNDS=${ROUNDS:-2} BATCHES=${BATCHES:-"1|16|64"} VARIANTS=${VARIANTS:-"default no-split"} \
		bash scripts/bench/split-device-run.sh tests decode
	;;
e2e)
	bash scripts/bench/gemm-e2e-device-run.sh ${E2E_STEPS:-latency}
	;;
tests) # the new build's CUDA tests and memcheck runs
	TESTBIN=new BINS=new bash scripts/bench/split-device-run.sh tests memcheck
	;;
esac
