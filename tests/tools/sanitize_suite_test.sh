#!/usr/bin/env bash
# The plumbing of tools/device/sanitize_suite.sh and sanitize.sh without a GPU: a stand-in gtest
# binary and a stand-in compute-sanitizer (both written below) give every verdict: clean,
# REPORTED (memcheck errors, racecheck hazards, initcheck reports), TEST FAILED, SKIPPED (gtest,
# and initcheck n/a), TIMEOUT, TOOL FAILED and NOT RUN (budget spent). Checks the TSV, the summary,
# the logs' archive, the order (durations file), a test that runs alone and the exit codes.
# shellcheck source=tests/tools/check_lib.sh
source "$(dirname "$0")/check_lib.sh"

# The stand-in test binary: a gtest-like list and run; FAKE_TOOL comes from the stand-in tool.
cat > "$tmp/fake_tests" <<'EOF'
#!/usr/bin/env bash
tests="Fast.A Fast.B Slow.Sleepy Algos/Param.Shape/Dequant Bad.OutOfBounds Racy.Shared Fail.Wrong
Skip.NoGpu Hang.Forever Tool.Broken DISABLED_Off.X Fast2.DISABLED_Y"
[ -n "${FAKE_EXTRA:-}" ] && tests+=" Host.Only Oom.Provoked Tool.Internal"
filter='*' list=0
for a in "$@"; do
  case $a in --gtest_list_tests) list=1 ;; --gtest_filter=*) filter=${a#--gtest_filter=} ;; esac
done
echo "Running main() from gtest_main.cc"
picked=() k=0
for t in $tests; do
  match=0
  IFS=: read -ra pats <<< "$filter"
  for p in "${pats[@]}"; do [[ $t == $p ]] && match=1; done
  (( match )) || continue
  [[ $t == *DISABLED_* ]] && (( ! list )) && continue
  (( k++ % ${GTEST_TOTAL_SHARDS:-1} == ${GTEST_SHARD_INDEX:-0} )) && picked+=("$t")
done
if (( list )); then
  last=
  for t in "${picked[@]}"; do
    s=${t%.*} n=${t##*.}
    [[ $t == Algos/* ]] && s=Algos/Param n=Shape/Dequant
    [ "$s" != "$last" ] && echo "$s." && last=$s
    [[ $t == Algos/* ]] && echo "  $n  # GetParam() = 4" || echo "  $n"
  done
  exit 0
fi
echo "[==========] Running ${#picked[@]} tests."
passed=0 failed=() skipped=()
for t in "${picked[@]}"; do
  echo "[ RUN      ] $t"
  case $t in
    Slow.*) sleep "${FAKE_SLOW_S:-0.5}" ;;
    Hang.*) [ "${FAKE_TOOL:-}" = initcheck ] && sleep 30 ;;
  esac
  case $t in
    Fail.*) echo "fake.cu:1: Failure"; echo "[  FAILED  ] $t (0 ms)"; failed+=("$t") ;;
    Skip.*) echo "[  SKIPPED ] $t (0 ms)"; skipped+=("$t") ;;
    *) echo "[       OK ] $t (0 ms)"; passed=$((passed + 1)) ;;
  esac
done
echo "[==========] ${#picked[@]} tests ran."
echo "[  PASSED  ] $passed tests."
(( ${#skipped[@]} )) && echo "[  SKIPPED ] ${#skipped[@]} tests, listed below:"
if (( ${#failed[@]} )); then
  echo "[  FAILED  ] ${#failed[@]} tests, listed below:"; echo " ${#failed[@]} FAILED TESTS"; exit 1
fi
exit 0
EOF

# The stand-in compute-sanitizer: runs the command, then prints the tool's summary.
cat > "$tmp/fake_cs" <<'EOF'
#!/usr/bin/env bash
[ "$1" = --version ] && { echo "fake compute-sanitizer"; echo "Version 0.0"; exit 0; }
tool=memcheck api=yes
while [[ $1 == --* ]]; do
  [ "$1" = --tool ] && tool=$2
  [ "$1" = --report-api-errors ] && api=$2
  shift 2
done
out=$(FAKE_TOOL=$tool "$@" 2>&1); rc=$?
echo "$out"
ran() { grep -q "^\[ RUN      \] $1" <<< "$out"; }
ran Tool.Broken && { echo "========= Error: target application returned an error"; exit 255; }
ran Tool.Internal && { echo "========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception."
  echo "========= ERROR SUMMARY: 1 error"; exit 1; }
ran Host.Only && { echo "========= Error: Target application terminated before first instrumented API call"; exit 255; }
if [ "$tool" = memcheck ] && [ "$api" != no ] && ran Oom.Provoked; then
  echo '========= Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaMalloc.'
  echo "========= ERROR SUMMARY: 1 error"; exit 1
fi
if [ "$tool" = racecheck ]; then
  if ran Racy.Shared; then
    echo "========= Error: Race reported between Write access at /src/ops/x/cuda.cu:42:k() [3 hazards]"
    echo "=========     and Read access at /src/ops/x/cuda.cu:57:k()"
    echo "========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)"; exit 1
  fi
  echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"; exit $rc
fi
if [ "$tool" = memcheck ] && ran Bad.OutOfBounds; then
  echo "========= Invalid __global__ read of size 4 bytes"
  echo "========= Invalid __global__ read of size 4 bytes"
  yes "=========     at k()+0x10 in /src/ops/x/cuda.cu:7 (a long backtrace)" | head -n 30000
  echo "========= ERROR SUMMARY: 2 errors"; exit 1
fi
if [ "$tool" = initcheck ] && ran Algos/Param; then
  echo "========= Uninitialized __global__ memory read of size 2 bytes"
  echo "========= ERROR SUMMARY: 5 errors"; exit 1
fi
echo "========= ERROR SUMMARY: 0 errors"; exit $rc
EOF
chmod +x "$tmp/fake_tests" "$tmp/fake_cs"
cat > "$tmp/durations.json" <<'EOF'
{"testsuites": [{"name": "Fast", "testsuite": [{"name": "B", "time": "0.020s"}, {"name": "A", "time": "0.010s"}]},
 {"name": "Slow", "testsuite": [{"name": "Sleepy", "time": "2.000s"}]},
 {"name": "Hang", "testsuite": [{"name": "Forever", "time": "9.000s"}]},
 {"name": "Algos/Param", "testsuite": [{"name": "Shape/Dequant", "time": "0.030s"}]}]}
EOF
export COMPUTE_SANITIZER=$tmp/fake_cs H3RT_SANITIZE_BIN=$tmp/fake_tests

# 1. Every verdict, 3 tools, 4 pairs side by side.
out1=$tmp/out1; mkdir -p "$out1"
OUT=$out1 H3RT_SANITIZE_TOOLS="memcheck racecheck initcheck" H3RT_SANITIZE_JOBS=4 \
  H3RT_SANITIZE_TIMEOUT=5 H3RT_SANITIZE_DURATIONS=$tmp/durations.json H3RT_SANITIZE_SERIAL='^Slow\.' \
  H3RT_INITCHECK_SKIP='^Fast\.B$' bash "$root/tools/device/sanitize_suite.sh" > "$tmp/log1" 2>&1
rc1=$?
tsv=$out1/sanitize_suite.tsv
verdict() { awk -F'\t' -v t="$1" -v n="$2" '$1 == t && $2 == n { print $3 "|" $5 }' "$tsv"; }
check "run 1 exits 1" test "$rc1" = 1
check "30 pairs (10 tests, DISABLED_ left out) x 3 tools" test "$(tail -n +2 "$tsv" | wc -l)" = 30
check "no DISABLED_ test" bash -c "! grep -q DISABLED_ '$tsv'"
check "memcheck Fast.A clean" test "$(verdict memcheck Fast.A)" = "clean|0"
check "parameterized test listed and clean" test "$(verdict memcheck Algos/Param.Shape/Dequant)" = "clean|0"
check "memcheck Bad REPORTED 2" test "$(verdict memcheck Bad.OutOfBounds)" = "REPORTED|2"
check "racecheck Racy REPORTED 3" test "$(verdict racecheck Racy.Shared)" = "REPORTED|3"
check "initcheck Algos REPORTED 5" test "$(verdict initcheck Algos/Param.Shape/Dequant)" = "REPORTED|5"
check "Fail TEST FAILED" test "$(verdict racecheck Fail.Wrong)" = "TEST FAILED|0"
check "Skip SKIPPED" test "$(verdict memcheck Skip.NoGpu)" = "SKIPPED|0"
check "Hang TIMEOUT under initcheck" test "$(verdict initcheck Hang.Forever)" = "TIMEOUT|"
check "Hang clean under racecheck" test "$(verdict racecheck Hang.Forever)" = "clean|0"
check "Tool.Broken TOOL FAILED" test "$(verdict synccheck Tool.Broken; verdict memcheck Tool.Broken)" = "TOOL FAILED|"
check "initcheck n/a SKIPPED with reason" grep -qP "^initcheck\tFast\.B\tSKIPPED\t.*initcheck n/a" "$tsv"
check "shortest first, untimed last in list order" test "$(awk -F'\t' '$1 == "memcheck" { printf "%s ", $2 }' "$tsv")" = \
  "Fast.A Fast.B Algos/Param.Shape/Dequant Slow.Sleepy Hang.Forever Bad.OutOfBounds Racy.Shared Fail.Wrong Skip.NoGpu Tool.Broken "
check "the serial test ran alone" awk -F'\t' 'NR > 1 && $4 != "" { s[NR] = $6; e[NR] = $6 + $4; if ($2 == "Slow.Sleepy") ser[NR] = 1 }
  END { for (i in ser) for (j in s) if (i != j && s[j] < e[i] - 0.15 && e[j] > s[i] + 0.15) exit 1 }' "$tsv"
check "race pair in the summary" grep -q "Write cuda.cu:42 / Read cuda.cu:57" "$out1/sanitize_suite_summary.txt"
check "report lines in the summary" grep -q "Invalid __global__ read" "$out1/sanitize_suite_summary.txt"
check "verdict counts printed" grep -qE "^initcheck +clean=4  REPORTED=1  TEST FAILED=1  TOOL FAILED=1  TIMEOUT=1  SKIPPED=2" "$tmp/log1"
tar -tzf "$out1/sanitize_suite_logs.tar.gz" > "$tmp/logs1"
check "non-clean logs kept" grep -q "memcheck/Bad.OutOfBounds.log" "$tmp/logs1"
check "parameterized log name" grep -q "initcheck/Algos_Param.Shape_Dequant.log" "$tmp/logs1"
tar -C "$tmp" -xzf "$out1/sanitize_suite_logs.tar.gz" ./memcheck/Bad.OutOfBounds.log
check "a long log cut to its head and tail" bash -c "grep -q 'cut by sanitize_suite' '$tmp/memcheck/Bad.OutOfBounds.log' &&
  tail -1 '$tmp/memcheck/Bad.OutOfBounds.log' | grep -q 'ERROR SUMMARY: 2' &&
  (( \$(stat -c %s '$tmp/memcheck/Bad.OutOfBounds.log') < 1200000 ))"
check "clean logs dropped" bash -c "! grep -q 'memcheck/Fast.A.log' '$tmp/logs1'"

# 2. The budget: the first pair's timeout is cut to what remains, the rest are NOT RUN.
echo '{"testsuites": [{"name": "Slow", "testsuite": [{"name": "Sleepy", "time": "0.001s"}]}]}' > "$tmp/d2.json"
out2=$tmp/out2; mkdir -p "$out2"
OUT=$out2 H3RT_SANITIZE_TOOLS="memcheck synccheck" H3RT_SANITIZE_FILTER='Slow.*:Fast.*' H3RT_SANITIZE_JOBS=1 \
  H3RT_SANITIZE_TIMEOUT=10 H3RT_SANITIZE_BUDGET_S=5 H3RT_SANITIZE_MIN_S=3 H3RT_SANITIZE_RESERVE_S=0 \
  H3RT_SANITIZE_DURATIONS=$tmp/d2.json FAKE_SLOW_S=8 bash "$root/tools/device/sanitize_suite.sh" > "$tmp/log2" 2>&1
rc2=$?
check "run 2 exits 0 (gaps only)" test "$rc2" = 0
check "cut by the budget" grep -qP "^memcheck\tSlow\.Sleepy\tTIMEOUT\t.*cut by the budget" "$out2/sanitize_suite.tsv"
check "5 pairs NOT RUN" test "$(grep -c $'\tNOT RUN\t' "$out2/sanitize_suite.tsv")" = 5

# 4. A test that never touches the device; a test that provokes CUDA API errors on purpose.
out4=$tmp/out4; mkdir -p "$out4"
OUT=$out4 H3RT_SANITIZE_TOOLS=memcheck H3RT_SANITIZE_FILTER='Host.*:Oom.*' FAKE_EXTRA=1 \
  H3RT_SANITIZE_API_ERRORS='^Oom\.' bash "$root/tools/device/sanitize_suite.sh" > "$tmp/log5" 2>&1
check "run 4 exits 0" test $? = 0
check "Host.Only NO CUDA CALL" grep -qP "^memcheck\tHost\.Only\tNO CUDA CALL\t" "$out4/sanitize_suite.tsv"
check "Oom clean, API errors noted" grep -qP "^memcheck\tOom\.Provoked\tclean\t.*API errors expected" "$out4/sanitize_suite.tsv"
OUT=$out4 H3RT_SANITIZE_TOOLS=memcheck H3RT_SANITIZE_FILTER='Oom.*' FAKE_EXTRA=1 \
  H3RT_SANITIZE_API_ERRORS= bash "$root/tools/device/sanitize_suite.sh" > "$tmp/log6" 2>&1
check "without the list the provoked API error is REPORTED" test $? = 1
OUT=$out4 H3RT_SANITIZE_TOOLS=memcheck H3RT_SANITIZE_FILTER='Tool.*' FAKE_EXTRA=1 \
  bash "$root/tools/device/sanitize_suite.sh" > "$tmp/log7" 2>&1
check "an internal sanitizer error is TOOL FAILED, not REPORTED" grep -qP \
  "^memcheck\tTool\.Internal\tTOOL FAILED\t.*internal sanitizer error" "$out4/sanitize_suite.tsv"

# 3. sanitize.sh (shards) on the same stand-ins, through the shared functions.
out3=$tmp/out3; mkdir -p "$out3"
OUT=$out3 H3RT_SANITIZE_TOOLS="memcheck racecheck" H3RT_SANITIZE_SHARDS=2 \
  bash "$root/tools/device/sanitize.sh" 'Fast.*:Bad.*:Racy.*' > "$tmp/log3" 2>&1
check "sanitize.sh exits 1 on reports" test $? = 1
check "sanitize.sh shard REPORTED" grep -qE "^memcheck\[[01]/2\] +errors=2 .*REPORTED" "$tmp/log3"
check "sanitize.sh race pairs" grep -q "cuda.cu:42 / Read cuda.cu:57" "$tmp/log3"
OUT=$out3 H3RT_SANITIZE_TOOLS=memcheck bash "$root/tools/device/sanitize.sh" 'Fast.*' > "$tmp/log4" 2>&1
check "sanitize.sh clean filter exits 0" test $? = 0
if (( fails )); then
  for f in "$tmp"/log*; do echo "--- $f"; cat "$f"; done
  echo "--- TSV"; cat "$tsv"
fi
echo "$fails failed"
exit $(( fails > 0 ))
