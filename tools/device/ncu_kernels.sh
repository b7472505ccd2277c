#!/usr/bin/env bash
# One device call that builds h3rt for sm_90a and profiles chosen kernels with Nsight Compute:
# per kernel the details page (throughputs, pipe utilization, stalls) and the SASS source view
# with per-instruction counts, under $OUT/ncu.tar.gz (device tool, carry [".deps"]).
#   bash tools/device/ncu_kernels.sh fused modulate   # any of: prepass (two_launch) fused
#                                                     # modulate int8
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
R=/tmp/h3rt-ncu
rm -rf "$R"; mkdir -p "$R" "$OUT"
trap 'tar -C /tmp -czf "$OUT/ncu.tar.gz" h3rt-ncu' EXIT
H3RT_TARGETS=h3rt_cli bash tools/device/build.sh > "$R/build.log" 2>&1 || { tail -40 "$R/build.log"; exit 1; }
B=build-device/h3rt
profile() {  # name, kernel regex, launches to skip, command...
  local name=$1 regex=$2 skip=$3; shift 3
  echo "== $(date +%T) ncu $name"
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$regex" --launch-skip "$skip" --launch-count 1 \
    --set full --import-source yes -o "$R/$name" "$@" > "$R/$name.run.log" 2>&1
  echo "rc=$?"; tail -2 "$R/$name.run.log"
  ncu --import "$R/$name.ncu-rep" --page details > "$R/$name.details.txt" 2>&1
  ncu --import "$R/$name.ncu-rep" --page source --csv --print-source sass > "$R/$name.sass.csv" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Executed Ipc A" \
    "$R/$name.details.txt" | head -12
}
for what in "$@"; do
  case $what in
    prepass)
      profile prepass_stats "attention_sage::.*stats_kernel" 1 $B bench attention --kernels wgmma_pp3 --prepass two_launch --warmup 1 --iters 1
      profile prepass_quant "attention_sage::.*quantize_kernel" 1 $B bench attention --kernels wgmma_pp3 --prepass two_launch --warmup 1 --iters 1 ;;
    fused)
      profile prepass_fused "attention_sage::.*fused_kernel" 1 $B bench attention --kernels wgmma_pp3 --prepass fused_l2 --warmup 1 --iters 1 ;;
    modulate)
      profile modulate "ring_kernel<.*\\(int\\)4, \\(bool\\)0, \\(int\\)4>" 0 $B bench kernels --no-gemm --no-attention --warmup 1 --iters 1 ;;
    int8)  # the standalone team quantizer on the fc2 input, and the fused int8 producers (864x480)
      local_shape=(--gemm int8 --attention sage --width 864 --height 480 --frames 124 --reps 1)
      profile int8_team_fc2 "quantize_team_kernel" 3 env H3RT_INT8_FUSE=0 $B bench block "${local_shape[@]}"
      profile int8_swiglu "swiglu_int8_kernel" 0 $B bench block "${local_shape[@]}"
      profile int8_norm "rmsnorm_modulate_kernel<.*256>" 0 $B bench block "${local_shape[@]}" ;;
    *) echo "unknown: $what" ;;
  esac
done
