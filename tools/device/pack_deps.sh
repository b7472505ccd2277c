#!/usr/bin/env bash
# Fills .deps/ (git-ignored) with what the GPU machine lacks and a build needs: header-only
# libraries, GoogleTest's source, CUTLASS headers from the nvidia-cutlass wheel, and a copy of
# ../shared/golden for the GPU tests. Pass `.deps` in the device tool's `carry` list and build
# there with -DH3RT_SHARED_DIR=$PWD/.deps/shared.
# Lean form, for calls that build h3rt but run no golden tests (e.g. tools/device/peer_int8.sh):
#   H3RT_DEPS_LEAN=1 bash tools/device/pack_deps.sh .deps-lean
# writes .deps-lean/deps.tar.xz (about 1.6 MB instead of about 60 MB: headers, GoogleTest and
# CUTLASS, no golden data); unpack it there and build with H3RT_DEPS_DIR=<that folder>.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=.deps
if [ -n "${H3RT_DEPS_LEAN:-}" ]; then
  lean_out=${1:-.deps-lean}
  deps=$(mktemp -d)
  trap 'rm -rf "$deps"' EXIT
  # reuse the CUTLASS headers of an existing .deps instead of downloading the wheel again
  [ -f .deps/cutlass/include/cutlass/cutlass.h ] && cp -r .deps/cutlass "$deps/cutlass"
fi
mkdir -p "$deps/include" "$deps/shared"
cp -r /usr/include/nlohmann "$deps/include/"
cp -r /usr/include/CLI "$deps/include/"
rm -rf "$deps/googletest" && cp -r /usr/src/googletest "$deps/googletest"
H3RT_CUTLASS_REQUIRED=1 bash tools/install_cutlass.sh "$deps/cutlass"
if [ -n "${H3RT_DEPS_LEAN:-}" ]; then
  rmdir "$deps/shared"
  mkdir -p "$lean_out"
  tar -C "$deps" -cf - include googletest cutlass | xz -T2 -9 > "$lean_out/deps.tar.xz"
  echo "wrote $lean_out/deps.tar.xz ($(stat -c %s "$lean_out/deps.tar.xz") bytes)"
  exit 0
fi
rm -rf "$deps/shared/golden" && cp -r ../shared/golden "$deps/shared/golden"
du -sh "$deps"
