#!/usr/bin/env bash
# Static SASS instruction counts per element of the int8 convrot activation path's steps
# (rotate_probe.cu), for each arch given (default: 90a 121a), with this machine's nvcc: a way to
# compare device-code changes without a GPU (instructions issued, not time). Needs cuobjdump and
# nvdisasm: from PATH, the CUDA toolkit, or else the PyPI wheels nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm, downloaded once into .deps/cuobjdump (git-ignored).
# Usage: bash tools/sass/count.sh [arch ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(90a 121a)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
# cuobjdump, and the nvdisasm it calls: from PATH, the toolkit, or the PyPI wheels.
cuobjdump=$(command -v cuobjdump || true)
[ -n "$cuobjdump" ] || [ ! -x "$(dirname "$nvcc")/cuobjdump" ] || cuobjdump=$(dirname "$nvcc")/cuobjdump
have_nvdisasm=0
if command -v nvdisasm > /dev/null || { [ -n "$cuobjdump" ] && [ -x "$(dirname "$cuobjdump")/nvdisasm" ]; }; then
  have_nvdisasm=1
fi
if [ -z "$cuobjdump" ] || [ "$have_nvdisasm" = 0 ]; then
  bin=.deps/cuobjdump/nvidia/cu13/bin
  if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps -d "$tmp" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    mkdir -p .deps/cuobjdump
    for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" .deps/cuobjdump; done
    chmod +x "$bin"/*
    rm -rf "$tmp"
  fi
  cuobjdump=$bin/cuobjdump
  export PATH="$PWD/$bin:$PATH"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for a in "${archs[@]}"; do
  "$nvcc" -Isrc -Iinclude -std=c++20 --expt-relaxed-constexpr -O3 -arch="sm_$a" -cubin \
    -o "$work/probe.cubin" tools/sass/rotate_probe.cu
  "$cuobjdump" -sass "$work/probe.cubin" > "$work/probe.sass"
  echo "sm_$a ($("$nvcc" --version | tail -1 | cut -d, -f2 | xargs)):"
  python3 tools/sass/count.py "$work/probe.sass" 16
done
