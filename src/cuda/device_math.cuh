// Device helpers shared by the memory-bound kernels: 16-byte vectors of 8 bf16 values, exact
// bf16 rounding points, and block reductions. Arithmetic that the CPU reference performs as
// separate float32 operations uses __fmul_rn/__fadd_rn so nvcc cannot contract it into an FMA
// (which would change the rounding and break bit-exactness).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace h3rt::cuda {

struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ Bf16x8 load8(const __nv_bfloat16* p) {
  uint4 u = *reinterpret_cast<const uint4*>(p);
  return *reinterpret_cast<Bf16x8*>(&u);
}

// Streaming load for data read once (keeps L2 for data that is reused).
__device__ __forceinline__ Bf16x8 load8_stream(const __nv_bfloat16* p) {
  uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  return *reinterpret_cast<Bf16x8*>(&u);
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const Bf16x8& v) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
}

__device__ __forceinline__ void unpack8(const Bf16x8& v, float (&f)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = __bfloat1622float2(v.h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ Bf16x8 pack8(const float (&f)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// round_bf16 of the host (RNE), as a float.
__device__ __forceinline__ float rbf(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). Every thread gets the result.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T partial[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v = warp_sum(v);
  __syncthreads();  // protects `partial` against a previous call's readers
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  T t = lane < nwarps ? partial[lane] : T(0);
  return warp_sum(t);
}

}  // namespace h3rt::cuda
