#!/usr/bin/env bash
# One device call that profiles chosen kernels with Nsight Compute: per kernel the details page
# (throughputs, pipe utilization, stalls), the SASS source view with per-instruction counts and
# its summary (tools/device/ncu_stalls.py: where the warps stall, by instruction and by opcode),
# under $OUT/ncu.tar.gz, with the summaries also in $OUT/stalls.txt. Builds through
# tools/device/lib.sh (carry [".deps-lean", ".prebuilt"]; H3RT_PREBUILT=1 and carry
# [".prebuilt"]: the binaries built here, no device build).
#   bash tools/device/ncu_kernels.sh fused modulate   # any of: prepass (two_launch) fused
#                                                     # modulate int8 sage
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source tools/device/lib.sh
R=/tmp/h3rt-ncu
rm -rf "$R"; mkdir -p "$R"
trap 'tar -C /tmp --exclude="*.ncu-rep" -czf "$OUT/ncu.tar.gz" h3rt-ncu' EXIT
start_call > "$R/build.log" 2>&1 || { tail -40 "$R/build.log"; exit 1; }
H=$B/h3rt
profile() {  # name, kernel regex, launches to skip, command...
  local name=$1 regex=$2 skip=$3; shift 3
  echo "== $(date +%T) ncu $name"
  timeout 240 ncu --clock-control none --kernel-name-base demangled -k "regex:$regex" \
    --launch-skip "$skip" --launch-count 1 --set full --import-source yes -o "$R/$name" "$@" \
    > "$R/$name.run.log" 2>&1
  echo "rc=$?"; tail -2 "$R/$name.run.log"
  ncu --import "$R/$name.ncu-rep" --page details > "$R/$name.details.txt" 2>&1
  ncu --import "$R/$name.ncu-rep" --page source --csv --print-source sass > "$R/$name.sass.csv" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Executed Ipc A|Eligible Warps" \
    "$R/$name.details.txt" | head -12
  { echo "== $name"; python3 tools/device/ncu_stalls.py "$R/$name.sass.csv"; } | tee -a "$OUT/stalls.txt"
}
for what in "$@"; do
  case $what in
    prepass)
      profile prepass_stats "attention_sage::.*stats_kernel" 1 $H bench attention --kernels wgmma_pp3 --prepass two_launch --warmup 1 --iters 1
      profile prepass_quant "attention_sage::.*quantize_kernel" 1 $H bench attention --kernels wgmma_pp3 --prepass two_launch --warmup 1 --iters 1 ;;
    fused)
      profile prepass_fused "attention_sage::.*fused_kernel" 1 $H bench attention --kernels wgmma_pp3 --prepass fused_l2 --warmup 1 --iters 1 ;;
    modulate)
      profile modulate "ring_kernel<.*\\(int\\)4, \\(bool\\)0, \\(int\\)4>" 0 $H bench kernels --no-gemm --no-attention --warmup 1 --iters 1 ;;
    sage)  # the dense wgmma kernel at the seed shape
      profile sage "sage_wgmma_kernel" 1 $H bench attention --kernels wgmma_pp3 --prepass fused_l2 --warmup 1 --iters 1 ;;
    int8)  # the standalone team quantizer (the out input), and the fused int8 producers (864x480)
      local_shape=(--gemm int8 --attention sage --width 864 --height 480 --frames 124 --reps 1)
      profile int8_team_out "quantize_team_kernel" 4 $H bench block "${local_shape[@]}"
      profile int8_swiglu "swiglu_int8_table_kernel" 0 $H bench block "${local_shape[@]}"
      profile int8_norm "rmsnorm_modulate_kernel<.*256>" 0 $H bench block "${local_shape[@]}" ;;
    *) echo "unknown: $what" ;;
  esac
done
