#!/usr/bin/env bash
# One device call for the last code's GPU checks, on binaries built here in the CI configuration
# (nothing is built on the device, so the whole call goes to the checks):
#   1. `h3rt selftest`;
#   2. with .prebuilt/cli90.tar.xz (an sm_90a h3rt CLI with the CUTLASS GEMMs, built here), the
#      figures #15 and #18 track: the Sage attention back to back for 6 s at the seed shape and
#      at 864x480's 15,499 rows, and 20 steps at 864x480 with int8 GEMMs, nvidia-smi sampling
#      power, SM clock and the power-cap flag beside them;
#   3. the Python and ComfyUI-node tests against the packed module (when it was packed);
#   4. the whole GPU suite, with the time that is left.
# Each step has its own limit and is skipped, and named so, when it could end past H3RT_BUDGET_S
# (default 585 s: a device call is at most 600 s).
# Pack on the developer machine (git-ignored; carry [".prebuilt"], under 50 MB):
#   bash tools/device/prebuilt.sh --pack build --python /path/to/python3.12
#   tar -C build90 -cf - h3rt | xz -T2 -6 > .prebuilt/cli90.tar.xz    # optional, step 2
# Device tool: `bash tools/device/prebuilt_check.sh`. Results: $OUT/prebuilt_check.tar.gz (the
# logs, JSON reports, nvidia-smi samples and summary.txt: one verdict line per step).
# Exit status 1 when a step failed or timed out. The plumbing is tested without a GPU by
# tests/tools/prebuilt_check_test.sh.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out}
TMP=${H3RT_DEVICE_TMP:-/tmp}
R=$TMP/prebuilt-check
rm -rf "$R"
mkdir -p "$OUT" "$R"
trap 'tar -C "$TMP" -czf "$OUT/prebuilt_check.tar.gz" prebuilt-check' EXIT
T0=$(date +%s)
BUDGET=${H3RT_BUDGET_S:-585}
failed=0
el() { echo $(($(date +%s) - T0)); }
verdict() { echo "$1: $2" | tee -a "$R/summary.txt"; }

# step NAME LIMIT COMMAND...: the command under LIMIT seconds, its output in $R/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  if (($(el) + limit > BUDGET)); then
    verdict "$name" "skipped (the budget's $BUDGET s leave $((BUDGET - $(el))) s, it may take $limit)"
    return
  fi
  timeout "$limit" "$@" >"$R/$name.log" 2>&1
  local rc=$?
  local passed
  passed=$(grep -cE '^\[       OK \]' "$R/$name.log")
  local tests=""
  ((passed > 0)) && tests=", $passed tests passed"
  if ((rc == 0)); then
    verdict "$name" "ok (at $(el) s$tests)"
  else
    failed=1
    local what="FAILED, exit status $rc"
    ((rc == 124)) && what="TIMEOUT after $limit s"
    verdict "$name" "$what (at $(el) s$tests)"
    tail -n 5 "$R/$name.log"
  fi
}

# shellcheck source=tools/device/prebuilt.sh
source tools/device/prebuilt.sh || exit 1
{
  cat .prebuilt/commit
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
  "$B/h3rt" --version
} >"$R/device.txt" 2>&1
cat "$R/device.txt"
step selftest 120 "$B/h3rt" selftest

if [ -f .prebuilt/cli90.tar.xz ]; then
  mkdir -p "$TMP/h3rt-cli90" && tar -C "$TMP/h3rt-cli90" -xJf .prebuilt/cli90.tar.xz
  H=$TMP/h3rt-cli90/h3rt
  "$H" --version >>"$R/device.txt" 2>&1
  smi=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks_throttle_reasons.sw_power_cap \
      --format=csv,noheader,nounits -lms 200 >"$R/smi.csv" 2>&1 &
    smi=$!
  fi
  sage=(--kernels wgmma_pp3 --prepass fused_l2 --warmup 3 --sustain 6)
  step attention_seed 90 "$H" bench attention "${sage[@]}" --iters 20 --out "$R/attention_seed.json"
  step attention_864x480 60 "$H" bench attention --seq 15499 "${sage[@]}" --iters 50 \
    --out "$R/attention_864x480.json"
  step sample20_864x480 120 "$H" bench sample --preset h3 --steps 20 --width 864 --height 480 \
    --frames 124 --gemm int8 --attention sage --out "$R/sample20_864x480.json"
  [ -n "$smi" ] && kill "$smi"
else
  verdict targets "not run (no .prebuilt/cli90.tar.xz)"
fi

if [ -n "${H3RT_PY:-}" ]; then
  step pytest 150 env PYTHONPATH="$H3RT_PY:python/tests" python3 -m pytest -q \
    python/tests/test_h3rt_cuda.py python/tests/test_h3rt.py integrations/comfyui/tests
else
  verdict pytest "not run (no .prebuilt/py.tar.xz)"
fi

left=$((BUDGET - $(el)))
if ((left >= 2)); then
  step gpu_suite "$left" "$B/h3rt_cuda_tests"
else
  verdict gpu_suite "skipped (no time left in the budget's $BUDGET s)"
fi
exit "$failed"
