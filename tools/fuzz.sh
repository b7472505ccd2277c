#!/usr/bin/env bash
# Long fuzz runs: tools/fuzz.sh [seconds per target, default 600] [targets...]
# Targets: safetensors checkpoint inputs lora (default: all, one after the other). Builds the libFuzzer
# targets in build-asan (clang, ASan + UBSan, H3RT_FUZZ=ON; H3RT_FUZZ_BUILD overrides), runs each
# from its committed corpus (tests/fuzz/corpus/<target>), then minimizes the corpus with what it
# found (-merge=1 into a fresh folder: the smallest inputs that keep the edge coverage,
# -use_counters=0 so that loop counts alone keep no input), keeping the named seeds (seed_*,
# regress_*) of tests/fuzz/make_seeds.py. Crashing, leaking or hanging
# inputs are kept in <build>/fuzz_runs/<target>/artifacts; the script then exits 1. A summary line
# per target: executions, seconds, corpus files before and after, findings.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors checkpoint inputs lora)
build=${H3RT_FUZZ_BUILD:-build-asan}
[ -f "$build/CMakeCache.txt" ] ||
  cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DH3RT_CUDA=OFF -DH3RT_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null
status=0
for t in "${targets[@]}"; do
  work=$build/fuzz_runs/$t
  fuzzer=$build/tests/fuzz/fuzz_$t
  corpus=tests/fuzz/corpus/$t
  rm -rf "$work" && mkdir -p "$work/new" "$work/artifacts" "$work/min"
  before=$(ls "$corpus" | wc -l)
  start=$(date +%s)
  rc=0
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 -dict=tests/fuzz/h3rt.dict \
    -artifact_prefix="$work/artifacts/" "$work/new" "$corpus" >"$work/log" 2>&1 || rc=$?
  elapsed=$(($(date +%s) - start))
  # The named seeds first, then only what adds coverage to them.
  mkdir -p "$work/old"
  find "$corpus" -type f \( -name 'seed_*' -o -name 'regress_*' \) -exec cp {} "$work/min/" \;
  find "$corpus" -type f ! -name 'seed_*' ! -name 'regress_*' -exec mv {} "$work/old/" \;
  "$fuzzer" -merge=1 -use_counters=0 "$work/min" "$work/old" "$work/new" >"$work/merge.log" 2>&1
  rm -f "$corpus"/* && cp "$work/min"/* "$corpus/"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  findings=$(ls "$work/artifacts" | wc -l)
  echo "fuzz $t: ${execs:-?} executions in ${elapsed} s, corpus $before -> $(ls "$corpus" | wc -l)" \
    "files ($(du -sk "$corpus" | cut -f1) KiB), $findings findings (exit $rc; log $work/log)"
  [ "$rc" -eq 0 ] && [ "$findings" -eq 0 ] || status=1
done
exit $status
