#!/usr/bin/env bash
# On the GPU machine, after tools/device/build.sh has built build-device/tests/h3rt_cuda_tests:
# runs the GPU tests of a gtest filter under compute-sanitizer's memcheck, racecheck, synccheck
# and initcheck, one log per tool under $OUT (sanitize_<tool>.log), and prints one summary line
# per tool. Exits 1 if any tool reported an error or hazard, timed out, could not run, or a test
# failed under it. Source lines in the reports come from -lineinfo, which cmake/cuda.cmake passes
# to every CUDA target (the Release build keeps it).
#   H3RT_TARGETS=h3rt_cuda_tests bash tools/device/build.sh && bash tools/device/sanitize.sh
#   bash tools/device/sanitize.sh 'SageAttentionCuda.*'           # a filter of your own
#   H3RT_SANITIZE_TOOLS=racecheck bash tools/device/sanitize.sh    # some tools only
# initcheck does not see the stores of cuBLASLt's sm_90 GEMM kernels: every later read of a GEMM
# output is reported as uninitialized although the values are right (tools/device/initcheck_probe.cu
# shows it on a bare cuBLASLt call: all 115,200 outputs reported, 0 wrong; a kernel-written control
# buffer: 0 reports). initcheck is therefore meaningful only on tests whose kernels read no cuBLASLt
# output (not the forward sessions or blocks).
# Environment: H3RT_SANITIZE_FILTER (the filter when no argument is given; '*' for the whole
# suite), H3RT_SANITIZE_TOOLS (default all four), H3RT_SANITIZE_TIMEOUT (seconds per tool, default
# 280: racecheck is the slow one; split the tools over calls when a call has less time),
# H3RT_SANITIZE_SHARDS (N > 1: the tests split into N gtest shards run side by side, one process
# each: the tools' cost is mostly on the host, so a 16-core machine covers the suite N times
# faster; one summary line per shard, the logs packed into $OUT/sanitize_logs.tar.gz; a slow test
# times its whole shard out: for the whole suite use tools/device/sanitize_suite.sh, one process
# and one verdict per (tool, test)),
# H3RT_SANITIZE_BIN (the test binary, default build-device/tests/h3rt_cuda_tests; e.g. the one
# tools/device/prebuilt.sh unpacks), COMPUTE_SANITIZER (the tool's binary).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BIN=${H3RT_SANITIZE_BIN:-build-device/tests/h3rt_cuda_tests}
SHARDS=${H3RT_SANITIZE_SHARDS:-1}
# Small shapes of the kernels that use shared memory, barriers and async copies: the Sage
# pre-pass (both algorithms) and mma.sync kernels, the wgmma Sage kernels on tiny sequences, the
# bf16 flash attention, the NVFP4 dequantize + cuBLASLt GEMM on small shapes, and a few quick ones.
DEFAULT_FILTER='SageAttentionCuda.*:SageAttentionWgmma.TinySequences:CudaAttentionBf16.TinyRagged:CudaAttentionBf16.ExactTiles:Algos/LinearNvfp4Algo.SmallShapesStridesBias/DequantCublas:CudaFusedOps.PlainRmsNormSmallWidthBitExact:Fp8Quantize.AllZeroInputUsesScaleOne:CudaRuntime.*'
FILTER=${1:-${H3RT_SANITIZE_FILTER:-$DEFAULT_FILTER}}
TOOLS=${H3RT_SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
LIMIT=${H3RT_SANITIZE_TIMEOUT:-280}
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$BIN" ] || { echo "sanitize: $BIN missing; build it first:" \
  "H3RT_TARGETS=h3rt_cuda_tests bash tools/device/build.sh" >&2; exit 2; }
[ -x "$CS" ] || { echo "sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
echo "sanitize: $("$CS" --version | tail -1); filter $FILTER"
source tools/device/sanitize_lib.sh  # san_opts, san_parse, race_pairs, report_head

# One tool over one shard of the filter's tests; the exit code goes to <log>.rc.
run_shard() {  # tool, shard index, log
  san_opts "$1"
  GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$2 timeout -k 10 "$LIMIT" "$CS" "${SAN_OPTS[@]}" \
    "$BIN" --gtest_color=no --gtest_filter="$FILTER" > "$3" 2>&1
  echo $? > "$3.rc"
}

# Reads one log: prints its summary line (and, when not clean, what it reported); returns 1
# unless clean.
verdict_of() {  # tool, name, log, seconds
  local tool=$1 name=$2 log=$3 secs=$4 rc verdict line
  rc=$(cat "$log.rc")
  san_parse "$tool" "$log"
  local count=$SAN_COUNT what=$SAN_WHAT passed=$SAN_PASSED failed=$SAN_FAILED
  verdict=clean
  if (( rc == 124 || rc == 137 )); then verdict="TIMEOUT after ${LIMIT}s"
  elif [ -z "$count" ]; then verdict="DID NOT RUN (see the log's end)"
  elif (( count > 0 )); then verdict=REPORTED
  elif [ -n "$failed" ] || [ -z "$passed" ]; then verdict="TESTS FAILED"
  elif (( passed == 0 )); then verdict="NO TEST RAN (filter?)"
  elif (( rc != 0 )); then verdict="rc=$rc"
  fi
  line=$(printf "%-13s %-40s tests passed=%s failed=%s  %4ds  rc=%d  %s" "$name" "$what" \
    "${passed:-?}" "${failed:-0}" "$secs" "$rc" "$verdict")
  summary+=("$line")
  echo "$line"
  [ "$verdict" = clean ] && return 0
  if [ "$tool" = racecheck ]; then race_pairs "$log"; fi
  report_head "$log"
  [ -z "$count" ] && tail -5 "$log"
  return 1
}

status=0
summary=()
logs=()
for tool in $TOOLS; do
  t0=$(date +%s)
  for ((i = 0; i < SHARDS; ++i)); do
    log="$OUT/sanitize_$tool.log"
    (( SHARDS > 1 )) && log="$OUT/sanitize_${tool}_$i.log"
    logs+=("$log")
    run_shard "$tool" "$i" "$log" &
  done
  wait
  secs=$(( $(date +%s) - t0 ))
  for ((i = 0; i < SHARDS; ++i)); do
    log="$OUT/sanitize_$tool.log" name=$tool
    (( SHARDS > 1 )) && log="$OUT/sanitize_${tool}_$i.log" name="${tool}[$i/$SHARDS]"
    verdict_of "$tool" "$name" "$log" "$secs" || status=1
    rm -f "$log.rc"
    # Files over 16 MiB do not come back from the device.
    (( SHARDS == 1 )) && [ "$(stat -c %s "$log")" -gt $((15 << 20)) ] && gzip -f "$log"
  done
done
if (( SHARDS > 1 )); then  # at most 8 files come back: one archive of the shards' logs
  tar -C "$OUT" -czf "$OUT/sanitize_logs.tar.gz" "${logs[@]#$OUT/}" && rm -f "${logs[@]}"
fi
printf "%s\n" "${summary[@]}" > "$OUT/sanitize_summary.txt"
exit $status
