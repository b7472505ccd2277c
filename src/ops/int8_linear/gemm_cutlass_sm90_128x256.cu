// CUTLASS sm_90a int8 GEMM of int8_linear_cuda, cooperative 128x256x128 tiles, cluster 2x1 (see
// gemm_cutlass_sm90_kernel.cuh for the epilogue and int8_linear_paths.h for the family).
// Why this shape: each of the two consumer warp groups owns 64x256 and issues one m64n256k32
// wgmma per k step instead of two m64n128k32 (the 256x128 kernel): the widest wgmma reads
// 2 KB of A + 8 KB of B from shared memory per 512 Ki MACs instead of 2 x (2 + 4) KB, i.e.
// about 17% less shared-memory traffic per MAC, which is what limits int8/fp8 wgmma at full
// rate. This is the tile cuBLASLt's and DeepGEMM's fp8 kernels use for large M and N (BLOCK_M
// 128 split over two math warp groups of WGMMA M 64, BLOCK_N up to 256). Cluster 2x1 (not 1x2):
// the 256-wide W tile is the larger operand, so multicasting it halves the bigger load, 32 KB of
// L2 -> SM traffic per CTA and k step instead of 40 KB with 1x2. All H3 widths (5376, 21504,
// 28672) are multiples of 256, so no N tile is partial. Same accumulator registers per thread
// (128) as the 256x128 kernel; the pipeline has the same 48 KB per stage.
#include "ops/int8_linear/int8_linear_paths.h"

#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
#include "ops/int8_linear/gemm_cutlass_sm90_kernel.cuh"
#endif

namespace h3rt::ops::int8_detail {

cudaError_t int8_linear_cutlass_sm90_128x256(const Int8LinearCudaParams& p, CutlassSchedule s,
                                             cudaStream_t stream) {
#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
  using namespace cute;
  using G = cutlass_sm90::Int8Gemm<Shape<_128, _256, _128>, Shape<_2, _1, _1>,
                                   cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                   cutlass::epilogue::TmaWarpSpecializedCooperative>;
  return cutlass_sm90::run<G>(p, s, stream, "int8 linear (CUTLASS sm90 128x256)");
#else
  (void)p;
  (void)s;
  (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace h3rt::ops::int8_detail
