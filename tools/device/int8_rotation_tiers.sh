#!/usr/bin/env bash
# One device call: the integer rotation form (int32, else int64 where FP64 is slow, else double;
# see src/ops/int8_linear/rotate_quantize.cuh) checked bit for bit and timed against the double
# form, to decide each arch's default from a measurement (on Hopper the integer form is int32,
# else double: fewer DADD, the adds split between the ALU and FMA pipes). Prepare here (git-ignored):
#   H3RT_DEPS_LEAN=1 bash tools/device/pack_deps.sh .deps-lean
#   mkdir -p .prebuilt && tar -C ../shared -cJf .prebuilt/golden.tar.xz golden
# Device tool: `bash tools/device/int8_rotation_tiers.sh`, carry [".deps-lean", ".prebuilt"].
# It builds with tools/device/build.sh (about 90 s), then runs:
#   1. the GPU tests of every rotating kernel (quantizer, fused norm and SwiGLU; tier counts);
#   2. `bench int8-gemm` (the team kernel and the fused norm in each form, both user shapes);
#   3. the int8 block at 864x480 and at the seed shape, A-B-A: H3RT_INT8_ROTATE=double, integer,
#      double (every rotating kernel of the block in that form).
# Results land under $OUT (tests.txt, int8_gemm.json, block_*.json, summary.txt).
# H3RT_STEPS (default "tests gemm blocks") picks the steps, to split them over calls.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
B=build-device
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
if [ ! -x "$B/tests/h3rt_cuda_tests" ]; then
  if [ -f .deps-lean/deps.tar.xz ]; then
    mkdir -p /tmp/deps && tar -C /tmp/deps -xJf .deps-lean/deps.tar.xz
    export H3RT_DEPS_DIR=/tmp/deps
  fi
  if [ -f .prebuilt/golden.tar.xz ]; then
    mkdir -p /tmp/h3rt-shared && tar -C /tmp/h3rt-shared -xJf .prebuilt/golden.tar.xz
    export H3RT_SHARED_DIR=/tmp/h3rt-shared
  fi
  H3RT_TARGETS="h3rt_cli h3rt_cuda_tests" bash tools/device/build.sh || exit 1
fi
steps=" ${H3RT_STEPS:-tests gemm blocks} "
if [[ $steps == *" tests "* ]]; then
  log "tests"
  "$B/tests/h3rt_cuda_tests" --gtest_filter='Int8LinearCuda.*:FusedInt8.*:Int8Forward.*' \
    > "$OUT/tests.txt" 2>&1
  grep -E "^\[  (PASSED|FAILED) |tests ran" "$OUT/tests.txt" | tee -a "$OUT/summary.txt"
fi
if [[ $steps == *" gemm "* ]]; then
  log "bench int8-gemm"
  "$B/h3rt" bench int8-gemm --iters 5 --out "$OUT/int8_gemm.json" 2>&1 | tee -a "$OUT/summary.txt"
fi
[[ $steps == *" blocks "* ]] || exit 0
for shape in "864 480" "1344 768"; do
  set -- $shape
  for form in double integer double; do
    log "block int8 ${1}x${2} H3RT_INT8_ROTATE=$form"
    json="$OUT/block_${1}_${form}_$(date +%s).json"
    H3RT_INT8_ROTATE=$form "$B/h3rt" bench block --gemm int8 --attention sage --reps 5 \
      --width "$1" --height "$2" --frames 124 --out "$json" > "$OUT/block.log" 2>&1
    python3 - "$json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["representative_block_p50_milliseconds"]
print("  graph p50 %.3f ms; norm %.3f, swiglu %.3f, out %.3f, gemm %.3f ms" % (
    d["block_p50_milliseconds_cuda_graph"], c["norm_modulate"], c["swiglu"],
    c["output_projection"], d["gemm_milliseconds"]))
PY
  done
done
