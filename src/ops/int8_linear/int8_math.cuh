// Exact scalar steps of the int8 W8A8 rule shared by the quantizer and the GEMM epilogues.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/host_device.h"

namespace h3rt::ops::int8_detail {

// h3rt::f32_to_bf16 bit for bit (rne; NaN quieted the same way).
__device__ __forceinline__ uint32_t bf16_bits(float f) {
  return bf16_bits_rne(f);
}

__device__ __forceinline__ float bf16_value(uint32_t b) {
  return __uint_as_float(b << 16);
}

// The epilogue of h3rt::int8_linear for one element: bf16(float(acc) * (sx * sw)), then
// bf16(. + bias) when has_bias; every step one rounded f32 operation (no contraction).
__device__ __forceinline__ uint32_t int8_epilogue(int32_t acc, float sx, float sw, bool has_bias,
                                                  uint32_t bias_bits) {
  uint32_t b = bf16_bits(__fmul_rn(__int2float_rn(acc), __fmul_rn(sx, sw)));
  if (has_bias) b = bf16_bits(__fadd_rn(bf16_value(b), bf16_value(bias_bits)));
  return b;
}

}  // namespace h3rt::ops::int8_detail
