#!/usr/bin/env bash
# On the GPU machine: the device runs of the workflows issue (#17), on the h3 preset's synthetic
# release-shaped weights with int8 W8A8 block GEMMs at 864x480, 124 frames:
#  1. conditioning share: the same short res_multistep run plain, with a first-frame keyframe,
#     and with first + last keyframes (conditioning files made here), per-step denoiser times
#     against the packed row counts;
#  2. run-to-run stability: the 20-step res_multistep t2v run twice and the 8-step turbo-style
#     LoRA run twice (same seed), checksums compared;
#  3. (part lora20) the 20-step res_multistep run with the synthetic rank-64 LoRA, twice.
# Usage: BIN=<folder with h3rt> bash tools/device/workflow_runs.sh  (reports and logs in $OUT)
# H3RT_WF_PARTS="cond stable lora20" picks parts (default: cond stable).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$PWD/out}
BIN=${BIN:-build-device}
H="$BIN/h3rt"
W=/tmp/h3rt-wf
mkdir -p "$OUT" "$W"
PARTS=${H3RT_WF_PARTS:-cond stable}
BASE=(--preset h3 --device cuda --gemm int8 --width 864 --height 480 --frames 124
  --scheduler simple --sampler res_multistep --attention sage)
python3 - "$W" <<'PY'
import sys, numpy as np
from safetensors.numpy import save_file
w = sys.argv[1]
rng = np.random.default_rng(7)
kf = lambda: rng.standard_normal((1, 24, 1, 30, 54)).astype(np.float32)
save_file({"keyframe/0/video": kf()}, f"{w}/kf1.st", metadata={"keyframe/0/frame_index": "0"})
save_file({"keyframe/0/video": kf(), "keyframe/1/video": kf()}, f"{w}/kf2.st",
          metadata={"keyframe/0/frame_index": "0", "keyframe/1/frame_index": "123"})
PY
run() {  # name, args...
  local name=$1; shift
  timeout 240 "$H" sample "$@" --out "$W/$name.st" --report "$OUT/wf_$name.json" \
    >"$W/$name.log" 2>&1
  echo "$name rc=$? $(tail -1 "$W/$name.log")"
}
if [[ " $PARTS " == *" cond "* ]]; then
  run plain "${BASE[@]}" --steps 6
  run kf1 "${BASE[@]}" --steps 6 --conditioning "$W/kf1.st"
  run kf2 "${BASE[@]}" --steps 6 --conditioning "$W/kf2.st"
fi
if [[ " $PARTS " == *" stable "* ]]; then
  run t2v20_a "${BASE[@]}" --steps 20
  run t2v20_b "${BASE[@]}" --steps 20
  "$H" make-lora --preset h3 --rank 64 --out "$W/turbo.st" >/dev/null 2>&1
  run turbo8_a "${BASE[@]}" --steps 8 --lora "$W/turbo.st"
  run turbo8_b "${BASE[@]}" --steps 8 --lora "$W/turbo.st"
fi
if [[ " $PARTS " == *" lora20 "* ]]; then
  [ -f "$W/turbo.st" ] || "$H" make-lora --preset h3 --rank 64 --out "$W/turbo.st" >/dev/null 2>&1
  run lora20_a "${BASE[@]}" --steps 20 --lora "$W/turbo.st"
  run lora20_b "${BASE[@]}" --steps 20 --lora "$W/turbo.st"
fi
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
rep = {os.path.basename(f)[3:-5]: json.load(open(f)) for f in sorted(glob.glob(f"{out}/wf_*.json"))}
def rows(r):
    return r.get("packed_tokens"), r.get("rows", {})
def step_ms(r):  # median denoiser time of the steps after the first (graph capture)
    s = [x["denoiser"] for x in r["sampling_stage_seconds_per_step"][1:]]
    return 1e3 * statistics.median(s) if s else float("nan")
print("run        rows    denoiser ms/step (median, steps 2..)  ratio  rows ratio")
base = rep.get("plain")
for k, r in rep.items():
    n, _ = rows(r)
    ms = step_ms(r)
    ratio = ms / step_ms(base) if base else float("nan")
    rr = n / base["packed_tokens"] if base else float("nan")
    print(f"{k:10s} {n:6d}  {ms:9.1f}  {ratio:6.4f}  {rr:6.4f}")
for a, b in (("t2v20_a", "t2v20_b"), ("turbo8_a", "turbo8_b"), ("lora20_a", "lora20_b")):
    if a in rep and b in rep:
        ca, cb = rep[a]["checksums"], rep[b]["checksums"]
        print(a, b, "checksums equal:", ca == cb, json.dumps(ca))
PY
