// The CUTLASS mma.sync path of int8_linear_cuda (int8_linear.h): CUTLASS 4.2's 2.x-API
// tensor-op GEMM (Sm80 instructions: cp.async multistage mainloop, ldmatrix, mma.sync
// m16n8k32 s8 x s8 -> s32) with the exact two-scale epilogue as an Sm80 EVT, so the int32
// accumulators never reach memory. It is meant as the int8 path of consumer Blackwell (sm_120 /
// sm_121, GB10), which has no wgmma and for which CUTLASS 4.2's sm120 builders take only
// fp8/fp6/fp4: there the cuBLASLt path would write and re-read int32 staging at 273 GB/s
// (about +58% on a block's int8 GEMMs by the byte count, bench/RESULTS.md). The same code runs
// on any sm_80+ GPU the binary has code for, which is how it is tested on Hopper (bit-exact on
// every GEMM case, H100, 2026-12-05). kAuto's path on compute capability 12.x (int8_linear.cu);
// H3RT_INT8_GEMM=cutlass_sm80 selects it elsewhere.
//
// Tile: 128x256x64, eight 64x64 warps, 3 stages (72 KB of shared memory, within sm_120's
// 99 KB): CUTLASS's default Sm80 int8 configuration. GemmIdentityThreadblockSwizzle<8> for L2
// reuse. The tile changes which CTA computes an output, never its value (exact int32 sums,
// elementwise epilogue).
//
// The epilogue evaluates, node by node (VisitorCompute converts its inputs to f32, applies one
// op and converts to its output type with round-to-nearest-even: nothing to contract),
//   y = bf16( f32(bf16( f32(acc) * (x_scale[m] * w_scale[n]) )) + f32(bias[n]) )
// exactly h3rt::int8_linear's rule; a null bias reads -0.0 (x + -0.0 == x bit for bit).
// Requirements (cutlass_sm80_supports): in % 16, x_row_stride % 16, out % 8, y_row_stride % 8,
// 16-byte aligned x, w, y, w_scale and bias (the row broadcasts load 16-byte vectors and guard
// only their first column), rows and out below 2^31. No workspace (no split-K).
// Compiled only with H3RT_HAVE_CUTLASS.
#include <cstdint>

#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear_paths.h"

#ifdef H3RT_HAVE_CUTLASS
#include "ops/int8_linear/gemm_cutlass_sm80_kernel.cuh"
#endif

namespace h3rt::ops::int8_detail {

bool cutlass_sm80_compiled() {
#ifdef H3RT_HAVE_CUTLASS
  return true;
#else
  return false;
#endif
}

// Beyond the shared rules, the row broadcasts (w_scale, bias) load 16-byte vectors.
bool cutlass_sm80_supports(const Int8LinearCudaParams& p) {
  return cutlass_operands_supported(p) && p.out % 8 == 0 && cuda::aligned16(p.w_scale) &&
         cuda::aligned16(p.bias);
}

cudaError_t int8_linear_cutlass_sm80(const Int8LinearCudaParams& p, cudaStream_t stream) {
#ifdef H3RT_HAVE_CUTLASS
  using Gemm = cutlass_sm80::Sm80Int8Gemm::Gemm;
  const Gemm::Arguments args = cutlass_sm80::arguments(p);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess)
    return cudaErrorInvalidValue;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
  return H3RT_LAUNCH_CHECK("int8 linear (CUTLASS mma.sync 128x256)");
#else
  (void)p;
  (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace h3rt::ops::int8_detail
