// Device helpers shared by the Sage attention kernels (mma.sync and wgmma): the base-2
// exponential of the softmax and the packing of P into e4m3 bytes.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace h3rt::attention_sage::device {

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// Four floats -> four e4m3 bytes (first in the low byte), satfinite RNE.
__device__ __forceinline__ uint32_t pack_e4m3(float a, float b, float c, float d) {
  uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

}  // namespace h3rt::attention_sage::device
