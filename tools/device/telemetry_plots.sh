#!/usr/bin/env bash
# One device call for the bench telemetry and pictures (#18 items 2 and 7): builds for sm_90a,
# runs the NVML sampler's GPU test and the NVFP4 GEMM tests left after the mainloop kernels were
# retired, then bench block / step / sample with --plot and bench compare --plot; reports, SVGs
# and logs come back as $OUT/telemetry.tar.gz (device tool, carry [".deps"]).
#   bash tools/device/telemetry_plots.sh
#   H3RT_PEER=bench/raw/peer_torch_fp8_seed_h200_20261201_s9.json bash ...   # a stored peer
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
R=/tmp/h3rt-telemetry
rm -rf "$R"; mkdir -p "$R" "$OUT"
trap 'tar -C /tmp -czf "$OUT/telemetry.tar.gz" h3rt-telemetry' EXIT
log() { echo "== $(date +%T) $*"; }
log build
H3RT_TARGETS="h3rt_cuda_tests h3rt_cli" bash tools/device/build.sh > "$R/build.log" 2>&1 \
  || { tail -50 "$R/build.log"; exit 1; }
B=build-device
log tests
timeout 240 $B/tests/h3rt_cuda_tests \
  --gtest_filter='TelemetryCuda.*:Algos/LinearNvfp4Algo.*:LinearNvfp4Cuda.*' > "$R/tests.log" 2>&1
echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|\[ telemetry \]" "$R/tests.log" | head -20
run() {  # name, limit in seconds, command...
  local name=$1 limit=$2; shift 2
  log "$name"; timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$?"; tail -3 "$R/$name.log"
}
PEER=${H3RT_PEER:-bench/raw/peer_torch_fp8_seed_h200_20261201_s9.json}
run block_fp8_sage 60 $B/h3rt bench block --gemm fp8 --attention sage --reps 5 --peer "$PEER" \
  --out "$R/block_fp8_sage.json" --plot "$R/block_fp8_sage.svg"
run block_bf16_sage 60 $B/h3rt bench block --attention sage --reps 5 \
  --out "$R/block_bf16_sage.json" --plot "$R/block_bf16_sage.svg"
run compare_blocks 10 $B/h3rt bench compare "$R/block_bf16_sage.json" "$R/block_fp8_sage.json" \
  --plot "$R/compare_blocks.svg"
run step_fp8_sage 120 $B/h3rt bench step --preset h3 --gemm fp8 --attention sage --reps 2 \
  --out "$R/step_fp8_sage.json" --plot "$R/step_fp8_sage.svg"
run sample_fp8_sage 120 $B/h3rt bench sample --preset h3 --steps 2 --gemm fp8 --attention sage \
  --out "$R/sample_fp8_sage.json" --plot "$R/sample_fp8_sage.svg"
run nvfp4_gemm 120 $B/h3rt bench nvfp4-gemm --out "$R/nvfp4_gemm.json"
for f in block_fp8_sage block_bf16_sage step_fp8_sage sample_fp8_sage; do
  python3 -c "import json,sys; print('$f', json.dumps(json.load(open('$R/$f.json')).get('telemetry'))[:600])" 2>&1
done
