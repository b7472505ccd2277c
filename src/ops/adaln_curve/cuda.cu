// adaln_curve on the GPU (declared in adaln_curve.h): the curve form's small AdaLN linear and
// its float32 final modulation.
#include <algorithm>

#include "cuda/runtime.h"
#include "ops/adaln_curve/adaln_curve.h"

namespace h3rt::ops {

namespace {

__global__ void adaln_curve_linear_kernel(AdalnCurveLinearCudaParams p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.rows * p.out;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.out, o = i % p.out;
    const float* x = p.x + r * p.in;
    const float* w = p.w + o * p.in;
    double acc = 0.0;
    for (int64_t k = 0; k < p.in; ++k)  // the exact product, one rounding per add
      acc = __dadd_rn(acc, __dmul_rn(double(x[k]), double(w[k])));
    if (p.bias) acc = __dadd_rn(acc, double(p.bias[o]));
    const float v = __double2float_rn(acc);
    if (p.y) p.y[i] = v;
    if (p.y_bf16) p.y_bf16[i] = __float2bfloat16_rn(v);
  }
}

__global__ void curve_modulate_kernel(CurveModulateCudaParams p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.rows * p.dim;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.dim, j = i % p.dim;
    const int64_t t = p.row_table_index ? p.row_table_index[r] : 0;
    const float n = __bfloat162float(p.n[r * p.n_row_stride + j]);
    const float sc = p.scale[t * p.table_row_stride + j];
    const float sh = p.shift[t * p.table_row_stride + j];
    p.y[i] = __fadd_rn(__fmul_rn(n, __fadd_rn(1.0f, sc)), sh);
  }
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
}

}  // namespace

cudaError_t adaln_curve_linear_cuda(const AdalnCurveLinearCudaParams& p, cudaStream_t stream) {
  H3RT_CHECK(p.x && p.w && p.rows >= 0 && p.in > 0 && p.out > 0 &&
                 (p.y != nullptr) != (p.y_bf16 != nullptr),
             "adaln_curve_linear_cuda: bad params (rows ", p.rows, ", in ", p.in, ", out ", p.out,
             "; exactly one of y, y_bf16)");
  if (p.rows == 0) return cudaSuccess;
  adaln_curve_linear_kernel<<<blocks_for(p.rows * p.out), 256, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("adaln_curve_linear");
}

cudaError_t curve_modulate_cuda(const CurveModulateCudaParams& in, cudaStream_t stream) {
  CurveModulateCudaParams p = in;
  if (!p.n_row_stride) p.n_row_stride = p.dim;
  H3RT_CHECK(
      p.n && p.y && p.shift && p.scale && p.rows >= 0 && p.dim > 0 && p.table_row_stride >= p.dim,
      "curve_modulate_cuda: bad params");
  if (p.rows == 0) return cudaSuccess;
  curve_modulate_kernel<<<blocks_for(p.rows * p.dim), 256, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("curve_modulate");
}

}  // namespace h3rt::ops
