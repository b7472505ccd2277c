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

// The last chunk of a head: reduce all partials in chunk order (L2 reads, 16 chunks in flight).
// Thread d (0..127) = channel d.
__device__ __forceinline__ void finish_head(const Dims& n, int64_t h, const SageBuffers& buf,
                                            int d) {
  constexpr int kBatch = 16;
  const int64_t chunks = n.padded / kTokenPad;
  float total = 0.0f, vmx = 0.0f;
  for (int64_t c0 = 0; c0 < chunks; c0 += kBatch) {
    float kb[kBatch], vb[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      int64_t idx = ((c0 + i) * n.heads + h) * kD + d;
      kb[i] = c0 + i < chunks ? __ldcg(buf.k_partial + idx) : 0.0f;
      vb[i] = c0 + i < chunks ? __ldcg(buf.v_partial + idx) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (c0 + i < chunks) total = __fadd_rn(total, kb[i]);
      vmx = fmaxf(vmx, vb[i]);
    }
  }
  buf.k_mean[h * kD + d] = __fdiv_rn(total, static_cast<float>(n.seq));
  buf.v_scale[h * kD + d] = vmx > 0.0f ? __fdiv_rn(vmx, kPScale) : 1.0f;
}

// K of one chunk from a bf16 tile [128 rows][128] (rows past S ignored): warp g (0..3 = warps
// 0..3 of the block) = scale group (keys 8j + 2g + {0,1}); lane = 4 channels.
__device__ __forceinline__ void quantize_k_chunk(const Dims& n, int64_t c, int64_t h,
                                                 const uint16_t* tile, const SageBuffers& buf) {
  const int g = threadIdx.x / 32, lane = threadIdx.x % 32;
  float mean[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) mean[i] = buf.k_mean[h * kD + lane * 4 + i];
  auto smooth = [&](int row, float* x) {
    uint2 w = *reinterpret_cast<const uint2*>(tile + row * kD + lane * 4);
    x[0] = __fsub_rn(bf16f(w.x & 0xffffu), mean[0]);
    x[1] = __fsub_rn(bf16f(w.x >> 16), mean[1]);
    x[2] = __fsub_rn(bf16f(w.y & 0xffffu), mean[2]);
    x[3] = __fsub_rn(bf16f(w.y >> 16), mean[3]);
  };
  float amax = 0.0f;
#pragma unroll 8
  for (int k = 0; k < 32; ++k) {
    int row = 8 * (k / 2) + 2 * g + k % 2;
    if (c * kTokenPad + row >= n.seq) continue;
    float x[4];
    smooth(row, x);
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(x[i]));
  }
  const float scale = dev_int8_scale(warp_max(amax)), inv = __frcp_rn(scale);
  if (lane == 0) buf.k_scale[h * (n.padded / kKBlock * 4) + c * 4 + g] = scale;
#pragma unroll 8
  for (int k = 0; k < 32; ++k) {
    int row = 8 * (k / 2) + 2 * g + k % 2;
    int64_t t = c * kTokenPad + row;
    uint32_t packed = 0;
    if (t < n.seq) {
      float x[4];
      smooth(row, x);
      packed = dev_pack_i8(x[0], x[1], x[2], x[3], inv);
    }
    *reinterpret_cast<uint32_t*>(buf.k8 + (h * n.padded + t) * kD + lane * 4) = packed;
  }
}

// V of one chunk: thread = channel d; 16-byte stores of 16 permuted tokens.
__device__ __forceinline__ void quantize_v_chunk(const Dims& n, int64_t c, int64_t h,
                                                 const uint16_t* tile, const SageBuffers& buf,
                                                 int d) {
  const float inv = __frcp_rn(buf.v_scale[h * kD + d]);
  uint8_t* dst = buf.v8t + (h * kD + d) * n.padded + c * kTokenPad;
  for (int grp = 0; grp < kTokenPad / 16; ++grp) {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      int row = grp * 16 + token_of_slot(p);
      if (c * kTokenPad + row >= n.seq) continue;
      float v = bf16f(tile[row * kD + d]);
      uint32_t b = __nv_cvt_float_to_fp8(__fmul_rn(v, inv), __NV_SATFINITE, __NV_E4M3);
      w[p / 4] |= b << (8 * (p % 4));
    }
    *reinterpret_cast<uint4*>(dst + grp * 16) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace

// The fused pre-pass (prepass_fused.cu). Returns cudaErrorNotSupported when the device cannot
// hold its shared-memory tiles or the work counter would overflow; nothing is launched then.
cudaError_t launch_fused(const uint16_t* qkv, const Dims& n, float qk_log2, const SageBuffers& buf,
                         cudaStream_t stream);

}  // namespace h3rt::attention_sage::prepass
