# Shared steps of the one-call device scripts (source it from the repository root): start_call
# (the GPU's name into $OUT/gpu.txt, then build_carried: the CLI and the GPU tests into
# build-device from the carried .deps-lean and .prebuilt/golden.tar.xz; with H3RT_PREBUILT=1 the
# carried .prebuilt/bin.tar.xz instead, no CUTLASS sm_90 kernels), want STEP, log, gpu_tests FILTER
# and block_line (one line per `bench block` report). Results land under $OUT.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
B=build-device
T=$B/tests/h3rt_cuda_tests
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }

build_carried() {
  [ -x "$T" ] && return 0
  if [ "${H3RT_PREBUILT:-0}" = 1 ]; then  # binaries built here: tools/device/prebuilt.sh --pack
    source tools/device/prebuilt.sh || return 1
    T=$B/h3rt_cuda_tests
    return 0
  fi
  if [ -f .deps-lean/deps.tar.xz ]; then
    mkdir -p /tmp/deps && tar -C /tmp/deps -xJf .deps-lean/deps.tar.xz
    export H3RT_DEPS_DIR=/tmp/deps
  fi
  if [ -f .prebuilt/golden.tar.xz ]; then
    mkdir -p /tmp/h3rt-shared && tar -C /tmp/h3rt-shared -xJf .prebuilt/golden.tar.xz
    export H3RT_SHARED_DIR=/tmp/h3rt-shared
  fi
  log "build"
  H3RT_TARGETS="h3rt_cli h3rt_cuda_tests" bash tools/device/build.sh > "$OUT/build.txt" 2>&1 ||
    { tail -40 "$OUT/build.txt"; return 1; }
}

# Whether step $1 is to run: H3RT_STEPS lists them, else the script's STEPS.
want() { [[ " ${H3RT_STEPS:-$STEPS} " == *" $1 "* ]]; }

start_call() {
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
  build_carried
}

gpu_tests() {  # gtest filter: the log in $OUT/tests.txt, the verdict in the summary
  log "tests $1"
  "$T" --gtest_filter="$1" > "$OUT/tests.txt" 2>&1
  grep -E "^\[  (PASSED|FAILED) |tests ran" "$OUT/tests.txt" | tee -a "$OUT/summary.txt"
}

# The graph time and the components that the int8 producers touch, from a block report.
block_line() {
  python3 - "$1" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["representative_block_p50_milliseconds"]
print("  graph p50 %.3f ms; norm %.3f, swiglu %.3f, out %.3f, gemm %.3f ms" % (
    d["block_p50_milliseconds_cuda_graph"], c["norm_modulate"], c["swiglu"],
    c["output_projection"], d["gemm_milliseconds"]))
PY
}
