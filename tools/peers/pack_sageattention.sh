#!/usr/bin/env bash
# Packs what tools/peers/build_sageattention.sh needs from a SageAttention checkout (never
# committed here) into one archive for the GPU machine: the sageattention package, csrc/, setup.py,
# pyproject.toml, LICENSE and README (about 50 KB xz against about 1 MB of folder; the Blackwell
# SageAttention3 sources, examples and benchmarks are left out).
# Get the checkout first (search tool: fetch github:thu-ml/SageAttention), e.g.
#   mkdir -p .peers/SageAttention && git --git-dir=<mirror> archive HEAD -- . ':!assets' \
#     ':!example/videos' | tar -x -C .peers/SageAttention
# Usage: bash tools/peers/pack_sageattention.sh [.peers/SageAttention] [.peers/SageAttention.tar.xz]
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-.peers/SageAttention}
out=${2:-.peers/SageAttention.tar.xz}
for f in sageattention csrc setup.py; do
  [ -e "$src/$f" ] || { echo "$src/$f is missing: not a SageAttention checkout" >&2; exit 1; }
done
parts=(sageattention csrc setup.py)
for f in pyproject.toml LICENSE README.md .commit; do [ -e "$src/$f" ] && parts+=("$f"); done
tar -C "$(dirname "$src")" -cf - "${parts[@]/#/$(basename "$src")/}" | xz -9 > "$out.part"
mv "$out.part" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes; folder $(du -sb "$src" | cut -f1) bytes)"
