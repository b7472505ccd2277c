#!/usr/bin/env bash
# The plumbing of tools/device/prebuilt_check.sh without a GPU: a stand-in h3rt CLI and GPU suite
# (written below, packed as tools/device/prebuilt.sh --pack packs the real ones) give every
# verdict: ok, FAILED, TIMEOUT, skipped (budget) and not run (nothing packed). Checks the summary,
# the archive and the exit codes. About 10 s.
# shellcheck source=tests/tools/check_lib.sh
source "$(dirname "$0")/check_lib.sh"

# A checkout holding only the two scripts, and the packed stand-ins.
repo=$tmp/repo
mkdir -p "$repo/tools/device" "$repo/.prebuilt" "$tmp/bin/tests" "$tmp/golden/golden"
cp "$root/tools/device/prebuilt.sh" "$root/tools/device/prebuilt_check.sh" "$repo/tools/device/"
cat >"$tmp/bin/h3rt" <<'EOF'
#!/usr/bin/env bash
case "$1 ${2:-}" in
  "--version "*) echo "h3rt stand-in" ;;
  "selftest "*) echo "selftest: 1 of 1 passed"; exit "${FAKE_SELFTEST_RC:-0}" ;;
  "bench "*)
    out=""
    while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
    [ -n "$out" ] && echo '{"stand_in": true}' >"$out"
    echo "bench ok" ;;
  *) echo "unexpected: $*"; exit 2 ;;
esac
EOF
cat >"$tmp/bin/tests/h3rt_cuda_tests" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --gtest_list_tests ] && { echo "Fake."; echo "  A"; exit 0; }
for t in A B C; do echo "[ RUN      ] Fake.$t"; echo "[       OK ] Fake.$t (0 ms)"; done
sleep "${FAKE_SUITE_S:-0}"
echo "[  PASSED  ] 3 tests."
EOF
chmod +x "$tmp/bin/h3rt" "$tmp/bin/tests/h3rt_cuda_tests"
echo stand-in >"$tmp/golden/golden/README"
tar -C "$tmp/bin" -cJf "$repo/.prebuilt/bin.tar.xz" h3rt tests/h3rt_cuda_tests
tar -C "$tmp/golden" -cJf "$repo/.prebuilt/golden.tar.xz" golden
echo 0123abc >"$repo/.prebuilt/commit"

run() { # budget, then env assignments; output in $tmp/out.txt, status in $rc
  local budget=$1
  shift
  rm -rf "$tmp/out" "$tmp/run"
  mkdir -p "$tmp/run"
  env "$@" OUT="$tmp/out" H3RT_DEVICE_TMP="$tmp/run" H3RT_BUDGET_S="$budget" \
    bash "$repo/tools/device/prebuilt_check.sh" >"$tmp/out.txt" 2>&1
  rc=$?
}
has() { grep -qF -- "$1" "$tmp/out.txt" || { cat "$tmp/out.txt"; false; }; }
archived() { tar -tzf "$tmp/out/prebuilt_check.tar.gz" | grep -qx "prebuilt-check/$1"; }

# Everything packed but the Python module: every step ok.
tar -C "$tmp/bin" -cJf "$repo/.prebuilt/cli90.tar.xz" h3rt
run 585 PATH="$PATH"
check "all ok: exit 0" test "$rc" = 0
check "selftest ok" has "selftest: ok (at "
check "sustained attention ok" has "attention_seed: ok"
check "20 steps ok" has "sample20_864x480: ok"
check "pytest named as not run" has "pytest: not run (no .prebuilt/py.tar.xz)"
check "suite ok with its count" has "gpu_suite: ok (at "
check "suite count" has ", 3 tests passed)"
check "reports archived" archived attention_864x480.json
check "summary archived" archived summary.txt

# A failing self-test fails the call; the rest still runs.
run 585 FAKE_SELFTEST_RC=3
check "failed selftest: exit 1" test "$rc" = 1
check "failed selftest named" has "selftest: FAILED, exit status 3"
check "suite still ran" has "gpu_suite: ok"

# No CLI packed, and a budget too small for the self-test's 120 s: skipped, the suite runs.
rm "$repo/.prebuilt/cli90.tar.xz"
run 60
check "skipped: exit 0" test "$rc" = 0
check "selftest skipped by the budget" has "selftest: skipped (the budget's 60 s leave"
check "targets named as not run" has "targets: not run (no .prebuilt/cli90.tar.xz)"
check "suite ran in the rest" has "gpu_suite: ok"

# A suite that outlasts the budget: TIMEOUT, with the tests that passed before it.
run 3 FAKE_SUITE_S=10
check "timeout: exit 1" test "$rc" = 1
check "suite timeout named" has "gpu_suite: TIMEOUT after"
check "tests before the timeout counted" has "3 tests passed)"
check "archive written on timeout" archived gpu_suite.log

echo "$fails failed"
exit $((fails > 0))
