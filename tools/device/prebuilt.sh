#!/usr/bin/env bash
# On the GPU machine: unpack binaries built on the developer machine (sm_90a and sm_121a, the
# CI configuration) and check that they start there; exit 1 if they don't (then build with
# tools/device/build.sh). Pack them first, on the developer machine:
#   bash tools/device/prebuilt.sh --pack build   # writes .prebuilt/bin.tar.xz and golden.tar.xz
# and carry [".prebuilt"]. On the GPU machine:
#   source tools/device/prebuilt.sh && echo "$B"  # B = folder with h3rt and h3rt_cuda_tests
# It exports H3RT_SHARED_DIR to the unpacked golden data.
# The Python module for the GPU machine's python3 (3.12) too, reusing the build's library
# objects (the build is configured for 3.12 for one target, then back to its own Python):
#   bash tools/device/prebuilt.sh --pack build --python /path/to/python3.12
# packs .prebuilt/py.tar.xz; there, sourcing exports H3RT_PY and H3RT_CLI for the GPU tests:
#   PYTHONPATH=$H3RT_PY:python/tests python3 -m pytest python/tests/test_h3rt_cuda.py
# tools/device/prebuilt_check.sh runs all of the checks on them in one call.
if [ "${1:-}" = "--pack" ]; then
  set -euo pipefail
  build=${2:-build}
  py=""
  [ "${3:-}" = "--python" ] && py=${4:?--python needs the interpreter}
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  mkdir -p "$root/.prebuilt"
  grep -qx '/.prebuilt/' "$root/.git/info/exclude" 2>/dev/null ||
    echo '/.prebuilt/' >>"$(git -C "$root" rev-parse --git-common-dir)/info/exclude"
  tar -C "$root/$build" -cf - h3rt tests/h3rt_cuda_tests | xz -T2 -6 >"$root/.prebuilt/bin.tar.xz"
  tar -C "$root/../shared" -cf - golden | xz -T2 -6 >"$root/.prebuilt/golden.tar.xz"
  git -C "$root" rev-parse HEAD >"$root/.prebuilt/commit"
  rm -f "$root/.prebuilt/py.tar.xz"
  if [ -n "$py" ]; then
    own=$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$root/$build/CMakeCache.txt")
    configure() {  # FindPython keeps its first interpreter's cache: drop it to switch
      cmake -S "$root" -B "$root/$build" -U '_Python*' -U 'Python_*' -U 'nanobind_DIR' \
        -DPython_EXECUTABLE="$1" >/dev/null
    }
    configure "$py" && cmake --build "$root/$build" --target h3rt_python >/dev/null
    tag=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    tar -C "$root/$build/python" -cf - h3rt/__init__.py h3rt/__init__.pyi h3rt/py.typed \
      "h3rt/_h3rt$tag" | xz -T2 -6 >"$root/.prebuilt/py.tar.xz"
    configure "${own:-$(command -v python3)}"
  fi
  du -sh "$root/.prebuilt"/*
  exit 0
fi
# H3RT_DEVICE_TMP: where they are unpacked (default /tmp; tests/tools/prebuilt_check_test.sh).
unpack_root=${H3RT_DEVICE_TMP:-/tmp}
B=$unpack_root/h3rt-prebuilt
export H3RT_SHARED_DIR=$unpack_root/h3rt-shared
mkdir -p "$B" "$H3RT_SHARED_DIR"
tar -C "$B" -xJf .prebuilt/bin.tar.xz && tar -C "$H3RT_SHARED_DIR" -xJf .prebuilt/golden.tar.xz
mv "$B/tests/h3rt_cuda_tests" "$B/" 2>/dev/null
if [ -f .prebuilt/py.tar.xz ]; then
  export H3RT_PY=$unpack_root/h3rt-py H3RT_CLI=$B/h3rt
  mkdir -p "$H3RT_PY" && tar -C "$H3RT_PY" -xJf .prebuilt/py.tar.xz
fi
echo "prebuilt: $(cat .prebuilt/commit 2>/dev/null) $("$B/h3rt" --version 2>&1 | head -1)"
"$B/h3rt_cuda_tests" --gtest_list_tests >/dev/null 2>&1 || { echo "prebuilt: binaries do not start" >&2; return 1 2>/dev/null || exit 1; }
