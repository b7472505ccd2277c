#!/usr/bin/env bash
# One device call: swiglu's silu table in its two forms (src/ops/swiglu/silu_table.h: the whole
# 128 KB table, Hopper's default, and the compact 8 KB one that sm_120 / sm_121 load), checked bit
# for bit and timed side by side in the int8 block (H3RT_SWIGLU_TABLE=auto|compact). Prepare here
# (git-ignored):
#   H3RT_DEPS_LEAN=1 bash tools/device/pack_deps.sh .deps-lean
#   mkdir -p .prebuilt && tar -C ../shared -cJf .prebuilt/golden.tar.xz golden
# Device tool: `bash tools/device/swiglu_table_forms.sh`, carry [".deps-lean", ".prebuilt"].
# It builds with tools/device/build.sh (about 90 s), then runs:
#   1. tests: the swiglu and fused int8 GPU tests (the compact ones force it themselves);
#   2. the int8 block at 864x480 (auto, compact, auto, compact) and at the seed shape (auto,
#      compact, auto);
#   3. compute-sanitizer racecheck and memcheck on the fused SwiGLU and table-path tests;
#   4. Nsight Compute on one fused SwiGLU int8 launch at 864x480 (whole table): the details page
#      and the warp stall reasons (raw metrics), under $OUT/ncu/.
# Results land under $OUT (tests_*.txt, block_*.json, summary.txt, sanitize/).
# H3RT_STEPS (default "tests blocks sanitize ncu") picks the steps.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
STEPS="tests blocks sanitize ncu"
source tools/device/lib.sh
start_call || exit 1
want tests && gpu_tests 'CudaFusedOps.Swiglu*:FusedInt8.*'
block() {  # width, height, table form
  log "block int8 ${1}x${2} H3RT_SWIGLU_TABLE=$3"
  local json="$OUT/block_${1}_${3}_$(date +%s).json"
  H3RT_SWIGLU_TABLE=$3 "$B/h3rt" bench block --gemm int8 --attention sage --reps 5 \
    --width "$1" --height "$2" --frames 124 --out "$json" > "$OUT/block.log" 2>&1
  block_line "$json"
}
if want blocks; then
  for s in auto compact auto compact; do block 864 480 $s; done
  for s in auto compact auto; do block 1344 768 $s; done
fi
if want sanitize; then
  log "sanitize"
  H3RT_SANITIZE_BIN=$T H3RT_SANITIZE_TOOLS="racecheck memcheck" H3RT_SANITIZE_TIMEOUT=120 \
    OUT="$OUT/sanitize" \
    bash tools/device/sanitize.sh 'FusedInt8.Swiglu*:CudaFusedOps.SwigluTablePath*' \
    2>&1 | tail -8 | tee -a "$OUT/summary.txt"
fi
if want ncu; then
  log "ncu swiglu int8 (864x480)"
  mkdir -p "$OUT/ncu"
  timeout 150 ncu --clock-control none -k "regex:swiglu_int8_table_kernel" --launch-skip 2 \
    --launch-count 1 --set full -o /tmp/swiglu_int8 "$B/h3rt" bench block --gemm int8 \
    --attention sage --reps 1 --width 864 --height 480 --frames 124 --out /tmp/ncu_block.json \
    > "$OUT/ncu/run.log" 2>&1
  ncu --import /tmp/swiglu_int8.ncu-rep --page details --print-details all \
    > "$OUT/ncu/details.txt" 2>&1
  ncu --import /tmp/swiglu_int8.ncu-rep --page raw --csv > /tmp/raw.csv 2>&1
  python3 - /tmp/raw.csv <<'PY' > "$OUT/ncu/stalls.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, units, vals = rows[0], rows[1], rows[2]
for h, u, v in zip(head, units, vals):
    if "issue_stalled" in h and "warp_active.ratio" in h or h.startswith(("gpu__time_duration",
            "sm__warps_active", "smsp__issue_active", "l1tex__data_pipe_lsu_wavefronts_mem_shared",
            "sm__pipe_", "sm__inst_executed_pipe_")):
        print(v, h, u)
PY
  grep -E "Duration|Eligible|Issued Warp" "$OUT/ncu/details.txt" | head -6 | tee -a "$OUT/summary.txt"
  grep issue_stalled "$OUT/ncu/stalls.txt" | sort -g -r | head -8 | tee -a "$OUT/summary.txt"
fi
log "done"
