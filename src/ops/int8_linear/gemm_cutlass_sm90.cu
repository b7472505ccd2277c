// The CUTLASS sm_90a path of int8_linear_cuda (int8_linear.h), original kernel: a warp-specialized
// cooperative TMA/wgmma int8 x int8 -> int32 GEMM, 256x128x128 tiles (each of the two consumer
// warp groups owns 128x128, issued as two m64n128k32 wgmma per k step), cluster 2x1 (the W tile
// multicast to both CTAs), with the exact two-scale EVT epilogue of gemm_cutlass_sm90_kernel.cuh.
// The other tile configurations live in gemm_cutlass_sm90_<config>.cu (one TU each, so that they
// compile in parallel). This TU also holds the shared availability and alignment checks.
// Compiled only with the CUTLASS headers and the CMake option H3RT_CUTLASS_SM90 ON. CUTLASS 4.2
// builds these kernels for sm_120a/121a too (TMA and epilogue code, the wgmma replaced by a
// trap; ptxas's multicast advisory there comes from them), but the dispatcher sends only
// compute capability 9.0 here: sm_12x runs the mma.sync kernel (gemm_cutlass_sm80.cu).
#include <cstdint>

#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear_paths.h"

#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
#include "ops/int8_linear/gemm_cutlass_sm90_kernel.cuh"
#endif

namespace h3rt::ops::int8_detail {

bool cutlass_sm90_compiled() {
#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
  return cuda::compiled_arch_listed("90a");
#else
  return false;
#endif
}

bool cutlass_sm90_supports(const Int8LinearCudaParams& p) {
  return cutlass_operands_supported(p);
}

cudaError_t int8_linear_cutlass_sm90(const Int8LinearCudaParams& p, CutlassSchedule s,
                                     cudaStream_t stream) {
#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
  using namespace cute;
  using G = cutlass_sm90::Int8Gemm<Shape<_256, _128, _128>, Shape<_2, _1, _1>,
                                   cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                   cutlass::epilogue::TmaWarpSpecializedCooperative>;
  return cutlass_sm90::run<G>(p, s, stream, "int8 linear (CUTLASS sm90 256x128)");
#else
  (void)p;
  (void)s;
  (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace h3rt::ops::int8_detail
