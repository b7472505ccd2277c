# shellcheck shell=bash disable=SC2034  # SAN_* are read by the scripts that source this
# Sourced by tools/device/sanitize.sh and tools/device/sanitize_suite.sh: the compute-sanitizer
# options and the reading of one log (its summaries, gtest's counts, the first report lines).

# The tool's options, in the array SAN_OPTS.
san_opts() {  # tool
  SAN_OPTS=(--tool "$1" --error-exitcode 1 --print-limit 10000 --show-backtrace device)
  [ "$1" = racecheck ] && SAN_OPTS+=(--racecheck-report all)
  return 0
}

# racecheck's report as "count  first access file:line / second access file:line [hazards]",
# most frequent first (best effort: the analysis lines "... between <kind> access at ... in
# <file>:<line>" and "and <kind> access at ...", paired in order).
race_pairs() {  # log
  awk '/(Read|Write) access at/ {
         match($0, /(Read|Write) access at/); kind = substr($0, RSTART, 5); sub(/ $/, "", kind)
         loc = "?"; n = split($0, w, " ")
         for (i = 1; i <= n; ++i) if (w[i] ~ /\.(cu|cuh|h|hpp):[0-9]+/) loc = w[i]
         sub(/.*\//, "", loc); sub(/:[^0-9].*/, "", loc)
         tail = ""; if (match($0, /\[[0-9]+ hazards?\]/)) tail = " " substr($0, RSTART, RLENGTH)
         if (first == "") first = kind " " loc; else { print first " / " kind " " loc tail; first = "" }
       }' "$1" | sort | uniq -c | sort -rn | head -12
}

# The first report lines of a log (errors, warnings, hazards), at most $2 (default 6).
report_head() {  # log [lines]
  grep -iE "^=+ +(error|warning|invalid|uninitiali|barrier|race|potential)" "$1" \
    | grep -v SUMMARY | head -"${2:-6}" | cut -c1-240
}

# Reads one log into SAN_COUNT (errors, or racecheck's hazards; empty when the tool printed no
# summary), SAN_WHAT ("errors=N" / "hazards=N (...)" / "no summary") and gtest's counts
# SAN_PASSED (empty when gtest printed no summary), SAN_FAILED and SAN_SKIPPED (empty when none).
san_parse() {  # tool log
  local errs race
  errs=$(grep -oE "ERROR SUMMARY: [0-9]+" "$2" | tail -1 | grep -oE "[0-9]+$")
  race=$(grep -oE "RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)" \
    "$2" | tail -1)
  SAN_PASSED=$(grep -oE "^\[  PASSED  \] [0-9]+" "$2" | tail -1 | grep -oE "[0-9]+$")
  SAN_FAILED=$(grep -oE "^\[  FAILED  \] [0-9]+ tests?" "$2" | tail -1 | grep -oE "^\[  FAILED  \] [0-9]+" \
    | grep -oE "[0-9]+$")
  SAN_SKIPPED=$(grep -oE "^\[  SKIPPED \] [0-9]+ tests?," "$2" | tail -1 | grep -oE "[0-9]+")
  if [ "$1" = racecheck ] && [ -n "$race" ]; then
    SAN_COUNT=$(echo "$race" | grep -oE "SUMMARY: [0-9]+" | grep -oE "[0-9]+")
    SAN_WHAT="hazards=$SAN_COUNT (${race#*(}"
  elif [ -n "$errs" ]; then
    SAN_COUNT=$errs
    SAN_WHAT="errors=$SAN_COUNT"
  else
    SAN_COUNT=
    SAN_WHAT="no summary"
  fi
}
