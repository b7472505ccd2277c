// Scalar number formats on the host: bf16, fp16, fp8 e4m3 (satfinite) and fp4 e2m1.
// Every float -> narrow conversion rounds to nearest, ties to even. These are the bit-level
// references that device code and the NVFP4 packer are tested against.
#pragma once

#include <bit>
#include <cstdint>

namespace h3rt {

// ---- bf16 -------------------------------------------------------------------------------
inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Round a float to the nearest bf16 value, returned as float.
inline float round_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

// ---- fp16 -------------------------------------------------------------------------------
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// ---- fp8 e4m3 (OCP "fn": no infinities, 0x7f/0xff are NaN, max 448) -----------------------
float e4m3_to_f32(uint8_t v);
// Saturating conversion (PTX .satfinite): finite values beyond 448 clamp to +-448; NaN -> 0x7f.
uint8_t f32_to_e4m3_satfinite(float f);

// ---- fp4 e2m1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) ---------------------
float e2m1_to_f32(uint8_t code);  // low 4 bits used
// Saturating conversion: |f| > 6 gives +-6; NaN gives +6 (codes only encode finite values).
uint8_t f32_to_e2m1(float f);

}  // namespace h3rt
