// rmsnorm_modulate on the GPU (declared in rmsnorm_modulate.h). One block per row; each thread
// keeps up to kMaxVec 16-byte vectors of the row in registers, so x is read once and y written
// once. The sum of squares is accumulated in double, as the CPU reference does: squares of bf16
// values are exact in double, so the sum (and hence the norm) does not depend on the reduction
// order and the result is bit-exact with rmsnorm_modulate_cpu in bf16 mode.
#include <algorithm>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"

namespace h3rt::ops {

namespace {

using cuda::Bf16x8;
using cuda::rbf;

constexpr int kMaxVec = 4;  // vectors per thread: up to 1024 * 4 * 8 = 32768 channels

template <bool kModulate, bool kResidual>
__global__ void __launch_bounds__(1024) rmsnorm_modulate_kernel(RmsNormModulateCudaParams p) {
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(p.dim / 8);
  const int64_t t = p.row_table_index ? p.row_table_index[row] : 0;
  __nv_bfloat16* xr = p.x + row * p.x_row_stride;
  float xv[kMaxVec][8];
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= nvec) break;
    cuda::unpack8(cuda::load8(xr + c * 8), xv[i]);
    if constexpr (kResidual) {
      float r[8], g[8];
      cuda::unpack8(cuda::load8_stream(p.residual + row * p.residual_row_stride + c * 8), r);
      if (p.residual_gate) {
        cuda::unpack8(cuda::load8(p.residual_gate + t * p.table_row_stride + c * 8), g);
#pragma unroll
        for (int e = 0; e < 8; ++e) r[e] = rbf(__fmul_rn(g[e], r[e]));
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) xv[i][e] = rbf(__fadd_rn(xv[i][e], r[e]));
      cuda::store8(xr + c * 8, cuda::pack8(xv[i]));
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = fma(double(xv[i][e]), double(xv[i][e]), ss);
  }
  ss = cuda::block_sum(ss);
  const float mean = static_cast<float>(__ddiv_rn(ss, static_cast<double>(p.dim)));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, p.eps)));
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= nvec) break;
    float w[8], y[8];
    if (p.weight) {
      cuda::unpack8(cuda::load8(p.weight + c * 8), w);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) w[e] = 1.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = rbf(__fmul_rn(__fmul_rn(xv[i][e], inv), w[e]));
    if constexpr (kModulate) {
      float sh[8], sc[8];
      cuda::unpack8(cuda::load8(p.shift + t * p.table_row_stride + c * 8), sh);
      cuda::unpack8(cuda::load8(p.scale + t * p.table_row_stride + c * 8), sc);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        y[e] = rbf(__fadd_rn(rbf(__fmul_rn(y[e], rbf(__fadd_rn(1.0f, sc[e])))), sh[e]));
    }
    cuda::store8(p.y + row * p.y_row_stride + c * 8, cuda::pack8(y));
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

cudaError_t rmsnorm_modulate_cuda(const RmsNormModulateCudaParams& in, cudaStream_t stream) {
  RmsNormModulateCudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.dim;
  if (!p.y_row_stride) p.y_row_stride = p.dim;
  if (!p.residual_row_stride) p.residual_row_stride = p.dim;
  H3RT_CHECK(p.x && p.y && p.rows >= 0 && p.dim > 0, "rmsnorm_modulate_cuda: bad params");
  H3RT_CHECK(p.dim % 8 == 0 && p.dim <= 1024 * kMaxVec * 8, "rmsnorm_modulate_cuda: dim ", p.dim,
             " must be a multiple of 8 and at most ", 1024 * kMaxVec * 8);
  H3RT_CHECK((p.shift == nullptr) == (p.scale == nullptr),
             "rmsnorm_modulate_cuda: shift and scale come together");
  H3RT_CHECK(p.x_row_stride % 8 == 0 && p.y_row_stride % 8 == 0 && p.residual_row_stride % 8 == 0 &&
                 p.table_row_stride % 8 == 0,
             "rmsnorm_modulate_cuda: row strides must be multiples of 8 elements");
  H3RT_CHECK(aligned16(p.x) && aligned16(p.y) && aligned16(p.weight) && aligned16(p.shift) &&
                 aligned16(p.scale) && aligned16(p.residual) && aligned16(p.residual_gate),
             "rmsnorm_modulate_cuda: pointers must be 16-byte aligned");
  const bool modulate = p.scale != nullptr;
  H3RT_CHECK((!modulate && !p.residual_gate) || p.table_row_stride >= p.dim,
             "rmsnorm_modulate_cuda: table row stride ", p.table_row_stride, " < dim ", p.dim);
  if (p.rows == 0) return cudaSuccess;
  const int nvec = static_cast<int>(p.dim / 8);
  const int threads = std::min(1024, ((nvec + kMaxVec - 1) / kMaxVec + 31) / 32 * 32);
  const dim3 grid(static_cast<unsigned>(p.rows));
  if (modulate && p.residual)
    rmsnorm_modulate_kernel<true, true><<<grid, threads, 0, stream>>>(p);
  else if (modulate)
    rmsnorm_modulate_kernel<true, false><<<grid, threads, 0, stream>>>(p);
  else if (p.residual)
    rmsnorm_modulate_kernel<false, true><<<grid, threads, 0, stream>>>(p);
  else
    rmsnorm_modulate_kernel<false, false><<<grid, threads, 0, stream>>>(p);
  return H3RT_LAUNCH_CHECK("rmsnorm_modulate");
}

}  // namespace h3rt::ops
