// The CUTLASS sm_90a path of int8_linear_cuda (int8_linear.h): a warp-specialized cooperative
// TMA/wgmma int8 x int8 -> int32 GEMM (256x128x128 tiles, cluster 2x1: one instantiation, as a
// CUTLASS TU costs about a minute to compile) with an EVT epilogue that evaluates
//   out = bf16( f32(bf16( f32(acc) * (x_scale[m] * w_scale[n]) )) + f32(bias[n]) )
// node by node: every node is one f32 operation followed by a conversion (Sm90Compute converts
// its inputs to f32, applies the op, converts to its output type with round-to-nearest-even), so
// there is no multiply-add for the compiler to contract and the roundings are exactly those of
// h3rt::int8_linear. Without a bias the bias node reads its null default, -0.0, and x + (-0.0)
// is x bit for bit (also for x = -0.0), so one kernel serves both cases.
// Compiled only with H3RT_HAVE_CUTLASS; CUTLASS's sm90 kernels are empty stubs for other archs
// (the dispatcher sends only compute capability 9.0 here).
#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear_paths.h"

#ifdef H3RT_HAVE_CUTLASS
#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/kernel_hardware_info.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#endif

namespace h3rt::ops::int8_detail {

#ifdef H3RT_HAVE_CUTLASS
namespace {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

using Bf16 = cutlass::bfloat16_t;
using TileShape = Shape<_256, _128, _128>;
using ClusterShape = Shape<_2, _1, _1>;
constexpr auto kRn = cutlass::FloatRoundStyle::round_to_nearest;
constexpr int kAlignAB = 16;  // int8 elements: 16 bytes for TMA
constexpr int kAlignD = 8;    // bf16

// Scalar (alignment 1) broadcast loads: any out, any scale/bias pointer alignment.
using XScale = fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<_1, _0, int64_t>, 1>;
using WScale = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>, 1>;
using Bias = fusion::Sm90RowBroadcast<0, TileShape, Bf16, float, Stride<_0, _1, int64_t>, 1>;
using ScaleProduct =
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRn>, XScale, WScale>;
using Scaled = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, Bf16, float, kRn>,
                               fusion::Sm90AccFetch, ScaleProduct>;
using Output = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, Bf16, float, kRn>, Scaled, Bias>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, void,
    cutlass::layout::RowMajor, kAlignD, Bf16, cutlass::layout::RowMajor, kAlignD,
    cutlass::epilogue::TmaWarpSpecializedCooperative, Output>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor,
    kAlignAB, int8_t, cutlass::layout::ColumnMajor, kAlignAB, int32_t, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

typename Gemm::Arguments arguments(const Int8LinearCudaParams& p) {
  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideD = typename Kernel::StrideD;
  StrideA sa{};
  cute::get<0>(sa) = p.x_row_stride;
  StrideB sb{};
  cute::get<0>(sb) = p.in;
  StrideD sd{};
  cute::get<0>(sd) = p.y_row_stride;

  typename Output::Arguments evt{
      {                                                     // Scaled
       {},                                                  //   acc
       {{p.x_scale, 0.0f, {}}, {p.w_scale, 0.0f, {}}, {}},  //   x_scale * w_scale
       {}},
      {reinterpret_cast<const Bf16*>(p.bias), Bf16(-0.0f), {}},  // bias (null: -0.0)
      {}};
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {static_cast<int>(p.rows), static_cast<int>(p.out), static_cast<int>(p.in), 1},
      {p.x, sa, p.w, sb},
      {evt, nullptr, sd, reinterpret_cast<Bf16*>(p.y), sd}};
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  return args;
}

}  // namespace
#endif  // H3RT_HAVE_CUTLASS

bool cutlass_sm90_compiled() {
#ifdef H3RT_HAVE_CUTLASS
  return cuda::compiled_arch_listed("90a");
#else
  return false;
#endif
}

bool cutlass_sm90_supports(const Int8LinearCudaParams& p) {
  auto aligned16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  return p.in % 16 == 0 && p.x_row_stride % 16 == 0 && p.y_row_stride % 8 == 0 && aligned16(p.x) &&
         aligned16(p.w) && aligned16(p.y) && p.rows < (int64_t(1) << 31) &&
         p.out < (int64_t(1) << 31);
}

cudaError_t int8_linear_cutlass_sm90(const Int8LinearCudaParams& p, cudaStream_t stream) {
#ifdef H3RT_HAVE_CUTLASS
  const typename Gemm::Arguments args = arguments(p);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  const size_t need = Gemm::get_workspace_size(args);
  H3RT_CHECK(need <= p.workspace_bytes && (need == 0 || p.workspace),
             "int8_linear_cuda (CUTLASS): needs ", need, " workspace bytes, got ",
             p.workspace_bytes);
  const cutlass::Status st = gemm.initialize(args, p.workspace, stream);
  if (st != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
  return H3RT_LAUNCH_CHECK("int8 linear (CUTLASS sm90)");
#else
  (void)p;
  (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace h3rt::ops::int8_detail
