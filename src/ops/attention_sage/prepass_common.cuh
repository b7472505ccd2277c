// Device helpers shared by the Sage pre-pass implementations (prepass.cu: two launches,
// prepass_fused.cu: one persistent launch).
// Every fp32 operation that reaches an output uses an explicit _rn intrinsic so all of them match
// the CPU reference (cpu.cpp) bit for bit.
#pragma once

#include <cuda_fp8.h>
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
  return __fdiv_rn(fmaxf(amax, 1e-7f), 127.0f);
}

// Four int8 codes round_half_even(x_i * inv) (|x_i * inv| <= 128), x0 in the low byte. Adding
// 1.5 * 2^23 rounds the product to an integer, half to even, and leaves it in the low mantissa
// bits (two's complement); the byte permutes gather the four low bytes.
__device__ __forceinline__ uint32_t dev_pack_i8(float x0, float x1, float x2, float x3, float inv) {
  auto r = [inv](float x) { return __float_as_uint(__fadd_rn(__fmul_rn(x, inv), 12582912.0f)); };
  return __byte_perm(__byte_perm(r(x0), r(x1), 0x0040), __byte_perm(r(x2), r(x3), 0x0040), 0x5410);
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

namespace {

// A head's smoothing mean and V channel scale from its K sum (chunk order) and |V| maximum: the
// last step of both algorithms, as the CPU reference does it.
__device__ __forceinline__ float head_k_mean(float k_sum, const Dims& n) {
  return __fdiv_rn(k_sum, static_cast<float>(n.seq));
}
__device__ __forceinline__ float head_v_scale(float v_max) {
  return v_max > 0.0f ? __fdiv_rn(v_max, kPScale) : 1.0f;
}

}  // namespace

// The fused pre-pass (prepass_fused.cu). Returns cudaErrorNotSupported when the device cannot
// hold its shared-memory tiles or the work counter would overflow; nothing is launched then.
cudaError_t launch_fused(const uint16_t* qkv, const Dims& n, float qk_log2, const SageBuffers& buf,
                         cudaStream_t stream);

}  // namespace h3rt::attention_sage::prepass
