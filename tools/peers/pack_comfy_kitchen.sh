#!/usr/bin/env bash
# Packs comfy-kitchen (Comfy-Org's kernel library, the int8_convrot linear that ComfyUI runs) for
# the GPU machine, which has no network: downloads the cp312 manylinux wheel from PyPI here and
# writes .peers/comfy_kitchen.tar.xz (git-ignored; never committed) holding only what a CUDA
# PyTorch needs: the package's Python files, the CUDA extension
# comfy_kitchen/backends/cuda/_C.abi3.so and the dist-info (license, version). The wheel's
# 158 MB ROCm extension (backends/hip/_C.abi3.so), loaded only under a ROCm PyTorch, is left out.
# The CUDA extension needs only glibc/libstdc++ and the driver (libcuda), and loads cuBLASLt 13
# at run time (from PyTorch's nvidia-cublas wheel there).
# On the GPU machine: tools/peers/unpack_comfy_kitchen.sh (or tools/device/peer_int8.sh).
# Usage: bash tools/peers/pack_comfy_kitchen.sh [version]   (default 0.2.40)
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=${1:-0.2.40}
out=.peers/comfy_kitchen.tar.xz
mkdir -p .peers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The device's python3 is CPython 3.12 on x86-64 (the wheel is abi3, cp312+).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp/whl" "comfy-kitchen==$ver"
whl=$(ls "$tmp"/whl/comfy_kitchen-"$ver"-*.whl)
echo "wheel: $(basename "$whl") ($(stat -c %s "$whl") bytes)"
unzip -p "$whl" '*.dist-info/METADATA' | grep -E '^(Requires-Python|Requires-Dist)' | sed 's/^/  /'
mkdir -p "$tmp/pkg"
python3 - "$whl" "$tmp/pkg" <<'PY'
import os, sys, zipfile
whl, dst = sys.argv[1], sys.argv[2]
kept = skipped = 0
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.endswith("/"):
            continue
        keep = (n.endswith(".py") or ".dist-info/" in n
                or n == "comfy_kitchen/backends/cuda/_C.abi3.so"
                or n == "comfy_kitchen/backends/hip/architectures.json")
        if not keep:
            skipped += 1
            print("  left out:", n, z.getinfo(n).file_size, "bytes")
            continue
        p = os.path.join(dst, n)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(z.read(n))
        kept += 1
print(f"  kept {kept} files")
PY
so=$tmp/pkg/comfy_kitchen/backends/cuda/_C.abi3.so
if command -v readelf >/dev/null; then
  echo "  _C.abi3.so needs: $(readelf -d "$so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
fi
echo "comfy-kitchen==$ver $(basename "$whl")" > "$tmp/pkg/COMFY_KITCHEN_VERSION"
tar -C "$tmp/pkg" -cf - . | xz -T2 -9 > "$out.part"
mv "$out.part" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)"
