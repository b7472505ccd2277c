// gated_residual on the GPU (declared in gated_residual.h): x = round(x + round(gate[t] * y)).
// One block per row, 16-byte vectors; x read and written once, y read once (streaming).
#include <algorithm>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/gated_residual/gated_residual.h"

namespace h3rt::ops {

namespace {

using cuda::rbf;

__global__ void gated_residual_kernel(GatedResidualCudaParams p) {
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.dim / 8);
  const int64_t t = p.row_table_index ? p.row_table_index[row] : 0;
  __nv_bfloat16* xr = p.x + row * p.x_row_stride;
  const __nv_bfloat16* yr = p.y + row * p.y_row_stride;
  const __nv_bfloat16* gr = p.gate ? p.gate + t * p.table_row_stride : nullptr;
  for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
    float x[8], y[8], g[8];
    cuda::unpack8(cuda::load8(xr + c * 8), x);
    cuda::unpack8(cuda::load8_stream(yr + c * 8), y);
    if (gr) {
      cuda::unpack8(cuda::load8(gr + c * 8), g);
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = rbf(__fmul_rn(g[e], y[e]));
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = rbf(__fadd_rn(x[e], y[e]));
    cuda::store8(xr + c * 8, cuda::pack8(x));
  }
}

}  // namespace

cudaError_t gated_residual_cuda(const GatedResidualCudaParams& in, cudaStream_t stream) {
  GatedResidualCudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.dim;
  if (!p.y_row_stride) p.y_row_stride = p.dim;
  H3RT_CHECK(p.x && p.y && p.rows >= 0 && p.dim > 0, "gated_residual_cuda: bad params");
  H3RT_CHECK(p.dim % 8 == 0 && p.x_row_stride % 8 == 0 && p.y_row_stride % 8 == 0 &&
                 p.table_row_stride % 8 == 0,
             "gated_residual_cuda: dim and row strides must be multiples of 8 elements");
  H3RT_CHECK(!p.gate || p.table_row_stride >= p.dim, "gated_residual_cuda: table row stride ",
             p.table_row_stride, " < dim ", p.dim);
  H3RT_CHECK(cuda::aligned16(p.x) && cuda::aligned16(p.y) && cuda::aligned16(p.gate),
             "gated_residual_cuda: pointers must be 16-byte aligned");
  if (p.rows == 0) return cudaSuccess;
  const int nvec = static_cast<int>(p.dim / 8);
  const int threads = std::min(256, (nvec + 31) / 32 * 32);
  gated_residual_kernel<<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("gated_residual");
}

}  // namespace h3rt::ops
