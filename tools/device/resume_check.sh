#!/usr/bin/env bash
# On the GPU machine, after tools/device/build.sh has built build-device/h3rt: a 12-step
# res_multistep run over the simple schedule of the h3 preset (synthetic release weights) at
# 864x480x124 on the GPU, uninterrupted; then the same run killed (SIGKILL) after its first
# periodic checkpoint and resumed from it. Prints both checksums and exits 1 unless they are
# equal. Reports and logs go to $OUT (resume_whole.json, resume_resumed.json, resume_*.log).
#   H3RT_TARGETS=h3rt_cli bash tools/device/build.sh && bash tools/device/resume_check.sh
# Environment: H3RT_RESUME_ARGS (replaces the size and sampler options), H3RT_RESUME_EVERY
# (checkpoint interval, default 4).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BIN=build-device/h3rt
[ -x "$BIN" ] || { echo "resume_check: $BIN missing; build it first" >&2; exit 2; }
ARGS=${H3RT_RESUME_ARGS:---preset h3 --device cuda --width 864 --height 480 --frames 124
  --steps 12 --scheduler simple --sampler res_multistep}
EVERY=${H3RT_RESUME_EVERY:-4}
# shellcheck disable=SC2086
"$BIN" sample $ARGS --out "$OUT/resume_whole.st" --report "$OUT/resume_whole.json" \
  >"$OUT/resume_whole.log" 2>&1 || { echo "resume_check: the whole run failed" >&2; exit 1; }
ckpt="$OUT/resume_cut.st.resume"
rm -f "$ckpt"
# shellcheck disable=SC2086
"$BIN" sample $ARGS --checkpoint-every "$EVERY" --out "$OUT/resume_cut.st" \
  >"$OUT/resume_cut.log" 2>&1 &
pid=$!
while [ ! -e "$ckpt" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ -e "$ckpt" ] || { echo "resume_check: no checkpoint was written" >&2; exit 1; }
# shellcheck disable=SC2086
"$BIN" sample $ARGS --resume "$ckpt" --out "$OUT/resume_cut.st" \
  --report "$OUT/resume_resumed.json" >"$OUT/resume_resumed.log" 2>&1 ||
  { echo "resume_check: the resumed run failed" >&2; exit 1; }
sums() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps(j["checksums"]), j["sampling"]["resumed_steps"])' "$1"; }
whole=$(sums "$OUT/resume_whole.json")
resumed=$(sums "$OUT/resume_resumed.json")
echo "resume_check: whole   ${whole}"
echo "resume_check: resumed ${resumed}"
[ "${whole% *}" = "${resumed% *}" ] || { echo "resume_check: checksums differ" >&2; exit 1; }
echo "resume_check: equal"
