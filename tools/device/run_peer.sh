#!/usr/bin/env bash
# One device call for the attention work: builds h3rt (sm_90a) and the public SageAttention side
# by side, runs the GPU tests, times our Sage kernels, compares accuracy and speed with sageattn
# on the same inputs (bench/sage_peer.py; H3RT_NO_PEER=1 skips it) and, with H3RT_NCU=1, profiles our kernel with Nsight
# Compute (details page + per-SASS-instruction source page) and dumps its SASS.
# Usage (device tool, carry [".deps", ".peers"]): bash tools/device/run_peer.sh
# .peers/SageAttention: a checkout of thu-ml/SageAttention (git-ignored, never committed).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
R=/tmp/h3rt-results; rm -rf "$R"; mkdir -p "$R"
trap 'tar -C /tmp -czf "$OUT/results.tar.gz" h3rt-results' EXIT
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
log "build h3rt + sageattention"
[ -n "${H3RT_NO_PEER:-}" ] || ( MAX_JOBS=4 bash tools/peers/build_sageattention.sh .peers/SageAttention /tmp/sage-peer \
    > "$R/sage_build.log" 2>&1; echo "rc=$?" >> "$R/sage_build.log" ) &
H3RT_TARGETS="h3rt_cuda_tests h3rt_cli" bash tools/device/build.sh > "$R/build.log" 2>&1 \
  || { tail -40 "$R/build.log"; exit 1; }
B=build-device
log "h3rt built; tests"
timeout 200 $B/tests/h3rt_cuda_tests ${H3RT_GTEST_FILTER:+--gtest_filter=$H3RT_GTEST_FILTER} \
  > "$R/cuda_tests.log" 2>&1
echo "cuda tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$R/cuda_tests.log" | head -30
log "bench attention"
timeout 90 $B/h3rt bench attention --kernels ${H3RT_SAGE_KERNELS:-wgmma_pp3} --prepass ${H3RT_PREPASS:-two_launch fused_l2} \
  --out "$R/bench_attention.json" 2>&1 | tee "$R/bench_attention.log" | tail -4
if [ -n "${H3RT_NCU:-}" ]; then
  log ncu
  cuobjdump -sass $B/CMakeFiles/h3rt.dir/src/ops/attention_sage/attention_wgmma_sm90.cu.o \
    > "$R/sage_wgmma.sass" 2>&1
  timeout 150 ncu --clock-control none -k regex:sage_wgmma --launch-count 1 --set full \
    -o "$R/sage" $B/h3rt bench attention --kernels ${H3RT_NCU_KERNEL:-wgmma_pp3} --prepass two_launch --warmup 0 --iters 1 \
    > "$R/ncu_run.log" 2>&1; echo "ncu rc=$?"
  ncu --import "$R/sage.ncu-rep" --page details > "$R/ncu_details.txt" 2>&1
  ncu --import "$R/sage.ncu-rep" --page source --csv --print-source sass \
    > "$R/ncu_source.csv" 2>&1
fi
[ -n "${H3RT_NO_PEER:-}" ] && { log done; exit 0; }
log "wait for sageattention"
wait; tail -3 "$R/sage_build.log"
log "sage peer"
PYTHONPATH=/tmp/sage-peer PYTHONUNBUFFERED=1 timeout ${H3RT_PEER_S:-240} python3 bench/sage_peer.py \
  --h3rt $B/h3rt --json "$R/sage_peer.json" 2>&1 | tee "$R/sage_peer.log" | tail -20
log done
