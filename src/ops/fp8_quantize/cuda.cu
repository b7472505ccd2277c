// Dynamic per-tensor e4m3 quantization on the GPU (see fp8_quantize.h): an amax-partials launch
// and a quantize launch that finishes the reduction itself, so nothing persists between calls.
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "ops/fp8_quantize/fp8_quantize.h"

namespace h3rt::ops {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kMaxPartials = 1024;  // CTAs of the amax launch at most
constexpr int kThreads = 256;

// Max over the block (every thread gets it). Values are >= 0 and NaN-free (fmaxf drops NaN).
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[kThreads / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // protects `partial` against a previous call's readers
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float t = lane < int(blockDim.x >> 5) ? partial[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
  return t;
}

// Launch 1: partials[b] = max |x| over rows b, b + gridDim.x, ...
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    amax_partials_kernel(Fp8QuantizeCudaParams p, float* partials) {
  float m = 0.0f;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const bf16* xr = p.x + r * p.x_row_stride;
    if constexpr (kVec) {
      const int nvec = static_cast<int>(p.cols / 8);
#pragma unroll 2
      for (int c = threadIdx.x; c < nvec; c += kThreads) {
        float f[8];
        cuda::unpack8(cuda::load8(xr + c * 8), f);
#pragma unroll
        for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(f[i]));
      }
    } else {
      for (int64_t c = threadIdx.x; c < p.cols; c += kThreads)
        m = fmaxf(m, fabsf(__bfloat162float(xr[c])));
    }
  }
  m = block_max(m);
  if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// Launch 2: amax from the partials, s by the rule of the header, then q = e4m3(x / s).
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(Fp8QuantizeCudaParams p, const float* partials, int npartials) {
  float m = 0.0f;
  for (int i = threadIdx.x; i < npartials; i += kThreads) m = fmaxf(m, partials[i]);
  const float amax = block_max(m);
  const float s = amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *p.scale = s;
    if (p.amax) *p.amax = amax;
  }
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const bf16* xr = p.x + r * p.x_row_stride;
    __nv_fp8_e4m3* qr = p.q + r * p.q_row_stride;
    if constexpr (kVec) {
      const int nvec = static_cast<int>(p.cols / 8);
      for (int c = threadIdx.x; c < nvec; c += kThreads) {
        float f[8];
        cuda::unpack8(cuda::load8(xr + c * 8), f);
        uint32_t pairs[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          pairs[i] = __nv_cvt_float2_to_fp8x2(
              make_float2(__fdiv_rn(f[2 * i], s), __fdiv_rn(f[2 * i + 1], s)), __NV_SATFINITE,
              __NV_E4M3);
        uint2 out;
        out.x = pairs[0] | (pairs[1] << 16);
        out.y = pairs[2] | (pairs[3] << 16);
        *reinterpret_cast<uint2*>(qr + c * 8) = out;
      }
    } else {
      for (int64_t c = threadIdx.x; c < p.cols; c += kThreads) {
        const float v = __fdiv_rn(__bfloat162float(xr[c]), s);
        qr[c].__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
      }
    }
  }
}

template <bool kVec>
cudaError_t launch(const Fp8QuantizeCudaParams& p, cudaStream_t stream) {
  const int grid = static_cast<int>(std::min<int64_t>(p.rows, kMaxPartials));
  auto* partials = static_cast<float*>(p.workspace);
  amax_partials_kernel<kVec><<<grid, kThreads, 0, stream>>>(p, partials);
  const cudaError_t e = H3RT_LAUNCH_CHECK("fp8_quantize amax");
  if (e != cudaSuccess) return e;
  quantize_kernel<kVec><<<grid, kThreads, 0, stream>>>(p, partials, grid);
  return H3RT_LAUNCH_CHECK("fp8_quantize encode");
}

}  // namespace

size_t fp8_quantize_workspace_bytes() {
  return kMaxPartials * sizeof(float);
}

cudaError_t fp8_quantize_dynamic_cuda(const Fp8QuantizeCudaParams& in, cudaStream_t stream) {
  Fp8QuantizeCudaParams p = in;
  if (!p.x_row_stride) p.x_row_stride = p.cols;
  if (!p.q_row_stride) p.q_row_stride = p.cols;
  H3RT_CHECK(p.rows >= 0 && p.cols > 0 && p.cols < (int64_t(1) << 31) && p.x_row_stride >= p.cols &&
                 p.q_row_stride >= p.cols,
             "fp8_quantize_dynamic_cuda: bad shape rows ", p.rows, ", cols ", p.cols,
             ", row strides ", p.x_row_stride, " / ", p.q_row_stride);
  H3RT_CHECK(p.x && p.q && p.scale && p.workspace, "fp8_quantize_dynamic_cuda: null pointer");
  if (p.rows == 0) return cudaSuccess;
  const bool vec = p.cols % 8 == 0 && p.x_row_stride % 8 == 0 && p.q_row_stride % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.q) % 8 == 0;
  return vec ? launch<true>(p, stream) : launch<false>(p, stream);
}

}  // namespace h3rt::ops
