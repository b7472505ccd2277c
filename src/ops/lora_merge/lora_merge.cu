// The GPU steps of a LoRA merge, bit-exact with the host merge (see lora_merge.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "ops/int8_linear/int8_math.cuh"
#include "ops/lora_merge/lora_merge.h"

namespace h3rt::ops {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20));
}

// One block per (group, row): the host's butterflies, butterfly b of a stage of stride s at
// t = (b / s) * 4s + b % s, all in double with the host's association order.
__global__ void rotate_kernel(const float* x, float* y, int64_t k, int g, int half_log2) {
  extern __shared__ double a[];
  const int64_t base = static_cast<int64_t>(blockIdx.y) * k + static_cast<int64_t>(blockIdx.x) * g;
  for (int i = threadIdx.x; i < g; i += blockDim.x) a[i] = static_cast<double>(x[base + i]);
  __syncthreads();
  for (int s = 1; s < g; s *= 4) {
    for (int b = threadIdx.x; b < g / 4; b += blockDim.x) {
      const int t = (b / s) * 4 * s + b % s;
      const double a0 = a[t], a1 = a[t + s], a2 = a[t + 2 * s], a3 = a[t + 3 * s];
      a[t] = __dsub_rn(__dadd_rn(__dadd_rn(a0, a1), a2), a3);
      a[t + s] = __dadd_rn(__dsub_rn(__dadd_rn(a0, a1), a2), a3);
      a[t + 2 * s] = __dadd_rn(__dadd_rn(__dsub_rn(a0, a1), a2), a3);
      a[t + 3 * s] = __dadd_rn(__dadd_rn(__dadd_rn(-a0, a1), a2), a3);
    }
    __syncthreads();
  }
  const double inv = ldexp(1.0, -half_log2);
  for (int j = threadIdx.x; j < g; j += blockDim.x)
    y[base + j] = __double2float_rn(__dmul_rn(a[j], inv));
}

__global__ void to_f32_kernel(const void* src, int kind, float* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (kind == 0) dst[i] = static_cast<const float*>(src)[i];
    if (kind == 1) dst[i] = __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
    if (kind == 2) dst[i] = __half2float(static_cast<const __half*>(src)[i]);
  }
}

__global__ void working_kernel(const void* src, int kind, const float* row_scale, float* w,
                               int64_t out, int64_t in) {
  const int64_t n = out * in;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (kind == 0) w[i] = static_cast<const float*>(src)[i];
    if (kind == 1) w[i] = __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
    if (kind == 3)
      w[i] = __fmul_rn(static_cast<float>(static_cast<const int8_t*>(src)[i]), row_scale[i / in]);
  }
}

// 64 x 64 outputs per block of 16 x 16 threads, 4 x 4 per thread (rows ty + 16 a, columns
// tx + 16 b); r in chunks of 16 through shared memory, each element's FMA chain over r
// ascending (only the rank's own r: no padded terms, which could flip the sign of a zero).
constexpr int kTile = 64, kChunk = 16;
__global__ void delta_kernel(float* w, int64_t out, int64_t in, const float* up, const float* down,
                             int64_t rank, float scale) {
  __shared__ float bs[kTile][kChunk + 1];
  __shared__ float as[kChunk][kTile];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kTile,
                i0 = static_cast<int64_t>(blockIdx.x) * kTile;
  float acc[4][4] = {};
  for (int64_t r0 = 0; r0 < rank; r0 += kChunk) {
    const int rc = static_cast<int>(std::min<int64_t>(kChunk, rank - r0));
    for (int e = threadIdx.x; e < kTile * kChunk; e += blockDim.x) {
      const int row = e / kChunk, rr = e % kChunk;
      bs[row][rr] = (o0 + row < out && rr < rc) ? up[(o0 + row) * rank + r0 + rr] : 0.0f;
      const int ar = e / kTile, col = e % kTile;
      as[ar][col] = (i0 + col < in && ar < rc) ? down[(r0 + ar) * in + i0 + col] : 0.0f;
    }
    __syncthreads();
    for (int rr = 0; rr < rc; ++rr)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b)
          acc[a][b] = __fmaf_rn(bs[ty + 16 * a][rr], as[rr][tx + 16 * b], acc[a][b]);
    __syncthreads();
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int64_t o = o0 + ty + 16 * a, i = i0 + tx + 16 * b;
      if (o < out && i < in) w[o * in + i] = __fadd_rn(w[o * in + i], __fmul_rn(scale, acc[a][b]));
    }
}

__global__ void store_kernel(const float* w, void* dst, int bf16, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (bf16)
      static_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(int8_detail::bf16_bits(w[i]));
    else
      static_cast<float*>(dst)[i] = w[i];
  }
}

int kind_of(DType t) {
  switch (t) {
    case DType::f32:
      return 0;
    case DType::bf16:
      return 1;
    case DType::f16:
      return 2;
    case DType::i8:
      return 3;
    default:
      return -1;
  }
}

bool valid_group(int g) {
  if (g < 4 || g > 1024) return false;
  while (g % 4 == 0) g /= 4;
  return g == 1;
}

}  // namespace

cudaError_t lora_rotate_rows_cuda(const float* x, float* y, int64_t rows, int64_t k, int group,
                                  cudaStream_t stream) {
  if (!valid_group(group) || k % group != 0 || rows > 65535) return cudaErrorInvalidValue;
  if (rows == 0 || k == 0) return cudaSuccess;
  int half_log2 = 0;
  while ((1 << (2 * half_log2)) < group) ++half_log2;
  const dim3 grid(static_cast<unsigned>(k / group), static_cast<unsigned>(rows));
  const int threads = std::clamp(group / 4, 32, kThreads);
  rotate_kernel<<<grid, threads, group * sizeof(double), stream>>>(x, y, k, group, half_log2);
  return cudaGetLastError();
}

cudaError_t lora_to_f32_cuda(const void* src, DType dtype, float* dst, int64_t n,
                             cudaStream_t stream) {
  const int kind = kind_of(dtype);
  if (kind < 0 || kind > 2) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  to_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, kind, dst, n);
  return cudaGetLastError();
}

cudaError_t lora_working_values_cuda(const void* src, DType dtype, const float* row_scale, float* w,
                                     int64_t out, int64_t in, cudaStream_t stream) {
  const int kind = kind_of(dtype);
  if (kind == 2 || kind < 0 || (kind == 3) != (row_scale != nullptr)) return cudaErrorInvalidValue;
  if (out * in == 0) return cudaSuccess;
  working_kernel<<<blocks_for(out * in), kThreads, 0, stream>>>(src, kind, row_scale, w, out, in);
  return cudaGetLastError();
}

cudaError_t lora_add_delta_cuda(float* w, int64_t out, int64_t in, const float* up,
                                const float* down, int64_t rank, float scale, cudaStream_t stream) {
  if (rank < 1 || (out + kTile - 1) / kTile > 65535) return cudaErrorInvalidValue;
  if (out * in == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((in + kTile - 1) / kTile),
                  static_cast<unsigned>((out + kTile - 1) / kTile));
  delta_kernel<<<grid, kThreads, 0, stream>>>(w, out, in, up, down, rank, scale);
  return cudaGetLastError();
}

cudaError_t lora_store_cuda(const float* w, void* dst, DType dtype, int64_t n,
                            cudaStream_t stream) {
  if (dtype != DType::bf16 && dtype != DType::f32) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  store_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, dst, dtype == DType::bf16, n);
  return cudaGetLastError();
}

}  // namespace h3rt::ops
