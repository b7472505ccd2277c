// Device side of e4m3 outputs (e4m3_out.h): the one packing routine of the static-scale e4m3
// quantizer, shared by quantize_e4m3_cuda and the producers that write e4m3 themselves.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/device_math.cuh"
#include "ops/linear/e4m3_out.h"

namespace h3rt::ops::e4m3_detail {

// FusedMode value of a producer writing its output as e4m3 (beside NVFP4's kFuseNone / Encode /
// Amax and norm+modulate's int8 mode).
constexpr int kFuseE4m3 = 4;

// 8 bf16 values -> 8 e4m3 bytes (element 0 in the lowest byte): e4m3_satfinite(v / s), IEEE
// division (__fdiv_rn) and round to nearest even, as h3rt::f32_to_e4m3_satfinite(v / s).
__device__ __forceinline__ uint2 pack8(const uint4& v, float s) {
  float f[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = cuda::bf16_elem(v, e);
  uint16_t pairs[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    pairs[i] = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(f[2 * i], s), __fdiv_rn(f[2 * i + 1], s)), __NV_SATFINITE, __NV_E4M3);
  uint2 out;
  out.x = pairs[0] | (uint32_t(pairs[1]) << 16);
  out.y = pairs[2] | (uint32_t(pairs[3]) << 16);
  return out;
}

// Stores the e4m3 encoding of output vector c (8 values) of `row` into o.q with scale s.
__device__ __forceinline__ void store8(const E4m3Out& o, int64_t row, int64_t cols, int c,
                                       const uint4& v, float s) {
  const int64_t qs = o.q_row_stride ? o.q_row_stride : cols;
  *reinterpret_cast<uint2*>(reinterpret_cast<uint8_t*>(o.q) + row * qs + int64_t(c) * 8) =
      pack8(v, s);
}

}  // namespace h3rt::ops::e4m3_detail
