// The CUTLASS 4.2 mma.sync int8 GEMM of gemm_cutlass_sm80.cu (see there): the kernel type with
// its exact EVT epilogue, and its arguments. Include only with H3RT_HAVE_CUTLASS.
#pragma once

#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/default_gemm_universal_with_visitor.h>

#include <cutlass/epilogue/threadblock/fusion/visitors.hpp>

#include "ops/int8_linear/int8_linear.h"

namespace h3rt::ops::int8_detail::cutlass_sm80 {

namespace evt = cutlass::epilogue::threadblock;
using Bf16 = cutlass::bfloat16_t;
using cute::_0;
using cute::_1;
constexpr auto kRn = cutlass::FloatRoundStyle::round_to_nearest;

struct Sm80Int8Gemm {
  using Tile = cutlass::gemm::GemmShape<128, 256, 64>;
  using Warp = cutlass::gemm::GemmShape<64, 64, 64>;
  using Mma = cutlass::gemm::GemmShape<16, 8, 32>;
  static constexpr int kStages = 3;
  static constexpr int kAlignAB = 16;  // int8 elements: 16-byte cp.async
  static constexpr int kAlignD = 8;    // bf16
  static constexpr int kEpilogueStages = 1;

  using Map = evt::OutputTileThreadLayout<Tile, Warp, Bf16, kAlignD, kEpilogueStages>;
  using XScale = evt::VisitorColBroadcast<Map, float, cute::Stride<_1, _0, int32_t>>;
  using WScale = evt::VisitorRowBroadcast<Map, float, cute::Stride<_0, _1, int32_t>>;
  using Bias = evt::VisitorRowBroadcast<Map, Bf16, cute::Stride<_0, _1, int32_t>>;
  using ScaleProduct =
      evt::Sm80EVT<evt::VisitorCompute<cutlass::multiplies, float, float, kRn>, XScale, WScale>;
  using Scaled = evt::Sm80EVT<evt::VisitorCompute<cutlass::multiplies, Bf16, float, kRn>,
                              evt::VisitorAccFetch, ScaleProduct>;
  using Output = evt::Sm80EVT<evt::VisitorCompute<cutlass::plus, Bf16, float, kRn>, Scaled, Bias>;
  using Store = evt::VisitorAuxStore<Map, Bf16, kRn, cute::Stride<int64_t, _1, int64_t>>;
  using Epilogue = evt::Sm80EVT<Store, Output>;

  using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      int8_t, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, kAlignAB,     // x
      int8_t, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, kAlignAB,  // w
      Bf16, cutlass::layout::RowMajor, kAlignD, int32_t, float, cutlass::arch::OpClassTensorOp,
      cutlass::arch::Sm80, Tile, Warp, Mma, Epilogue,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, kStages,
      cutlass::arch::OpMultiplyAddSaturate, kEpilogueStages>::GemmKernel;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

inline Sm80Int8Gemm::Gemm::Arguments arguments(const Int8LinearCudaParams& p) {
  const int m = static_cast<int>(p.rows), n = static_cast<int>(p.out);
  typename Sm80Int8Gemm::Epilogue::Arguments epilogue{
      {                                       // Output: Scaled + bias
       {                                      //   Scaled: acc * product
        {},                                   //     acc
        {{p.x_scale, 0.0f, {_1{}, _0{}, m}},  //     x_scale[m]
         {p.w_scale, 0.0f, {_0{}, _1{}, n}},  //   * w_scale[n]
         {}},
        {}},
       {reinterpret_cast<const Bf16*>(p.bias), Bf16(-0.0f), {_0{}, _1{}, n}},  // bias or -0.0
       {}},
      {reinterpret_cast<Bf16*>(p.y), {p.y_row_stride, _1{}, int64_t(m) * p.y_row_stride}}};
  return {cutlass::gemm::GemmUniversalMode::kGemm,
          {m, n, static_cast<int>(p.in)},
          1,  // batch
          epilogue,
          p.x,
          p.w,
          nullptr,
          nullptr,
          0,
          0,
          0,
          0,
          p.x_row_stride,
          p.in,
          0,
          0};
}

}  // namespace h3rt::ops::int8_detail::cutlass_sm80
