// linear on the GPU (declared in linear.h) through the shared cuBLASLt entry point
// (cublaslt_gemm.h: layout, plan cache, workspaces), plus the e4m3 activation quantizer of the
// fp8 path.
#include <algorithm>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/linear/cublaslt_gemm.h"
#include "ops/linear/e4m3_out.cuh"
#include "ops/linear/linear.h"

namespace h3rt::ops {

namespace {

// Argument checks and the call shared by both operand kinds.
cudaError_t run_linear(const char* what, lt::Gemm g, cudaStream_t stream) {
  if (!g.x_ld) g.x_ld = g.in;
  if (!g.y_ld) g.y_ld = g.out;
  H3RT_CHECK(g.x && g.w && g.y && g.rows >= 0 && g.in > 0 && g.out > 0, what, ": bad params");
  H3RT_CHECK(g.x_ld >= g.in && g.y_ld >= g.out, what, ": row strides (x ", g.x_ld, ", y ", g.y_ld,
             ") smaller than in ", g.in, " / out ", g.out);
  const cudaError_t e = lt::gemm(g, stream);
  H3RT_CHECK(e != cudaErrorNotSupported, what, ": cuBLASLt has no algorithm for rows ", g.rows,
             ", in ", g.in, ", out ", g.out);
  return e;
}

// The fields both parameter structs share.
template <typename P>
lt::Gemm gemm_of(const P& p, lt::Operands kind) {
  lt::Gemm g = lt::output_gemm(p, kind);
  g.w = p.w;
  g.x = p.x;
  g.x_ld = p.x_row_stride;
  return g;
}

}  // namespace

cudaError_t linear_bf16_cuda(const LinearCudaParams& p, cudaStream_t stream) {
  return run_linear("linear_bf16_cuda", gemm_of(p, lt::Operands::kBf16), stream);
}

cudaError_t linear_fp8_cuda(const LinearFp8CudaParams& p, cudaStream_t stream) {
  H3RT_CHECK(p.x_scale && p.w_scale, "linear_fp8_cuda: x_scale and w_scale are required");
  H3RT_CHECK(p.in % 16 == 0 && (p.x_row_stride ? p.x_row_stride : p.in) % 16 == 0,
             "linear_fp8_cuda: in ", p.in,
             " and the x row stride must be multiples of 16 (fp8 GEMM constraint)");
  lt::Gemm g = gemm_of(p, lt::Operands::kFp8);
  g.w_scale = p.w_scale;
  g.x_scale = p.x_scale;
  g.fast_accum = p.fast_accum;
  return run_linear("linear_fp8_cuda", g, stream);
}

namespace {

__global__ void quantize_e4m3_kernel(QuantizeE4m3CudaParams p) {
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.cols / 8);
  const float s = *p.scale;
  const __nv_bfloat16* xr = p.x + row * p.x_row_stride;
  E4m3Out o;
  o.q = p.q;
  o.q_row_stride = p.q_row_stride;
  for (int c = threadIdx.x; c < nvec; c += blockDim.x)
    e4m3_detail::store8(o, row, p.cols, c, cuda::load_u4(xr + c * 8, true), s);
}

}  // namespace

cudaError_t quantize_e4m3_cuda(const QuantizeE4m3CudaParams& in, cudaStream_t stream) {
  QuantizeE4m3CudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.cols;
  if (!p.q_row_stride) p.q_row_stride = p.cols;
  H3RT_CHECK(p.x && p.q && p.scale && p.rows >= 0 && p.cols > 0, "quantize_e4m3_cuda: bad params");
  H3RT_CHECK(p.cols % 8 == 0 && p.x_row_stride % 8 == 0 && p.q_row_stride % 8 == 0,
             "quantize_e4m3_cuda: cols and row strides must be multiples of 8");
  H3RT_CHECK(
      reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.q) % 8 == 0,
      "quantize_e4m3_cuda: x must be 16-byte and q 8-byte aligned");
  if (p.rows == 0) return cudaSuccess;
  const int nvec = static_cast<int>(p.cols / 8);
  const int threads = std::min(256, (nvec + 31) / 32 * 32);
  quantize_e4m3_kernel<<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("quantize_e4m3");
}

}  // namespace h3rt::ops
