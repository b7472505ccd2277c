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
if [ ! -f "$deps/cutlass/include/cutlass/cutlass.h" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps -d "$tmp" nvidia-cutlass==4.2.0.0
  python3 - "$tmp"/nvidia_cutlass-*.whl "$deps/cutlass" <<'PY'
import sys, zipfile, os
whl, dst = sys.argv[1], sys.argv[2]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(prefix) and not n.endswith("/"):
            out = os.path.join(dst, "include", n[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(z.read(n))
PY
  rm -rf "$tmp"
fi
if [ -n "${H3RT_DEPS_LEAN:-}" ]; then
  rmdir "$deps/shared"
  mkdir -p "$lean_out"
  tar -C "$deps" -cf - include googletest cutlass | xz -T2 -9 > "$lean_out/deps.tar.xz"
  echo "wrote $lean_out/deps.tar.xz ($(stat -c %s "$lean_out/deps.tar.xz") bytes)"
  exit 0
fi
rm -rf "$deps/shared/golden" && cp -r ../shared/golden "$deps/shared/golden"
du -sh "$deps"
