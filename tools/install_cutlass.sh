#!/usr/bin/env bash
# Installs the CUTLASS/CuTe 4.2 headers (from the nvidia-cutlass==4.2.0.0 wheel, headers only)
# into DEST/include, by default .deps/cutlass, where CMake looks for them (H3RT_CUTLASS_DIR).
# With them the build adds the CUTLASS int8 GEMMs with the scales in the epilogue (Hopper wgmma,
# and the mma.sync kernel that sm_120 / sm_121 run); without them the int8 GEMMs run cuBLASLt +
# an epilogue kernel, slower. Without DEST it does nothing where no CUDA compiler is found
# (nvcc on PATH, $CUDACXX or /usr/local/cuda/bin/nvcc).
# Usage: tools/install_cutlass.sh [DEST]. Needs pip and the network; when the download fails it
# says so and exits 0 (the build goes on without CUTLASS) unless H3RT_CUTLASS_REQUIRED=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.deps/cutlass}
if [ $# -eq 0 ] && [ "${H3RT_CUTLASS_REQUIRED:-0}" != 1 ] && ! command -v nvcc >/dev/null &&
   [ ! -x "${CUDACXX:-/usr/local/cuda/bin/nvcc}" ]; then
  echo "install_cutlass: no CUDA compiler found: CUTLASS is not needed" >&2
  exit 0
fi
if [ -f "$dest/include/cutlass/cutlass.h" ]; then
  echo "install_cutlass: headers present in $dest" >&2
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download -q --no-deps -d "$tmp" nvidia-cutlass==4.2.0.0; then
  echo "install_cutlass: could not download nvidia-cutlass==4.2.0.0: building without CUTLASS" \
       "(int8 GEMMs on cuBLASLt + an epilogue kernel)" >&2
  [ "${H3RT_CUTLASS_REQUIRED:-0}" = 1 ] && exit 1
  exit 0
fi
python3 - "$tmp"/nvidia_cutlass-*.whl "$dest" <<'PY'
import os, sys, zipfile
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
echo "install_cutlass: headers in $dest/include" >&2
