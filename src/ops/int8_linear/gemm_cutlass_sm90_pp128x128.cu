// CUTLASS sm_90a int8 GEMM of int8_linear_cuda, ping-pong 128x128x128 tiles, cluster 2x1 (see
// gemm_cutlass_sm90_kernel.cuh for the epilogue and int8_linear_paths.h for the family).
// Why this kernel: in the cooperative kernels both consumer warp groups work on one tile and
// then run its epilogue together, so the tensor cores idle during every epilogue (only the TMA
// producer keeps prefetching). Here each consumer warp group owns a whole 128x128 tile and the
// two alternate: one runs its mainloop while the other runs the epilogue of its previous tile
// (ordered barriers hand the tensor cores over). Our EVT epilogue is heavier than a plain store
// (three broadcast loads, three f32 ops and two bf16 roundings per output), which is what the
// overlap hides. It is the configuration PyTorch's row-wise scaled fp8 GEMM
// (aten RowwiseScaledMM.cu) and FBGEMM's f8f8bf16_rowwise pick for large M, N, K, with the
// same kind of EVT epilogue (per-row x per-column scales, bias). Cluster 2x1 multicasts the W
// tile. 128 accumulator registers per consumer thread, as in the cooperative kernels; 32 KB per
// pipeline stage, so more stages fit.
#include "ops/int8_linear/int8_linear_paths.h"

#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
#include "ops/int8_linear/gemm_cutlass_sm90_kernel.cuh"
#endif

namespace h3rt::ops::int8_detail {

cudaError_t int8_linear_cutlass_sm90_pp128x128(const Int8LinearCudaParams& p, CutlassSchedule s,
                                               cudaStream_t stream) {
#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
  using namespace cute;
  using G = cutlass_sm90::Int8Gemm<Shape<_128, _128, _128>, Shape<_2, _1, _1>,
                                   cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                   cutlass::epilogue::TmaWarpSpecialized>;
  return cutlass_sm90::run<G>(p, s, stream, "int8 linear (CUTLASS sm90 ping-pong 128x128)");
#else
  (void)p;
  (void)s;
  (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace h3rt::ops::int8_detail
