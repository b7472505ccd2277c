// The int32 tier of the integer rotation form (rotate_quantize.cuh), as scalar steps that the
// GPU kernels and a host test (tests/cpu/test_int8_integer_rotation.cpp) share, so the exactness
// argument below is checked on this machine's CPU too.
//
// A bf16 value is +-M 2^(e - 134) (M < 2^8 an integer, e >= 1). In a group whose nonzero values
// have exponents in [e_min, e_max] with e_max - e_min <= kMaxSpan32 and e_min >= kMinExp32:
//  - in: T = v 2^(134 - e_min) is an integer with |T| < 2^22, and the factor is an f32 (<= 2^127),
//    so fma.rn(v, 2^(134 - e_min), 1.5 2^23) is exact: the result lies in [2^23, 2^24) where f32
//    spacing is 1, and its bits are kMagicBits + T (mod 2^32). One FMA per value, no shifts.
//  - butterflies: the regular H4 butterfly in wrapping 32-bit arithmetic. Every row of H4 sums to
//    2, so the first stage's outputs would carry 2 kMagicBits: butterfly_unbias takes it off
//    inside its sums (three constant adds per four values instead of one per value at the end),
//    and from then on every value is an exact partial sum; |S| < G 2^22 <= 2^30 fits an int32.
//  - out: rn_f32(S) times 2^k, k = e_min - 134 - log2 sqrt(G) >= -131: |S| < 2^24 converts
//    exactly and the multiply (subnormal results kept: no flush) is the one rounding; |S| >= 2^24
//    gives |S 2^k| >= 2^-107, a normal result, where rounding commutes with the exact scaling.
//    So the result is rn_f32(exact sum), the double butterflies' result in such a group (they are
//    exact for spans up to 45 - log2 G).
// A group of zeros takes e_min = kZeroExp (any value in range: every term is 0).
#pragma once

#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define H3RT_ROT_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define H3RT_ROT_HD inline
#endif

namespace h3rt::ops::int8_detail {

inline constexpr int kMaxSpan32 = 14;         // |T| < 2^(8 + span) <= 2^22
inline constexpr int kMinExp32 = 7;           // 2^(134 - e_min) <= 2^127
inline constexpr int kZeroExp = 134;          // e_min of an all-zero group: factor 1
inline constexpr float kMagic = 12582912.0f;  // 1.5 2^23
inline constexpr uint32_t kMagicBits = 0x4B400000u;

// Whether a group (lo, hi: least nonzero and largest bf16 exponent) rotates in the int32 tier.
H3RT_ROT_HD bool int32_tier(int e_lo, int e_hi) {
  return e_lo >= kMinExp32 && e_hi - e_lo <= kMaxSpan32;
}

// 2^k exactly, k in [-149, 127] (subnormal below -126).
H3RT_ROT_HD float pow2f(int k) {
  return std::bit_cast<float>(k >= -126 ? uint32_t(k + 127) << 23 : 1u << (k + 149));
}

// kMagicBits + v 2^(134 - e_min) (mod 2^32); `up` = pow2f(134 - e_min).
H3RT_ROT_HD uint32_t term32(float v, float up) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(v), "f"(up), "f"(kMagic));
  return std::bit_cast<uint32_t>(r);
#else
  return std::bit_cast<uint32_t>(std::fma(v, up, kMagic));
#endif
}

// The regular H4 butterfly (int8_linear.h's signs), wrapping.
H3RT_ROT_HD void butterfly(uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  const uint32_t p = a0 + a1, d = a0 - a1;
  const uint32_t o0 = p + a2 - a3, o1 = p - a2 + a3, o2 = d + a2 + a3, o3 = a2 + a3 - d;
  a0 = o0;
  a1 = o1;
  a2 = o2;
  a3 = o3;
}

// The first stage: inputs kMagicBits + T, outputs the exact four sums (wrapping).
H3RT_ROT_HD void butterfly_unbias(uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  constexpr uint32_t k2 = 2u * kMagicBits;
  const uint32_t p = a0 + a1 - k2, d = a0 - a1 - k2, e = a0 - a1 + k2;
  const uint32_t o0 = p + a2 - a3, o1 = p - a2 + a3, o2 = d + a2 + a3, o3 = a2 + a3 - e;
  a0 = o0;
  a1 = o1;
  a2 = o2;
  a3 = o3;
}

// rn_f32(S 2^k) for an exact sum S (an output of the butterflies); `down` = pow2f(k).
H3RT_ROT_HD float from32(uint32_t s_bits, float down) {
  const int32_t s = static_cast<int32_t>(s_bits);
#if defined(__CUDA_ARCH__)
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(__int2float_rn(s)), "f"(down));
  return r;
#else
  return static_cast<float>(s) * down;
#endif
}

}  // namespace h3rt::ops::int8_detail
