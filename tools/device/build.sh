#!/usr/bin/env bash
# On the GPU machine: configure and build for sm_90a with the carried .deps, then run whatever
# arguments follow inside the build folder (e.g. `ctest --output-on-failure -R Cuda`).
# Usage (device tool, carry [".deps"]): bash tools/device/build.sh [command ...]
# H3RT_DEPS_DIR=<folder> builds with deps carried elsewhere (e.g. the unpacked lean deps of
# H3RT_DEPS_LEAN=1 tools/device/pack_deps.sh); the golden data is then looked for in
# <folder>/shared unless H3RT_SHARED_DIR names another folder.
set -eo pipefail
cd "$(dirname "$0")/../.."
deps=${H3RT_DEPS_DIR:-$PWD/.deps}
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build-device "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DH3RT_CUDA=ON \
  -DH3RT_CUDA_ARCHS="${H3RT_CUDA_ARCHS:-90a}" -DH3RT_SHARED_DIR="${H3RT_SHARED_DIR:-$deps/shared}" \
  -DH3RT_DEPS_DIR="$deps" > build-device.log 2>&1 || { cat build-device.log; exit 1; }
cmake --build build-device -j "$(nproc)" ${H3RT_TARGETS:+--target $H3RT_TARGETS} 2>&1 | grep -E "error|warning|Error" | head -60 || true
cmake --build build-device -j "$(nproc)" ${H3RT_TARGETS:+--target $H3RT_TARGETS} > /dev/null
if [ $# -gt 0 ]; then cd build-device && "$@"; fi
