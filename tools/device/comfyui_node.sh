#!/usr/bin/env bash
# One device call for issue 16: the ComfyUI node inside ComfyUI's real H3 model code
# (tools/comfyui_real/run_node.py). The tiny golden check on the CPU, then one forward at the
# H3 release config (random bf16 weights made on the GPU) at 864x480 and 1344x768, 124 frames,
# timed three ways: ComfyUI's eager forward, the node's h3rt path, h3rt's forward directly.
# Prepare here first (all git-ignored, never committed):
#   cp -r <folder with ComfyUI's files> .comfy     # comfy/ldm/minimax/model.py, ... (run_node.py)
#   bash tools/peers/pack_comfy_kitchen.sh         # .peers/comfy_kitchen.tar.xz (ComfyUI's kernels)
#   H3RT_DEPS_LEAN=1 bash tools/device/pack_deps.sh .deps-lean   # unless build-device/python exists
# Device tool: command `bash tools/device/comfyui_node.sh`, carry [".comfy", ".peers", ".deps-lean"].
# H3RT_PYTHONPATH: an h3rt Python package already built there (default: build it here, target
# h3rt_python, sm_90a). COMFYUI_SIZES (default "864x480 1344x768"), H3RT_BUDGET_S (default 420:
# ComfyUI's eager forward is skipped for shapes reached after it). Results: $OUT/comfyui_*.json
# and the printed tables.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
T0=$(date +%s)
log() { echo "== $(( $(date +%s) - T0 )) s: $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'

log "comfy-kitchen"
timeout 60 bash tools/peers/unpack_comfy_kitchen.sh .peers/comfy_kitchen.tar.xz /tmp/ck 2>&1 | tail -3
PYPKG=${H3RT_PYTHONPATH:-$PWD/build-device/python}
if [ ! -f "$PYPKG/h3rt/__init__.py" ]; then
  log "build h3rt_python (sm_90a)"
  DEPS=$PWD/.deps
  if [ -f .deps-lean/deps.tar.xz ]; then
    DEPS=/tmp/h3rt-deps; rm -rf "$DEPS"; mkdir -p "$DEPS"
    xz -dc .deps-lean/deps.tar.xz | tar -x -C "$DEPS" || { echo "deps unpack failed"; exit 1; }
  fi
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B build-device "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DH3RT_CUDA=ON \
    -DH3RT_CUDA_ARCHS=90a -DH3RT_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" \
    -DH3RT_SHARED_DIR="$DEPS/shared" -DH3RT_DEPS_DIR="$DEPS" > "$OUT/comfyui_build.log" 2>&1 &&
    timeout 400 cmake --build build-device -j "$(nproc)" --target h3rt_python \
      >> "$OUT/comfyui_build.log" 2>&1 || { tail -30 "$OUT/comfyui_build.log"; exit 1; }
  PYPKG=$PWD/build-device/python
  log "built"
fi
export PYTHONPATH=/tmp/ck:$PYPKG PYTHONUNBUFFERED=1
RUN=tools/comfyui_real/run_node.py
rc=0
if [ -d "${H3RT_SHARED_DIR:-/tmp/h3rt-deps/shared}/golden/h3_tiny_comfy" ]; then
  log "tiny golden model, CPU, node vs ComfyUI"
  H3RT_SHARED_DIR=${H3RT_SHARED_DIR:-/tmp/h3rt-deps/shared} timeout 120 python3 "$RUN" \
    --comfy .comfy --json "$OUT/comfyui_tiny.json" 2>&1 | grep -v "^  comfy\." | tail -24
  rc=${PIPESTATUS[0]}
else
  echo "no golden data on this machine: the tiny check is skipped (it runs on the CPU machine)"
fi
left=$(( 590 - ($(date +%s) - T0) ))
if (( left < 240 )); then
  echo "only $left s left in this call after the build: run the same command again (the build"
  echo "in build-device is kept on a warm machine) for the timing"
  exit "$rc"
fi
sizes=()
for s in ${COMFYUI_SIZES:-864x480 1344x768}; do sizes+=(--size "$s"); done
log "H3 release config, random bf16 weights on the GPU: ${sizes[*]}"
timeout "$left" python3 "$RUN" --comfy .comfy --device cuda \
  "${sizes[@]}" --frames 124 --budget-s "${H3RT_BUDGET_S:-420}" \
  --json "$OUT/comfyui_node_h200.json" 2>&1 | grep -v "^  comfy\."
rc2=${PIPESTATUS[0]}
log "done (tiny rc=$rc, timing rc=$rc2)"
exit $(( rc || rc2 ))
