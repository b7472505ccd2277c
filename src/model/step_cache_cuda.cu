// First-block step caching kernels (see step_cache_cuda.h).
#include <algorithm>

#include "model/step_cache_cuda.h"

namespace h3rt::model {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

int grid_for(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 8192)));
}

// Block-wide sum of two doubles in a fixed order (shared-memory tree).
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kThreads], sb[kThreads];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      sa[threadIdx.x] += sa[threadIdx.x + w];
      sb[threadIdx.x] += sb[threadIdx.x + w];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
}

__global__ void rel_l1_partial(const bf16* in0, const bf16* out0, const float* ref, int64_t n,
                               double* partials) {
  double diff = 0, den = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads) {
    const float r = __bfloat162float(out0[i]) - __bfloat162float(in0[i]);
    diff += fabs(double(r) - double(ref[i]));
    den += fabs(double(ref[i]));
  }
  block_sum2(diff, den);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = diff;
    partials[2 * blockIdx.x + 1] = den;
  }
}

__global__ void rel_l1_final(const double* partials, int blocks, double* rel_l1) {
  double diff = 0, den = 0;
  for (int i = threadIdx.x; i < blocks; i += kThreads) {
    diff += partials[2 * i];
    den += partials[2 * i + 1];
  }
  block_sum2(diff, den);
  if (threadIdx.x == 0) *rel_l1 = den > 0 ? diff / den : (diff > 0 ? INFINITY : 0.0);
}

__global__ void refresh(const bf16* in0, const bf16* out0, const bf16* fin, float* block0_res,
                        float* rest_res, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads) {
    const float o = __bfloat162float(out0[i]);
    block0_res[i] = o - __bfloat162float(in0[i]);
    rest_res[i] = __bfloat162float(fin[i]) - o;
  }
}

__global__ void apply(bf16* x, const float* rest_res, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads)
    x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) + rest_res[i]);
}

}  // namespace

cudaError_t step_cache_rel_l1_cuda(const bf16* in0, const bf16* out0, const float* ref, int64_t n,
                                   double* partials, double* rel_l1, cudaStream_t s) {
  rel_l1_partial<<<kStepCacheReduceBlocks, kThreads, 0, s>>>(in0, out0, ref, n, partials);
  rel_l1_final<<<1, kThreads, 0, s>>>(partials, kStepCacheReduceBlocks, rel_l1);
  return cudaGetLastError();
}

cudaError_t step_cache_refresh_cuda(const bf16* in0, const bf16* out0, const bf16* final_x,
                                    float* block0_res, float* rest_res, int64_t n, cudaStream_t s) {
  refresh<<<grid_for(n), kThreads, 0, s>>>(in0, out0, final_x, block0_res, rest_res, n);
  return cudaGetLastError();
}

cudaError_t step_cache_apply_cuda(bf16* x, const float* rest_res, int64_t n, cudaStream_t s) {
  apply<<<grid_for(n), kThreads, 0, s>>>(x, rest_res, n);
  return cudaGetLastError();
}

}  // namespace h3rt::model
