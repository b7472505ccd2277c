#!/usr/bin/env bash
# On the GPU machine, with the prebuilt binaries (tools/device/prebuilt.sh):
#   source tools/device/prebuilt.sh; H3RT_SANITIZE_BIN=$B/h3rt_cuda_tests bash tools/device/sanitize_suite.sh
# In a 600 s device call, one tool or two per call with a budget, e.g.
#   H3RT_SANITIZE_TOOLS=racecheck H3RT_SANITIZE_BUDGET_S=540 H3RT_SANITIZE_BIN=$B/h3rt_cuda_tests \
#     H3RT_SANITIZE_DURATIONS=cuda_tests.json bash tools/device/sanitize_suite.sh
# (cuda_tests.json from a plain run: $B/h3rt_cuda_tests --gtest_output=json:$OUT/cuda_tests.json).
# Runs every GPU test under compute-sanitizer, one process per (tool, test) pair, P pairs side by
# side, each with its own timeout, within an overall budget; a pair that cannot start in time is
# reported as NOT RUN. tools/device/sanitize.sh runs one filter per tool instead (a few tests).
# Per pair a verdict: clean, REPORTED (errors > 0, racecheck hazards > 0), TEST FAILED, TIMEOUT,
# TOOL FAILED (no sanitizer summary), NO CUDA CALL (the test passed and never touched the device:
# the tool has nothing to check), NO TEST RAN, SKIPPED (gtest skipped it, or initcheck n/a
# below) or NOT RUN. Writes under $OUT:
#   sanitize_suite.tsv          tool, test, verdict, seconds, count (errors/hazards), start (s
#                               after the script's start), note
#   sanitize_suite_summary.txt  the non-clean pairs with their first report lines (racecheck: the
#                               file:line pairs), then the verdict counts per tool (also printed)
#   sanitize_suite_logs.tar.gz  the logs of the non-clean pairs (each cut to its first 1 MiB and
#                               last 128 KiB)
# Exits 1 if a pair is REPORTED, TEST FAILED, TOOL FAILED or NO TEST RAN; TIMEOUT and NOT RUN are
# coverage gaps, counted in the summary (exit 0 if nothing else).
# Environment:
#   H3RT_SANITIZE_BIN        test binary (default build-device/tests/h3rt_cuda_tests)
#   H3RT_SANITIZE_FILTER     gtest filter of the tests to list (default '*'; DISABLED_ never run)
#   H3RT_SANITIZE_TOOLS      tools, run in this order (default "memcheck racecheck synccheck initcheck")
#   H3RT_SANITIZE_JOBS       pairs side by side (default 12)
#   H3RT_SANITIZE_TIMEOUT    seconds per pair (default 120)
#   H3RT_SANITIZE_BUDGET_S   seconds for the whole script (default 0: none); pairs end by the
#                            budget less 15 s (packing, kill grace): each pair's timeout is cut to
#                            what remains, and none starts when less than H3RT_SANITIZE_MIN_S
#                            (default 30) remain (H3RT_SANITIZE_RESERVE_S replaces the 15 s)
#   H3RT_SANITIZE_DURATIONS  gtest output of a plain run (--gtest_output=json:FILE or xml:FILE):
#                            within a tool, shortest tests first (tests it lacks go last, in
#                            list order); without it, list order
#   H3RT_SANITIZE_SERIAL     ERE of tests (Suite.Test) that need room (release-sized shapes): each
#                            takes JOBS / H3RT_SANITIZE_SERIAL_JOBS slots (default 1 = runs alone)
#   H3RT_INITCHECK_SKIP      ERE of tests whose initcheck is known not meaningful: their kernels
#                            read cuBLASLt GEMM outputs, whose stores initcheck does not see (see
#                            sanitize.sh and initcheck_probe.cu); reported SKIPPED with the reason
#                            (default empty: initcheck runs everywhere and such tests read REPORTED).
#                            tools/device/initcheck_cublaslt_readers.ere holds the list used in
#                            session 19 (whole forwards, blocks, GEMM tests, the cuBLASLt int8 path):
#                            H3RT_INITCHECK_SKIP="$(cat tools/device/initcheck_cublaslt_readers.ere)"
#   H3RT_SANITIZE_API_ERRORS ERE of tests that provoke CUDA API errors on purpose (default: the
#                            out-of-memory test): run with --report-api-errors no (memory
#                            accesses are still checked), noted in the TSV
#   COMPUTE_SANITIZER        the tool's binary
# Pairs of the next tool start while the last ones of the previous tool still run.
# Known on the H200 (compute-sanitizer of CUDA 13.0, session 14, bench/RESULTS.md): racecheck
# reports WAR hazards inside cuBLASLt's own nvjet_sm90_* GEMM kernels (the tool does not follow
# their mbarrier ordering); leaving them uninstrumented (--kernel-name-exclude kns=nvjet) makes
# the tool fail with an internal error on them, so they stay instrumented. racecheck needs
# fewer pairs side by side than the other tools (12 got some forward tests killed).
# Not done: a list of the kernels each clean pair covered (the TSV lists the tests only).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BIN=${H3RT_SANITIZE_BIN:-build-device/tests/h3rt_cuda_tests}
FILTER=${H3RT_SANITIZE_FILTER:-*}
TOOLS=${H3RT_SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
JOBS=${H3RT_SANITIZE_JOBS:-12}
LIMIT=${H3RT_SANITIZE_TIMEOUT:-120}
BUDGET=${H3RT_SANITIZE_BUDGET_S:-0}
MIN_S=${H3RT_SANITIZE_MIN_S:-30}
RESERVE=${H3RT_SANITIZE_RESERVE_S:-15}
SERIAL=${H3RT_SANITIZE_SERIAL:-}
SERIAL_JOBS=${H3RT_SANITIZE_SERIAL_JOBS:-1}
INIT_SKIP=${H3RT_INITCHECK_SKIP:-}
API_OK=${H3RT_SANITIZE_API_ERRORS-CudaRuntime\.DeviceOutOfMemoryNamesTheAllocation}
DURATIONS=${H3RT_SANITIZE_DURATIONS:-}
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$BIN" ] || { echo "sanitize_suite: $BIN missing (H3RT_SANITIZE_BIN)" >&2; exit 2; }
[ -x "$CS" ] || { echo "sanitize_suite: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
source tools/device/sanitize_lib.sh  # san_opts, san_parse, race_pairs, report_head
WORK=$(mktemp -d "${TMPDIR:-/tmp}/h3rt_sanitize_suite.XXXXXX")
T0=$(date +%s.%N)
since() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# The tests: "Suite." lines, then "  Test  # GetParam() = ..." lines; DISABLED_ ones left out.
list_tests() {
  "$BIN" --gtest_list_tests --gtest_filter="$FILTER" | awk '
    /^[^ ].*\.( +#.*)?$/ { suite = $1; next }
    /^  [^ ]/ && suite != "" {
      if (suite ~ /(^|\/)DISABLED_/ || $1 ~ /^DISABLED_/) next
      print suite $1 }'
}

# The list ordered shortest first by the durations file (gtest JSON or XML); unknown tests last.
order_tests() {  # list file, durations file
  python3 - "$1" "$2" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
names = [l.strip() for l in open(sys.argv[1]) if l.strip()]
secs = {}
text = open(sys.argv[2]).read()
if text.lstrip().startswith("{"):
    for suite in json.loads(text).get("testsuites", []):
        for t in suite.get("testsuite", []):
            secs[suite["name"] + "." + t["name"]] = float(str(t.get("time", "0")).rstrip("s"))
else:
    for t in ET.fromstring(text).iter("testcase"):
        secs[t.get("classname") + "." + t.get("name")] = float(t.get("time", "0"))
known = sorted((n for n in names if n in secs), key=lambda n: secs[n])
print("\n".join(known + [n for n in names if n not in secs]))
sys.stderr.write("sanitize_suite: %d of %d tests timed by %s\n" % (len(known), len(names), sys.argv[2]))
EOF
}

list_tests > "$WORK/tests" || { echo "sanitize_suite: $BIN --gtest_list_tests failed" >&2; exit 2; }
if [ -n "$DURATIONS" ]; then
  order_tests "$WORK/tests" "$DURATIONS" > "$WORK/ordered" || exit 2
  mv "$WORK/ordered" "$WORK/tests"
fi
mapfile -t TESTS < "$WORK/tests"
(( ${#TESTS[@]} > 0 )) || { echo "sanitize_suite: no test matches '$FILTER'" >&2; exit 2; }
# The queue, tool-major: pair i is (Q_TOOL[i], Q_TEST[i]) and takes Q_W[i] of the JOBS slots.
Q_TOOL=() Q_TEST=() Q_W=()
heavy=$(( (JOBS + SERIAL_JOBS - 1) / SERIAL_JOBS ))
for tool in $TOOLS; do
  for t in "${TESTS[@]}"; do
    Q_TOOL+=("$tool") Q_TEST+=("$t") w=1
    [ -n "$SERIAL" ] && [[ $t =~ $SERIAL ]] && w=$heavy
    Q_W+=("$w")
  done
done
N=${#Q_TOOL[@]}
echo "sanitize_suite: $("$CS" --version 2>&1 | tail -1); ${#TESTS[@]} tests x tools '$TOOLS' = $N" \
  "pairs, $JOBS side by side, ${LIMIT}s each, budget ${BUDGET}s"

# One pair: the log goes to $WORK/<i>.log, "rc seconds" to $WORK/<i>.done.
run_pair() {  # index, tool, test, limit
  local t0 log="$WORK/$1.log"
  t0=$(date +%s.%N)
  san_opts "$2"
  [ -n "$API_OK" ] && [[ $3 =~ $API_OK ]] && SAN_OPTS+=(--report-api-errors no)
  # A temp folder per pair: tests of different names may write files of one name side by side.
  mkdir -p "$WORK/tmp.$1"
  TEST_TMPDIR="$WORK/tmp.$1" TMPDIR="$WORK/tmp.$1" timeout -k 10 "$4" "$CS" "${SAN_OPTS[@]}" \
    "$BIN" --gtest_color=no --gtest_filter="$3" > "$log" 2>&1 < /dev/null
  local rc=$?
  rm -rf "$WORK/tmp.$1"
  echo "$rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" \
    > "$WORK/$1.tmp" && mv "$WORK/$1.tmp" "$WORK/$1.done"
}

# Results per pair; a TSV row is appended as each pair ends (a killed script keeps them).
V=() SECS=() CNT=() START=() NOTE=() LIM=()
TSV="$OUT/sanitize_suite.tsv"
printf "tool\ttest\tverdict\tseconds\tcount\tstart\tnote\n" > "$TSV"
record() {  # index
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "${Q_TOOL[$1]}" "${Q_TEST[$1]}" "${V[$1]}" \
    "${SECS[$1]:-}" "${CNT[$1]:-}" "${START[$1]:-}" "${NOTE[$1]:-}"
}

# Keeps the head and tail of a long log (files over 16 MiB do not come back from the device).
trim_log() {  # log
  (( $(stat -c %s "$1") > (1 << 20) + (128 << 10) )) || return 0
  { head -c $((1 << 20)) "$1"; echo; echo "[... cut by sanitize_suite ...]"; tail -c $((128 << 10)) "$1"; } \
    > "$1.cut" && mv "$1.cut" "$1"
}

# Reads pair i's log into its verdict; a non-clean pair's digest goes to $WORK/<i>.digest.
finish() {  # index
  local i=$1 tool=${Q_TOOL[$1]} log="$WORK/$1.log" rc secs v note=
  read -r rc secs < "$WORK/$i.done"
  san_parse "$tool" "$log"
  if (( rc == 124 || rc == 137 )); then v=TIMEOUT note="after ${LIM[$i]}s"
    (( LIM[$i] < LIMIT )) && note+=" (cut by the budget)"
  elif [ -z "$SAN_COUNT" ] && (( rc == 0 || rc == 255 )) && [ -n "$SAN_PASSED" ] &&
    [ -z "$SAN_FAILED" ] && grep -q "terminated before first instrumented API call" "$log"; then
    v="NO CUDA CALL" note="the test passed without touching the device: nothing to check"
  elif grep -q "Internal Sanitizer Error" "$log"; then
    v="TOOL FAILED" note="internal sanitizer error (its summary counts it as 1 error), rc=$rc"
  elif [ -z "$SAN_COUNT" ]; then v="TOOL FAILED" note="no sanitizer summary, rc=$rc"
  elif (( SAN_COUNT > 0 )); then v=REPORTED note=$SAN_WHAT
  elif [ -n "$SAN_FAILED" ] || [ -z "$SAN_PASSED" ]; then v="TEST FAILED" note="rc=$rc"
  elif (( SAN_PASSED == 0 )) && [ -n "$SAN_SKIPPED" ]; then v=SKIPPED note="gtest skipped"
  elif (( SAN_PASSED == 0 )); then v="NO TEST RAN" note="filter matched nothing"
  elif (( rc != 0 )); then v="TOOL FAILED" note="rc=$rc"
  else v=clean
  fi
  [ -n "$API_OK" ] && [[ ${Q_TEST[$i]} =~ $API_OK ]] &&
    note+="${note:+; }CUDA API errors expected (provoked by the test), not reported"
  V[$i]=$v SECS[$i]=$secs CNT[$i]=$SAN_COUNT NOTE[$i]=$note
  record "$i" >> "$TSV"
  if [ "$v" = clean ] || [ "$v" = SKIPPED ] || [ "$v" = "NO CUDA CALL" ]; then
    rm -f "$log"
    return
  fi
  {
    echo "$tool ${Q_TEST[$i]}: $v${note:+ ($note)}, ${secs}s, log $tool/${Q_TEST[$i]//\//_}.log"
    [ "$tool" = racecheck ] && race_pairs "$log" | sed 's/^/  /'
    report_head "$log" | sed 's/^/  /'
    [ "$v" != REPORTED ] && tail -4 "$log" | cut -c1-240 | sed 's/^/  | /'
  } > "$WORK/$i.digest"
  head -1 "$WORK/$i.digest"
  trim_log "$log"
  mkdir -p "$WORK/logs/$tool" && mv "$log" "$WORK/logs/$tool/${Q_TEST[$i]//\//_}.log"
}

# The scheduler: in queue order, a pair starts when its slots are free (a heavy pair waits for
# the running ones to make room); reaps by polling the .done files.
declare -A RUNNING=()
used=0 next=0
deadline=0
(( BUDGET > 0 )) && deadline=$(( ${T0%.*} + BUDGET - RESERVE ))
while (( next < N || ${#RUNNING[@]} > 0 )); do
  for i in "${!RUNNING[@]}"; do
    [ -e "$WORK/$i.done" ] || continue
    used=$(( used - RUNNING[$i] )); unset "RUNNING[$i]"
    finish "$i"
  done
  while (( next < N )); do
    i=$next
    if [ "${Q_TOOL[$i]}" = initcheck ] && [ -n "$INIT_SKIP" ] && [[ ${Q_TEST[$i]} =~ $INIT_SKIP ]]; then
      V[$i]=SKIPPED NOTE[$i]="initcheck n/a: reads cuBLASLt outputs (H3RT_INITCHECK_SKIP)"
      record "$i" >> "$TSV"; next=$(( next + 1 )); continue
    fi
    limit=$LIMIT
    if (( deadline > 0 )); then
      left=$(( deadline - $(date +%s) ))
      if (( left < MIN_S )); then  # too late for any pair: the rest are NOT RUN
        for ((; next < N; ++next)); do
          V[$next]="NOT RUN" NOTE[$next]="budget ${BUDGET}s spent"; record "$next" >> "$TSV"
        done
        break
      fi
      (( left < limit )) && limit=$left
    fi
    w=${Q_W[$i]}
    (( w > JOBS )) && w=$JOBS
    (( used + w <= JOBS )) || break
    START[$i]=$(since) LIM[$i]=$limit
    run_pair "$i" "${Q_TOOL[$i]}" "${Q_TEST[$i]}" "$limit" &
    RUNNING[$i]=$w used=$(( used + w )) next=$(( next + 1 ))
  done
  (( ${#RUNNING[@]} > 0 )) && sleep 0.2
done

# The TSV again, in queue order; the summary; the logs.
{ head -1 "$TSV"; for ((i = 0; i < N; ++i)); do record "$i"; done; } > "$WORK/tsv" && mv "$WORK/tsv" "$TSV"
SUMMARY="$OUT/sanitize_suite_summary.txt"
{
  echo "== non-clean pairs (first report lines; logs in sanitize_suite_logs.tar.gz)"
  for ((i = 0; i < N; ++i)); do [ -e "$WORK/$i.digest" ] && cat "$WORK/$i.digest"; done
  echo "== verdicts per tool ($(since)s, ${#TESTS[@]} tests)"
  for tool in $TOOLS; do
    printf "%-10s %s\n" "$tool" "$(awk -F'\t' -v t="$tool" 'NR > 1 && $1 == t { n[$3]++ }
      END { split("clean|NO CUDA CALL|REPORTED|TEST FAILED|TOOL FAILED|NO TEST RAN|TIMEOUT|SKIPPED|NOT RUN", o, "|")
            for (k = 1; k <= 9; ++k) if (n[o[k]]) printf "%s=%d  ", o[k], n[o[k]] }' "$TSV")"
  done
} > "$SUMMARY"
cat "$SUMMARY"
if [ -d "$WORK/logs" ]; then
  tar -C "$WORK/logs" -czf "$OUT/sanitize_suite_logs.tar.gz" .
  size=$(stat -c %s "$OUT/sanitize_suite_logs.tar.gz")
  (( size > (15 << 20) )) && echo "sanitize_suite: the logs' archive is $size bytes (over 16 MiB does not come back)"
fi
rm -rf "$WORK"
awk -F'\t' 'NR > 1 && ($3 == "REPORTED" || $3 == "TEST FAILED" || $3 == "TOOL FAILED" ||
  $3 == "NO TEST RAN") { bad = 1 } END { exit bad }' "$TSV"
