#!/usr/bin/env bash
# One device call for issue 15's side-by-side peer: h3rt's int8 (W8A8 int8_convrot) block with its
# Sage attention against what ComfyUI users run for int8_convrot files today, comfy-kitchen's
# int8_convrot linear (CUDA backend) + SageAttention2 in an eager PyTorch block
# (bench/torch_block.py --gemm int8_convrot --attention sage), at the seed shape (1344x768x124,
# 37,810 rows) and at 864x480x124 (15,499 rows as h3rt counts them); plus the fp8 + Sage pair
# as a cross-check against bench/RESULTS.md. Both sides also run their block back to back for
# about H3RT_PEER_ENERGY_S seconds (default 2.5; h3rt: `bench block --sustain`, its CUDA graph;
# the peer: `torch_block.py --energy-seconds`) with NVML's energy counter around: wall ms and
# joules per block at like lengths. The H100 / H200 run these blocks at their power limit, where
# time follows energy.
# Prepare here first (all git-ignored, never committed):
#   H3RT_DEPS_LEAN=1 bash tools/device/pack_deps.sh .deps-lean   # .deps-lean/deps.tar.xz
#   bash tools/peers/pack_comfy_kitchen.sh                       # .peers/comfy_kitchen.tar.xz
#   bash tools/peers/pack_sageattention.sh                       # .peers/SageAttention.tar.xz
# Device tool: command `bash tools/device/peer_int8.sh`, carry [".deps-lean", ".peers"].
# Everything lands in $OUT/peer_int8.tar.gz (logs, JSON, summary.txt); the summary table is
# printed at the end. H3RT_BUDGET_S (default 540) skips a step that could end past it.
# Already built elsewhere in the same call (saves their build time): H3RT_CLI=path/to/h3rt (an
# sm_90a build with CUTLASS, e.g. from tools/device/build.sh or built here) and H3RT_SAGE_DIR=
# the install folder of tools/peers/build_sageattention.sh.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
R=/tmp/peer_int8
rm -rf "$R"; mkdir -p "$R"
trap 'tar -C /tmp -czf "$OUT/peer_int8.tar.gz" peer_int8' EXIT
T0=$(date +%s)
BUDGET=${H3RT_BUDGET_S:-540}
log() { echo "== $(( $(date +%s) - T0 )) s: $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv 2>&1 | tee "$R/gpu.txt"
nvcc --version | tail -1; python3 -c 'import torch, sys; print("python", sys.version.split()[0],
  "torch", torch.__version__, "cuda", torch.version.cuda)'

# deps: the lean archive (preferred), else a carried .deps
DEPS=$PWD/.deps
if [ -f .deps-lean/deps.tar.xz ]; then
  DEPS=/tmp/h3rt-deps; rm -rf "$DEPS"; mkdir -p "$DEPS"
  xz -dc .deps-lean/deps.tar.xz | tar -x -C "$DEPS" || { echo "deps unpack failed"; exit 1; }
fi
# SageAttention: a carried checkout folder, else the archive
SAGE_SRC=.peers/SageAttention
if [ ! -d "$SAGE_SRC" ] && [ -f .peers/SageAttention.tar.xz ]; then
  rm -rf /tmp/sage-src; mkdir -p /tmp/sage-src
  xz -dc .peers/SageAttention.tar.xz | tar -x -C /tmp/sage-src && SAGE_SRC=/tmp/sage-src/SageAttention
fi
SAGE_OK=0
if [ -n "${H3RT_SAGE_DIR:-}" ]; then
  ln -sfn "$(cd "$H3RT_SAGE_DIR" && pwd)" /tmp/sage-peer && SAGE_OK=1
  echo "sage: prebuilt at $H3RT_SAGE_DIR"
elif [ -d "$SAGE_SRC" ]; then
  ( MAX_JOBS=6 timeout 330 bash tools/peers/build_sageattention.sh "$SAGE_SRC" /tmp/sage-peer \
      > "$R/sage_build.log" 2>&1; echo "rc=$?" >> "$R/sage_build.log" ) &
  SAGE_PID=$!
else
  echo "no SageAttention checkout or archive under .peers: the torch peer runs without sage"
fi
log "comfy-kitchen"
timeout 60 bash tools/peers/unpack_comfy_kitchen.sh .peers/comfy_kitchen.tar.xz /tmp/ck \
  > "$R/comfy_kitchen_import.log" 2>&1; echo "comfy-kitchen import rc=$?"
cat "$R/comfy_kitchen_import.log"
if [ -n "${H3RT_CLI:-}" ]; then
  B=$H3RT_CLI
  log "h3rt_cli given: $B"
else
  log "build h3rt_cli (sm_90a)"
  t0=$(date +%s)
  H3RT_DEPS_DIR=$DEPS H3RT_TARGETS=h3rt_cli timeout 330 bash tools/device/build.sh \
    > "$R/build.log" 2>&1 || { tail -40 "$R/build.log"; cp build-device.log "$R/" 2>/dev/null; exit 1; }
  log "built in $(( $(date +%s) - t0 )) s"
  B=build-device/h3rt
fi
"$B" --version | tail -1 | tee "$R/h3rt_version.txt"
if [ -n "${SAGE_PID:-}" ]; then
  wait "$SAGE_PID"; tail -2 "$R/sage_build.log"
  grep -q '^rc=0' "$R/sage_build.log" && SAGE_OK=1
fi
log "sage built: $SAGE_OK"
export PYTHONPATH=/tmp/ck:/tmp/sage-peer${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

step() {  # name, limit in seconds, command... (skipped when it could end past the budget)
  local name=$1 limit=$2; shift 2
  if (( $(date +%s) - T0 + limit > BUDGET )); then log "$name skipped (budget)"; return; fi
  log "$name"; timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$?"; tail -3 "$R/$name.log"
}
ATT=sage; [ "$SAGE_OK" = 1 ] || ATT=sdpa
ENERGY_S=${H3RT_PEER_ENERGY_S:-2.5}
# most wanted first: the int8 pairs at both shapes, then the fp8 cross-check
for gemm in int8 fp8; do
  for shape in "seed 1344 768 124" "864x480 864 480 124"; do
    read -r tag w h f <<< "$shape"
    peer_gemm=$gemm; [ "$gemm" = int8 ] && peer_gemm=int8_convrot
    step "h3rt_${gemm}_${tag}" 75 $B bench block --gemm "$gemm" --attention sage \
      --width "$w" --height "$h" --frames "$f" --sustain "$ENERGY_S" \
      --out "$R/h3rt_${gemm}_${tag}.json"
    step "torch_${gemm}_${tag}" 120 python3 bench/torch_block.py --gemm "$peer_gemm" \
      --attention "$ATT" --width "$w" --height "$h" --frames "$f" --energy-seconds "$ENERGY_S" \
      --json "$R/torch_${gemm}_${tag}.json"
  done
done
# attribution aid, if time is left: the int8 peer with torch SwiGLU and torch Q/K norm+rope
step torch_int8_seed_eager_ops 120 python3 bench/torch_block.py --gemm int8_convrot \
  --attention "$ATT" --qk-rope torch --swiglu eager --width 1344 --height 768 --frames 124 \
  --json "$R/torch_int8_seed_eager_ops.json"

log summary
python3 - "$R" <<'PY' | tee "$R/summary.txt"
import json, os, sys
r = sys.argv[1]
def load(name):
    p = os.path.join(r, name + ".json")
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001
        return {"missing": str(e)[:80]}
print("short runs: h3rt's medians of 10 repetitions, the peer's of 5 after 2 warm-up; 'sustained': "
      "each side's block back to back for the same seconds, wall ms and joules per block")
print(f"{'pair':22s} {'rows h3rt/peer':>16s} {'ours graph ms':>13s} {'ours eager ms':>13s} "
      f"{'peer ms':>9s} {'peer/graph':>10s} {'peer/eager':>10s}")
for gemm in ("int8", "fp8"):
    for tag in ("seed", "864x480"):
        o, p = load(f"h3rt_{gemm}_{tag}"), load(f"torch_{gemm}_{tag}")
        og = o.get("block_p50_milliseconds_cuda_graph")
        oe = o.get("block_p50_milliseconds_uninstrumented")
        rows_o = o.get("workload", {}).get("packed_tokens")
        res = next(iter(p.get("results", {}).values()), {})
        pm = res.get("block_ms")
        f = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "-"
        q = lambda a, b: f"{a / b:.3f}" if isinstance(a, (int, float)) and b else "-"
        print(f"{gemm + ' ' + tag:22s} {str(rows_o) + '/' + str(p.get('seq')):>16s} {f(og):>13s} "
              f"{f(oe):>13s} {f(pm):>9s} {q(pm, og):>10s} {q(pm, oe):>10s}"
              + (f"  peer error: {res['error']}" if "error" in res else ""))
        os_ = o.get("telemetry", {}).get("sustained") or {}
        pe = res.get("energy") or {}
        oj, pj = os_.get("joules_per_block"), pe.get("joules_per_block")
        ow, pw = os_.get("wall_ms_per_block"), pe.get("wall_ms_per_block")
        if all(isinstance(v, (int, float)) and v > 0 for v in (oj, pj, ow, pw)):
            print(f"    sustained ms per block: h3rt {ow:.2f}, peer {pw:.2f}, peer/h3rt {pw / ow:.3f}; "
                  f"joules per block: h3rt {oj:.2f}, peer {pj:.2f}, peer/h3rt {pj / oj:.3f}; "
                  f"mean W h3rt {os_.get('power_w_mean') or 0:.0f}, "
                  f"peer {pe.get('power_w_mean') or 0:.0f}")
        if gemm == "int8" and "block_ms" in res:
            info = {k: res.get(k) for k in ("attention", "qk_rope", "swiglu", "comfy_kitchen",
                                            "int8_linear_backend",
                                            "qkv_rel_l2_vs_dequantized_bf16")}
            print(f"    peer: {info}")
            print(f"    peer components ms: "
                  f"{ {k: round(v, 2) for k, v in res.get('components_ms', {}).items()} }")
e = load("torch_int8_seed_eager_ops")
res = next(iter(e.get("results", {}).values()), {})
if "block_ms" in res:
    print(f"int8 seed peer with torch SwiGLU + torch Q/K norm/rope: {res['block_ms']:.2f} ms")
PY
log "done"
