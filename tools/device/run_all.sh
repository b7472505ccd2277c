#!/usr/bin/env bash
# One device call that builds for sm_90a, runs every GPU test and the benchmarks (with the public
# SageAttention2 built beside it for the side-by-side comparison when .peers/SageAttention is
# carried), and leaves the logs and JSON reports under $OUT (device tool, carry [".deps"] or
# [".deps", ".peers"]):
#   bash tools/device/run_all.sh            # everything
#   H3RT_QUICK=1 bash tools/device/run_all.sh   # build, tests and the core benchmarks only
#   H3RT_BUDGET_S=450 bash tools/device/run_all.sh  # skip benchmarks that would end past 450 s
#   H3RT_GTEST_FILTER=..., H3RT_SAGE_KERNELS="wgmma_pp3 ...", H3RT_PREPASS=two_launch: narrower runs
#   H3RT_NCU=1 [H3RT_NCU_KERNEL=wgmma_pp3]: also profile one Sage kernel call with Nsight Compute
#   H3RT_SPARSE_TAU=1.0: the router tau of the block-sparse Sage timing in bench attention
# Each step has its own time limit so one slow step cannot take the rest down with it.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
# At most 8 files come back, so the reports go to $R and travel as one archive.
R=/tmp/h3rt-results
rm -rf "$R"; mkdir -p "$R"
trap 'tar -C /tmp -czf "$OUT/results.tar.gz" h3rt-results' EXIT
log() { echo "== $(date +%T) $*"; }
T0=$(date +%s)
BUDGET=${H3RT_BUDGET_S:-100000}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu \
  --format=csv 2>&1; nvcc --version | tail -1
PEER=.peers/SageAttention
if [ -d "$PEER" ]; then
  ( MAX_JOBS=4 bash tools/peers/build_sageattention.sh "$PEER" /tmp/sage-peer > "$R/sage_build.log" 2>&1
    echo "rc=$?" >> "$R/sage_build.log" ) &
fi
log build
t0=$(date +%s)
H3RT_TARGETS="h3rt_cuda_tests h3rt_cli" bash tools/device/build.sh > /tmp/build.log 2>&1 \
  || { tail -50 /tmp/build.log; exit 1; }
log "built in $(( $(date +%s) - t0 )) s"
B=build-device
log tests
timeout 200 $B/tests/h3rt_cuda_tests ${H3RT_GTEST_FILTER:+--gtest_filter=$H3RT_GTEST_FILTER} \
  > "$R/cuda_tests.log" 2>&1
echo "cuda tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|SKIPPED" "$R/cuda_tests.log" | head -40
log "cli smoke: forward and sample on cuda"
G=.deps/shared/golden/h3_tiny
timeout 60 $B/h3rt forward --device cuda --checkpoint $G/weights.safetensors --inputs $G/golden.safetensors \
  --out /tmp/fwd.safetensors 2>&1 | tail -1
timeout 60 $B/h3rt sample --device cuda --steps 2 --attention sage --out /tmp/tiny.safetensors 2>&1 | tail -1
# Benchmarks, most wanted first (H3RT_QUICK=1 keeps the core ones only).
bench() {  # name, limit in seconds, command... (skipped when it could end past the budget)
  local name=$1 limit=$2; shift 2
  if (( $(date +%s) - T0 + limit > BUDGET )); then log "$name skipped (budget)"; return; fi
  log "$name"; timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$?"; tail -${TAIL:-4} "$R/$name.log"
}
PRE=${H3RT_PREPASS:-two_launch fused_l2}
bench block_fp8_sage 45 $B/h3rt bench block --gemm fp8 --attention sage --out "$R/bench_block_fp8_sage.json"
TAIL=12 bench attention 60 $B/h3rt bench attention --prepass $PRE \
  --kernels ${H3RT_SAGE_KERNELS:-w4 wgmma_pp3} --sparse ${H3RT_SPARSE_TAU:-1.0} --out "$R/bench_attention.json"
if [ -n "${H3RT_NCU:-}" ]; then  # Nsight Compute of one Sage kernel call, and its SASS
  log ncu
  cuobjdump -sass $B/CMakeFiles/h3rt.dir/src/ops/attention_sage/attention_wgmma_sm90.cu.o \
    > "$R/sage_wgmma.sass" 2>&1
  timeout 150 ncu --clock-control none -k regex:sage_wgmma --launch-count 1 --set full \
    -o "$R/sage" $B/h3rt bench attention --kernels ${H3RT_NCU_KERNEL:-wgmma_pp3} \
    --prepass two_launch --warmup 0 --iters 1 > "$R/ncu_run.log" 2>&1; echo "ncu rc=$?"
  ncu --import "$R/sage.ncu-rep" --page details > "$R/ncu_details.txt" 2>&1
  ncu --import "$R/sage.ncu-rep" --page source --csv --print-source sass \
    > "$R/ncu_source.csv" 2>&1
fi
if [ -d "$PEER" ]; then
  wait; tail -2 "$R/sage_build.log"
  TAIL=14 bench sage_peer 60 env PYTHONPATH=/tmp/sage-peer PYTHONUNBUFFERED=1 python3 bench/sage_peer.py \
    --h3rt $B/h3rt --json "$R/sage_peer.json"
fi
TAIL=8 bench sample_h3 100 $B/h3rt bench sample --preset h3 --steps 2 --gemm fp8 --attention sage \
  --out "$R/bench_sample_h3.json"
TAIL=30 bench kernels 40 $B/h3rt bench kernels --no-attention --out "$R/bench_kernels.json"
TAIL=10 bench quantize_nvfp4 25 $B/h3rt bench quantize-nvfp4 --out "$R/bench_nvfp4.json"
bench torch_block 60 python3 bench/torch_block.py --json "$R/torch_block.json"
bench block_bf16_sage 45 $B/h3rt bench block --attention sage --out "$R/bench_block_bf16_sage.json"
bench block_fp8dyn_sage 45 $B/h3rt bench block --gemm fp8-dynamic --attention sage \
  --out "$R/bench_block_fp8dyn_sage.json"
bench block_nvfp4_sage 45 $B/h3rt bench block --gemm nvfp4 --attention sage \
  --out "$R/bench_block_nvfp4_sage.json"
if [ -z "${H3RT_QUICK:-}" ]; then
  TAIL=14 bench nvfp4_gemm 90 $B/h3rt bench nvfp4-gemm --out "$R/bench_nvfp4_gemm.json"
  bench block_fp8_flash 60 $B/h3rt bench block --gemm fp8 --out "$R/bench_block_fp8_flash.json"
  TAIL=8 bench step 110 $B/h3rt bench step --preset h3 --attention sage --reps 1 \
    --out "$R/bench_step.json"
fi
TAIL=14 bench int8_gemm 60 $B/h3rt bench int8-gemm --iters 5 --out "$R/bench_int8_gemm.json"
log done
