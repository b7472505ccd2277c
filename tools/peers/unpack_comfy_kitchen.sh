#!/usr/bin/env bash
# On the GPU machine: unpacks .peers/comfy_kitchen.tar.xz (made here by pack_comfy_kitchen.sh)
# into ${2:-/tmp/ck} and checks that it imports with the CUDA backend. Then:
#   export PYTHONPATH=/tmp/ck${PYTHONPATH:+:$PYTHONPATH}
# Usage: bash tools/peers/unpack_comfy_kitchen.sh [.peers/comfy_kitchen.tar.xz] [/tmp/ck]
set -euo pipefail
src=${1:-.peers/comfy_kitchen.tar.xz}
dst=${2:-/tmp/ck}
rm -rf "$dst"; mkdir -p "$dst"
xz -dc "$src" | tar -x -C "$dst"
cat "$dst/COMFY_KITCHEN_VERSION"
PYTHONPATH="$dst${PYTHONPATH:+:$PYTHONPATH}" python3 - <<'PY'
import torch
import comfy_kitchen as ck
from comfy_kitchen.backends import cuda as ckc
print("comfy_kitchen", ck.__file__, "| torch", torch.__version__, "cuda", torch.version.cuda)
print("cuda extension loaded:", ckc._EXT_AVAILABLE, ckc._EXT_ERROR or "", "| cuBLASLt:",
      ckc._CUBLASLT_AVAILABLE)
print("backends:", ck.list_backends())
if not ckc._EXT_AVAILABLE:
    raise SystemExit("comfy_kitchen's CUDA extension did not load")
PY
