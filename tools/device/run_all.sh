#!/usr/bin/env bash
# One device call that builds for sm_90a, runs every GPU test and the benchmarks, and leaves the
# logs and JSON reports under $OUT (device tool, carry [".deps"]):
#   bash tools/device/run_all.sh            # everything
#   H3RT_SKIP_SAMPLE=1 bash tools/device/run_all.sh
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu \
  --format=csv 2>&1; nvcc --version | tail -1
log build
t0=$(date +%s)
H3RT_TARGETS="h3rt_cuda_tests h3rt_cli" bash tools/device/build.sh > /tmp/build.log 2>&1 \
  || { tail -50 /tmp/build.log; exit 1; }
log "built in $(( $(date +%s) - t0 )) s"
B=build-device
log tests
timeout 240 $B/tests/h3rt_cuda_tests > "$R/cuda_tests.log" 2>&1
echo "cuda tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|SKIPPED" "$R/cuda_tests.log" | head -40
log "cli smoke: forward and sample on cuda"
G=.deps/shared/golden/h3_tiny
timeout 60 $B/h3rt forward --device cuda --checkpoint $G/weights.safetensors --inputs $G/golden.safetensors \
  --out /tmp/fwd.safetensors 2>&1 | tail -1
timeout 60 $B/h3rt sample --device cuda --steps 2 --out /tmp/tiny.safetensors 2>&1 | tail -1
log bench block
timeout 120 $B/h3rt bench block --out "$R/bench_block.json" 2>&1 | tail -3
log bench block fp8
timeout 120 $B/h3rt bench block --gemm fp8 --out "$R/bench_block_fp8.json" 2>&1 | tail -3
log bench block nvfp4
timeout 120 $B/h3rt bench block --gemm nvfp4 --out "$R/bench_block_nvfp4.json" 2>&1 | tail -3
log bench nvfp4-gemm
timeout 150 $B/h3rt bench nvfp4-gemm --out "$R/bench_nvfp4_gemm.json" 2>&1 | tail -12
log bench step
timeout 150 $B/h3rt bench step --preset h3 --out "$R/bench_step.json" 2>&1 | tail -6
log bench kernels
timeout 120 $B/h3rt bench kernels --out "$R/bench_kernels.json" > /tmp/bench_kernels.log 2>&1; tail -22 /tmp/bench_kernels.log
log bench attention
timeout 90 $B/h3rt bench attention --out "$R/bench_attention.json" 2>&1 | tail -8
log bench nvfp4
timeout 60 $B/h3rt bench quantize-nvfp4 --out "$R/bench_nvfp4.json" 2>&1 | tail -8
log sdpa reference
timeout 60 python3 bench/sdpa_reference.py > "$R/sdpa.json" 2>&1; tail -5 "$R/sdpa.json"
log torch block peer
timeout 120 python3 bench/torch_block.py --json "$R/torch_block.json" 2>&1 | tail -3
if [ -z "${H3RT_SKIP_SAMPLE:-}" ]; then
  log "sample h3 preset, seed shape, 1 step, cuda"
  timeout 150 $B/h3rt sample --preset h3 --device cuda --steps 1 --out /tmp/h3.safetensors \
    --report "$R/sample_h3.json" 2>&1 | tail -3
fi
log done
