#!/usr/bin/env bash
# On the GPU machine: unpack binaries built on the developer machine (sm_90a and sm_121a, the
# CI configuration) and check that they start there; exit 1 if they don't (then build with
# tools/device/build.sh). Pack them first, on the developer machine:
#   bash tools/device/prebuilt.sh --pack build   # writes .prebuilt/bin.tar.xz and golden.tar.xz
# and carry [".prebuilt"]. On the GPU machine:
#   source tools/device/prebuilt.sh && echo "$B"  # B = folder with h3rt and h3rt_cuda_tests
# It exports H3RT_SHARED_DIR to the unpacked golden data.
if [ "${1:-}" = "--pack" ]; then
  set -euo pipefail
  build=${2:-build}
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  mkdir -p "$root/.prebuilt"
  grep -qx '/.prebuilt/' "$root/.git/info/exclude" 2>/dev/null ||
    echo '/.prebuilt/' >>"$(git -C "$root" rev-parse --git-common-dir)/info/exclude"
  tar -C "$root/$build" -cf - h3rt tests/h3rt_cuda_tests | xz -T2 -6 >"$root/.prebuilt/bin.tar.xz"
  tar -C "$root/../shared" -cf - golden | xz -T2 -6 >"$root/.prebuilt/golden.tar.xz"
  git -C "$root" rev-parse HEAD >"$root/.prebuilt/commit"
  du -sh "$root/.prebuilt"/*
  exit 0
fi
B=/tmp/h3rt-prebuilt
mkdir -p "$B" /tmp/h3rt-shared
tar -C "$B" -xJf .prebuilt/bin.tar.xz && tar -C /tmp/h3rt-shared -xJf .prebuilt/golden.tar.xz
export H3RT_SHARED_DIR=/tmp/h3rt-shared
mv "$B/tests/h3rt_cuda_tests" "$B/" 2>/dev/null
echo "prebuilt: $(cat .prebuilt/commit 2>/dev/null) $("$B/h3rt" --version 2>&1 | head -1)"
"$B/h3rt_cuda_tests" --gtest_list_tests >/dev/null 2>&1 || { echo "prebuilt: binaries do not start" >&2; return 1 2>/dev/null || exit 1; }
