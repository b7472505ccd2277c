#!/usr/bin/env bash
# Builds the CPU library, CLI and tests for aarch64 Linux (the GB10's host CPU) with Debian's
# cross compiler and runs tests under qemu-user: the host code's portability and numerics
# (char signedness, FP contraction) on ARM. CUDA is left out (this toolkit targets x86-64).
# Usage: tools/cross_aarch64.sh [BUILD_DIR] [GTEST_FILTER]   (default build-aarch64, all tests;
# the whole suite takes tens of minutes under emulation). Installs g++-aarch64-linux-gnu and
# qemu-user when missing (with the build's other packages, tools/install_deps.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-aarch64}
filter=${2:-*}
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
"$root/tools/install_deps.sh" "${need[@]}"
# nlohmann-json's CMake package is the host's; the cross build takes its headers as carried ones.
deps=$build/deps
mkdir -p "$deps/include"
[ -d "$deps/include/nlohmann" ] || cp -r /usr/include/nlohmann "$deps/include/"
cmake -S "$root" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DH3RT_CUDA=OFF -DH3RT_DEPS_DIR="$deps" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target h3rt_tests h3rt_cli
# The CLI tests run the built h3rt: a wrapper runs it under qemu.
if head -c 4 "$build/h3rt" | grep -q ELF; then mv "$build/h3rt" "$build/h3rt.aarch64"; fi
printf '#!/bin/sh\nexec qemu-aarch64 -L /usr/aarch64-linux-gnu "%s/h3rt.aarch64" "$@"\n' "$build" >"$build/h3rt"
chmod +x "$build/h3rt"
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
qemu-aarch64 "$build/tests/h3rt_tests" --gtest_filter="$filter"
