// Device helpers shared by the two Sage pre-pass implementations (prepass.cu: two launches,
// prepass_fused.cu: one persistent launch). Every fp32 operation that reaches an output uses an
// explicit _rn intrinsic so both match the CPU reference (cpu.cpp) bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sage/attention_sage_cuda.h"

namespace h3rt::attention_sage::prepass {
namespace {

constexpr int kD = kHeadDim;

__device__ __forceinline__ float bf16f(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

// The 8 bf16 values of a 16-byte word as floats.
__device__ __forceinline__ void unpack8(const uint4& w, float* f) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = bf16f(u[i] & 0xffffu);
    f[2 * i + 1] = bf16f(u[i] >> 16);
  }
}

__device__ __forceinline__ float dev_int8_scale(float amax) {
  return __fadd_rn(__fdiv_rn(amax, 127.0f), 1e-7f);
}

__device__ __forceinline__ uint32_t dev_quant_i8(float x, float scale) {
  float r = __fdiv_rn(x, scale);
  r = __fadd_rn(r, r >= 0.0f ? 0.5f : -0.5f);
  return static_cast<uint32_t>(__float2int_rz(r)) & 0xffu;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Token of slot p (0..15) inside a group of 16 (inverse of v_slot_of_token).
__device__ __forceinline__ int token_of_slot(int p) {
  int q = p / 4, i = p % 4;
  return i < 2 ? 2 * q + i : 8 + 2 * q + (i - 2);
}

}  // namespace

struct Dims {
  int64_t seq, heads, padded, row_stride;
};

// The fused pre-pass (prepass_fused.cu). Returns cudaErrorNotSupported when the device cannot
// hold its shared-memory tiles or the work counter would overflow; nothing is launched then.
cudaError_t launch_fused(const uint16_t* qkv, const Dims& n, float qk_log2, const SageBuffers& buf,
                         cudaStream_t stream);

}  // namespace h3rt::attention_sage::prepass
