// CUTLASS sm_90a fp8 GEMM of linear_fp8_cuda (see fp8_cutlass.h).
#include "ops/linear/fp8_cutlass.h"

#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
#include "ops/linear/fp8_cutlass_sm90_kernel.cuh"
#endif

#include "cuda/runtime.h"

namespace h3rt::ops::fp8_detail {

#if defined(H3RT_HAVE_CUTLASS) && !defined(H3RT_NO_CUTLASS_SM90)
namespace {

using namespace fp8_cutlass_sm90;
using namespace cute;

Gemm::Arguments arguments(const LinearFp8CudaParams& p) {
  const int64_t x_ld = p.x_row_stride ? p.x_row_stride : p.in;
  const int64_t y_ld = p.y_row_stride ? p.y_row_stride : p.out;
  Kernel::StrideA sa{};
  get<0>(sa) = x_ld;
  Kernel::StrideB sb{};
  get<0>(sb) = p.in;
  Kernel::StrideD sd{};
  get<0>(sd) = y_ld;
  Output::Arguments evt{
      {{}, {{0.0f, 0.0f}, {p.x_scale, p.w_scale}, {}}, {}},      // acc * (x_scale * w_scale)
      {reinterpret_cast<const Bf16*>(p.bias), Bf16(-0.0f), {}},  // + bias (null: -0.0)
      {}};
  Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {static_cast<int>(p.rows), static_cast<int>(p.out), static_cast<int>(p.in), 1},
      {reinterpret_cast<const E4m3*>(p.x), sa, reinterpret_cast<const E4m3*>(p.w), sb},
      {evt, nullptr, sd, reinterpret_cast<Bf16*>(p.y), sd}};
  int dev = 0;
  H3RT_CUDA_CHECK(cudaGetDevice(&dev));
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = cuda::sm_count(dev);
  return args;
}

}  // namespace

bool cutlass_sm90_compiled() {
  return cuda::compiled_arch_listed("90a");
}

cudaError_t linear_fp8_cutlass_sm90(const LinearFp8CudaParams& p, cudaStream_t stream) {
  const Gemm::Arguments args = arguments(p);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  H3RT_CHECK(Gemm::get_workspace_size(args) == 0,
             "linear_fp8_cuda (CUTLASS sm90): the kernel asks for workspace");
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess)
    return cudaErrorInvalidValue;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
  return H3RT_LAUNCH_CHECK("linear_fp8_cuda (CUTLASS sm90)");
}
#else
bool cutlass_sm90_compiled() {
  return false;
}

cudaError_t linear_fp8_cutlass_sm90(const LinearFp8CudaParams&, cudaStream_t) {
  return cudaErrorNotSupported;
}
#endif

}  // namespace h3rt::ops::fp8_detail
