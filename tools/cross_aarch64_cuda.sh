#!/usr/bin/env bash
# Compiles the CUDA build for an aarch64 host (the GB10's CPU) with sm_121a device code: every
# .cu file through nvcc with Debian's aarch64 cross g++ as its host compiler, and every C++ file
# with CUDA-only sections through the cross g++ (tools/cross_compile_commands.py), from the
# compile commands of an x86-64 CUDA configuration (configured, not built; with the CUTLASS
# headers when tools/install_cutlass.sh has them). Objects only: the toolkit here targets
# x86-64, so nothing links, and its headers (target-independent) stand in for the aarch64
# toolkit's. H3RT_CUTLASS_DIR names CUTLASS headers elsewhere. What it checks: the host side of
# the CUDA code compiles for ARM (the CPU side runs under qemu in tools/cross_aarch64.sh).
# Usage: tools/cross_aarch64_cuda.sh [BUILD_DIR]   (default build-aarch64-cuda; ~15 min on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-aarch64-cuda}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "cross_aarch64_cuda: no CUDA compiler (nvcc) found" >&2; exit 1; }
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
"$root/tools/install_deps.sh" "${need[@]}"
[ -n "${H3RT_CUTLASS_DIR:-}" ] || "$root/tools/install_cutlass.sh"
cmake -S "$root" -B "$build/x86" -DCMAKE_CUDA_COMPILER="$nvcc" -DH3RT_CUDA=ON \
  -DH3RT_CUDA_ARCHS=121a -DH3RT_PYTHON=OFF ${H3RT_CUTLASS_DIR:+-DH3RT_CUTLASS_DIR="$H3RT_CUTLASS_DIR"} \
  >/dev/null
python3 "$root/tools/cross_compile_commands.py" "$build/x86/compile_commands.json" "$build/obj"
