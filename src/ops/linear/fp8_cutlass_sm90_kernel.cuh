// The CUTLASS 4.2 sm_90a fp8 GEMM's types (fp8_cutlass.h), in their own header so that the build
// compiles fp8_cutlass_sm90.cu with nvcc. Include only with H3RT_HAVE_CUTLASS.
#pragma once

#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/float8.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/kernel_hardware_info.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

namespace h3rt::ops::fp8_detail::fp8_cutlass_sm90 {

namespace fusion = cutlass::epilogue::fusion;
using namespace cute;
using Bf16 = cutlass::bfloat16_t;
using E4m3 = cutlass::float_e4m3_t;
constexpr auto kRn = cutlass::FloatRoundStyle::round_to_nearest;
using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_2, _1, _1>;

// x_scale * w_scale (two device scalars, multiplied by the broadcast), times the accumulator,
// plus the per-column bias, rounded once to bf16.
using Scale = fusion::Sm90ScalarBroadcast<float, Stride<_0, _0, int64_t>, 2>;
using Bias = fusion::Sm90RowBroadcast<0, TileShape, Bf16, float, Stride<_0, _1, int64_t>, 1>;
using Scaled = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRn>,
                               fusion::Sm90AccFetch, Scale>;
using Output = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, Bf16, float, kRn>, Scaled, Bias>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor,
    8, Bf16, cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative,
    Output>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4m3, cutlass::layout::RowMajor, 16, E4m3,
    cutlass::layout::ColumnMajor, 16, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

}  // namespace h3rt::ops::fp8_detail::fp8_cutlass_sm90
