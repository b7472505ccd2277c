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
STEPS="tests gemm blocks"
source tools/device/lib.sh
start_call || exit 1
want tests && gpu_tests 'Int8LinearCuda.*:FusedInt8.*:Int8Forward.*'
if want gemm; then
  log "bench int8-gemm"
  "$B/h3rt" bench int8-gemm --iters 5 --out "$OUT/int8_gemm.json" 2>&1 | tee -a "$OUT/summary.txt"
fi
want blocks || exit 0
for shape in "864 480" "1344 768"; do
  set -- $shape
  for form in double integer double; do
    log "block int8 ${1}x${2} H3RT_INT8_ROTATE=$form"
    json="$OUT/block_${1}_${form}_$(date +%s).json"
    H3RT_INT8_ROTATE=$form "$B/h3rt" bench block --gemm int8 --attention sage --reps 5 \
      --width "$1" --height "$2" --frames 124 --out "$json" > "$OUT/block.log" 2>&1
    block_line "$json"
  done
done
