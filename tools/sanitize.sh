#!/usr/bin/env bash
# The CPU tests under AddressSanitizer + UndefinedBehaviorSanitizer (any report fails the test:
# -fno-sanitize-recover, leaks included) and the CI-sized fuzz runs, in build-asan (clang,
# -DH3RT_FUZZ=ON: the same sanitized library serves both). What CI runs after the main build.
# Usage: tools/sanitize.sh [ctest -R regex]   (default: every CPU test and the fuzz runs)
# H3RT_SANITIZE_BUILD names another build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${H3RT_SANITIZE_BUILD:-build-asan}
# Line tables are all a sanitizer report needs (file:line in each frame); full debug info only
# made the build slower.
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DH3RT_CUDA=OFF -DH3RT_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DH3RT_PYTHON=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target h3rt_tests h3rt_cli fuzz_safetensors \
  fuzz_checkpoint fuzz_inputs fuzz_lora
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The install-consumer test links a plain C program against the library, and the device
# scripts' plumbing tests (label device_scripts) run shell scripts only: none is for this build.
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" \
  -E '^h3rt_install_consumer$' -LE '^device_scripts$' \
  ${1:+-R "$1"}
