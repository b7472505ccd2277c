// NVFP4 pieces shared verbatim by the host reference and the CUDA kernels (H3RT_HD inline):
// the cuBLAS/CUTLASS 128x4 tiled block-scale layout, the block-scale quotient and the e2m1
// encoder on an exactly computed quotient. Keeping them in one header means CPU and GPU
// cannot drift apart on layout or on the order of the floating-point operations.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace h3rt::nvfp4 {

inline constexpr int kBlock = 16;  // elements per block scale, along K
inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kScaleDenominator = 2688.0f;  // 6 * 448

// The global scale from amax|x| (see Nvfp4ScaleRule in include/h3rt/nvfp4.h): rule 0 divides in
// fp32; rule 1 multiplies by float32(1/2688) and rounds the product to bf16 (RNE).
H3RT_HD inline float global_scale_from_amax(float amax, int bf16_rule) {
  if (!bf16_rule) return amax / kScaleDenominator;
  const float p = amax * (1.0f / kScaleDenominator);
  uint32_t u = float_bits(p);
  if ((u & 0x7fffffffu) > 0x7f800000u) return p;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bits_float(u & 0xffff0000u);
}

H3RT_HD inline int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}
// Block-scale matrix of an [rows, cols] tensor: [roundup(rows, 128), roundup(cols / 16, 4)].
H3RT_HD inline int64_t scale_rows(int64_t rows) {
  return round_up(rows, 128);
}
H3RT_HD inline int64_t scale_cols(int64_t cols) {
  return round_up(cols / kBlock, 4);
}

// Byte offset of block scale (r, c) in the tiled layout: 128-row x 4-column tiles of 512 bytes,
// tiles row-major (ceil(Kb/4) per tile row); inside a tile, row r%32 selects a 16-byte group,
// (r%128)/32 a 4-byte word in it and c%4 the byte. kb = cols / 16 (unpadded).
H3RT_HD inline int64_t scale_offset(int64_t r, int64_t c, int64_t kb) {
  const int64_t tiles_per_row = (kb + 3) / 4;
  return ((r / 128 * tiles_per_row + c / 4) * 32 + r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

// The real value the e4m3 block scale rounds from: min(amax / 6 / g, 448), two IEEE divisions
// in this order. 0/0 (an all-zero block with g == 0) gives 0, so such a block gets scale 0.
// Callers convert the result with a satfinite RNE e4m3 conversion.
H3RT_HD inline float scale_quotient(float block_amax, float g) {
  float q = block_amax / kE2m1Max / g;
  if (q != q) return 0.0f;
  return q < kE4m3Max ? q : kE4m3Max;
}

// e2m1 code magnitude (0..7) of v = |x| / d already rounded to float, v >= 0 or NaN (NaN -> 7):
// round to nearest, ties to even, saturating at 6 (equivalent to clamp to [-6, 6] first).
// Thresholds are the midpoints between neighbouring codes; an exact midpoint goes to the even
// code (0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
H3RT_HD inline uint32_t e2m1_magnitude(float v) {
  if (!(v <= 5.0f)) return 7u;
  return static_cast<uint32_t>(v > 0.25f) + static_cast<uint32_t>(v >= 0.75f) +
         static_cast<uint32_t>(v > 1.25f) + static_cast<uint32_t>(v >= 1.75f) +
         static_cast<uint32_t>(v > 2.5f) + static_cast<uint32_t>(v >= 3.5f);
}

// RN(a / d) for a >= 0 and d in [kRecipMinDivisor, kRecipMaxDivisor] with r = RN(1 / d),
// through Markstein's correction: q0 = RN(a * r) is within one ulp of a / d, the residual
// a - d * q0 is exact in an fma (for a >= 2^-100 it is a multiple of 2^-149), and
// RN(q0 + residual * r) is then the correctly rounded quotient whenever q0 is normal. Outside
// that range the result is used only through e2m1_magnitude, where it gives the same code as the
// IEEE quotient: a < 2^-100 over d >= 2^-90 is below 2^-10 (code 0) and q0 >= 8 saturates
// (tests/cpu/test_nvfp4.cpp checks bits and codes against IEEE division).
inline constexpr float kRecipMinDivisor = 0x1p-90f;
inline constexpr float kRecipMaxDivisor = 0x1p100f;
H3RT_HD inline float div_by_reciprocal(float a, float d, float r) {
#if defined(__CUDA_ARCH__)
  float q0 = __fmul_rn(a, r);
  if (!(q0 < 8.0f)) return q0;
  float res = __fmaf_rn(-d, q0, a);
  return __fmaf_rn(res, r, q0);
#else
  float q0 = a * r;
  if (!(q0 < 8.0f)) return q0;
  float res = __builtin_fmaf(-d, q0, a);
  return __builtin_fmaf(res, r, q0);
#endif
}

}  // namespace h3rt::nvfp4
