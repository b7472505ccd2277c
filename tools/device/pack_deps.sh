#!/usr/bin/env bash
# Fills .deps/ (git-ignored) with what the GPU machine lacks and a build needs: header-only
# libraries, GoogleTest's source, CUTLASS headers from the nvidia-cutlass wheel, and a copy of
# ../shared/golden for the GPU tests. Pass `.deps` in the device tool's `carry` list and build
# there with -DH3RT_SHARED_DIR=$PWD/.deps/shared.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=.deps
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
rm -rf "$deps/shared/golden" && cp -r ../shared/golden "$deps/shared/golden"
du -sh "$deps"
