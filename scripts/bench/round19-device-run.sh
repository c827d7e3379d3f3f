#!/usr/bin/env bash
# Nineteenth round, one `run` call: the model's and the engine's CUDA tests of the new build, and the new
# model tests on the build before the fixes (old) to show that they fail there.
# Here:  go test -c -tags cuda -ldflags="-s -w" -o gpu/p1/new/{model,engine}.test ./model ./engine;
#        gpu/p1/old/model.test from the tree without the fixes; tar -C gpu/p1 -cf - new old | xz -9 > gpu/p2/all.tar.xz
# There (carry gpu/p2):  bash scripts/bench/round19-device-run.sh
# Results under $OUT (summary.txt first). Results of round 19: scripts/bench/results/round19/.
source scripts/bench/device-common.sh
# run BUILD PKG REGEXP LOG TIMEOUT
run() {
	(cd "$2" && timeout "$5" "$root/gpu/p1/$1/$2.test" -test.run "$3" -test.count=1 -test.v) >"$out/$4.log" 2>&1
	echo "$4: $(count "$out/$4.log" $?)" | tee -a "$out/summary.txt"
}
NEWTESTS='TestCUDAWaitAfterClose|TestCUDAStepAfterFailure'
run old model "$NEWTESTS" model-old-newtests 120
run new model "$NEWTESTS" model-new-newtests 120
run new model "${MODEL_TESTS:-CUDA}" model-cuda 420
run new engine "${ENGINE_TESTS:-CUDA}" engine-cuda 300
date -u | tee -a "$out/summary.txt"
