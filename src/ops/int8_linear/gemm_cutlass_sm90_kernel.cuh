// The CUTLASS 4.2 sm_90a int8 x int8 -> int32 GEMM with the exact two-scale EVT epilogue, as a
// template over the tile, cluster and kernel schedule; each gemm_cutlass_sm90*.cu instantiates
// one (a CUTLASS TU costs 45-105 s to compile, so each kernel has its own TU and they build in
// parallel). Include only with H3RT_HAVE_CUTLASS.
//
// The epilogue evaluates
//   out = bf16( f32(bf16( f32(acc) * (x_scale[m] * w_scale[n]) )) + f32(bias[n]) )
// node by node: every node is one f32 operation followed by a conversion (Sm90Compute converts
// its inputs to f32, applies the op, converts to its output type with round-to-nearest-even), so
// there is no multiply-add for the compiler to contract and the roundings are exactly those of
// h3rt::int8_linear. Without a bias the bias node reads its null default, -0.0, and x + (-0.0)
// is x bit for bit (also for x = -0.0), so one kernel serves both cases. The tile shape and the
// schedule change only which CTA/warp group computes which outputs, never an output's value:
// the int32 accumulation is exact in any order and the epilogue is elementwise.
//
// Tile scheduler: the persistent sm90 scheduler. Its run-time arguments (CutlassSchedule) pick
// the raster order and the swizzle; note that CUTLASS rounds the tile counts of BOTH modes up to
// a multiple of swizzle x cluster and runs the padding tiles (zero-filled TMA loads, masked
// stores), so a swizzle that does not divide the tile counts costs compute.
#pragma once

#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/tile_scheduler_params.h>
#include <cutlass/kernel_hardware_info.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "cuda/runtime.h"
#include "ops/int8_linear/int8_linear_paths.h"

namespace h3rt::ops::int8_detail::cutlass_sm90 {

namespace fusion = cutlass::epilogue::fusion;
using Bf16 = cutlass::bfloat16_t;
constexpr auto kRn = cutlass::FloatRoundStyle::round_to_nearest;
constexpr int kAlignAB = 16;  // int8 elements: 16 bytes for TMA
constexpr int kAlignD = 8;    // bf16

template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule>
struct Int8Gemm {
  // Scalar (alignment 1) broadcast loads: any out, any scale/bias pointer alignment.
  using XScale = fusion::Sm90ColBroadcast<0, TileShape, float, float,
                                          cute::Stride<cute::_1, cute::_0, int64_t>, 1>;
  using WScale = fusion::Sm90RowBroadcast<0, TileShape, float, float,
                                          cute::Stride<cute::_0, cute::_1, int64_t>, 1>;
  using Bias = fusion::Sm90RowBroadcast<0, TileShape, Bf16, float,
                                        cute::Stride<cute::_0, cute::_1, int64_t>, 1>;
  using ScaleProduct =
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRn>, XScale, WScale>;
  using Scaled = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, Bf16, float, kRn>,
                                 fusion::Sm90AccFetch, ScaleProduct>;
  using Output =
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, Bf16, float, kRn>, Scaled, Bias>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, void,
      cutlass::layout::RowMajor, kAlignD, Bf16, cutlass::layout::RowMajor, kAlignD,
      EpilogueSchedule, Output>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor,
      kAlignAB, int8_t, cutlass::layout::ColumnMajor, kAlignAB, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  // void tile scheduler: the persistent sm90 scheduler (raster order and swizzle at run time).
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

template <class G>
typename G::Gemm::Arguments arguments(const Int8LinearCudaParams& p, CutlassSchedule s) {
  using Kernel = typename G::Kernel;
  using Gemm = typename G::Gemm;
  typename Kernel::StrideA sa{};
  cute::get<0>(sa) = p.x_row_stride;
  typename Kernel::StrideB sb{};
  cute::get<0>(sb) = p.in;
  typename Kernel::StrideD sd{};
  cute::get<0>(sd) = p.y_row_stride;

  typename G::Output::Arguments evt{
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
  args.hw_info.sm_count = cuda::sm_count(dev);
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = s.raster == CutlassRaster::kAlongN   ? Raster::AlongN
                                : s.raster == CutlassRaster::kAlongM ? Raster::AlongM
                                                                     : Raster::Heuristic;
  args.scheduler.max_swizzle_size = s.swizzle;
  return args;
}

template <class G>
cudaError_t run(const Int8LinearCudaParams& p, CutlassSchedule s, cudaStream_t stream,
                const char* what) {
  using Gemm = typename G::Gemm;
  const typename Gemm::Arguments args = arguments<G>(p, s);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  const size_t need = Gemm::get_workspace_size(args);
  H3RT_CHECK(need <= p.workspace_bytes && (need == 0 || p.workspace), "int8_linear_cuda (", what,
             "): needs ", need, " workspace bytes, got ", p.workspace_bytes);
  const cutlass::Status st = gemm.initialize(args, p.workspace, stream);
  if (st != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
  return H3RT_LAUNCH_CHECK(what);
}

}  // namespace h3rt::ops::int8_detail::cutlass_sm90
