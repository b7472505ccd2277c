// Division-free, bit-exact NVFP4 encoding of bf16 blocks (H3RT_HD: the CUDA quantizer runs this
// code and tests/cpu/test_nvfp4_exact_encode.cpp checks the same code against the reference).
//
// Reference semantics (include/h3rt/nvfp4.h): s = e4m3(min(amax / 6 / g, 448)) with IEEE
// divisions; d = RN(g * float(s)); code = e2m1_magnitude(RN(|x| / d)) | sign(x) << 3; d == 0 gives
// +0 codes. Neither division is done here.
//
// 1. Element codes by thresholds. With y = |x| / d (real) and t_k the e2m1 rounding thresholds
//    (0.25 0.75 1.25 1.75 2.5 3.5 5), the magnitude code is the number of flags set among
//    RN(y) > t_k (t = 0.25 1.25 2.5 5; an exact midpoint rounds to the even code below) and
//    RN(y) >= t_k (t = 0.75 1.75 3.5). Every t_k has an even fp32 significand, so RN(y) > t_k
//    iff y > m_k = t_k + ulp(t_k) / 2, and RN(y) >= t_k iff y >= m_k = t_k - ulp-(t_k) / 2
//    (the midpoints to the fp32 neighbours round to t_k; RN is monotone; overflow to inf counts
//    as above). So flag_k is |x| > m_k * d or |x| >= m_k * d, decided on real numbers.
//    Each m_k = M_k 2^j with M_k odd and exactly 25 bits wide, so for d = D 2^e (D 24 bits)
//    m_k * d has at least 25 significant bits and is never an fp32 value while it is >= 2^-126:
//    |x| (a bf16, hence an fp32) never equals it, both flag forms are |x| > m_k * d, and that is
//    |x| > W_k with W_k = RD_fp32(m_k * d). W_k comes from one fused multiply-add rounding
//    downwards, fma_rd(t_k, d, +-d 2^-j), whose addend d 2^-j is exact for d >= 2^-100
//    (overflow rounds down to FLT_MAX, above every finite x). For a bf16 x >= 0 and fp32 W >= 0,
//    x > W iff bits(x) > bits(W) >> 16 (RZ to bf16; bf16 values order like their bits).
// 2. Two elements per 32-bit word: with p = (bits(|x|) | 0x8000) in each half and
//    u_k = (T_k + 1) * 0x10001 (T_k = bits(W_k) >> 16 <= 0x7f7f), p - u_k never borrows across
//    the halves and bit 15 of each half is the flag |x| > W_k. The flags are monotone in k, so
//    for the count c: bit 0 of c is the XOR of all seven flags, bit 1 the XOR of flags 2, 4, 6
//    and bit 2 is flag 4 (1-based). The code bits (and the sign) of eight elements are then
//    gathered into their nibbles with byte permutes (replicating a flag over its byte) and a
//    bytewise shift-and-insert.
// 3. Block scale without division: q1 = RN(a / 6) = RN(q0 + r (a - 6 q0)) with q0 = RN(a r),
//    r = RN(1/6) (Markstein's correction; checked for every bf16 a), then q = RN(q1 / g) the
//    same way with rg = RN(1/g) for g in [2^-90, 2^100] (the residual is exact there for the
//    quotients that matter, q >= 2^-12; below that any value gives e4m3 code 0, and q0 >= 1024
//    saturates at 448). Other g use the IEEE divisions. With g in that range d = g * s is 0
//    (s == 0, handled by masking the codes to +0) or in [2^-99, 2^109], where step 1 applies.
#pragma once

#include <cfloat>
#include <cstdint>

#include "core/host_device.h"
#include "formats/nvfp4_layout.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif
#if !defined(__CUDA_ARCH__)
#include <cmath>

#include "h3rt/formats.h"
#endif

namespace h3rt::nvfp4 {

// ---- portable primitives (device intrinsics; host emulations with the same results) ----

// __byte_perm for selectors whose nibbles are 0..7 (no sign replication).
H3RT_HD inline uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, sel);
#else
  const uint64_t v = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<uint32_t>((v >> (8 * ((sel >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
#endif
}

H3RT_HD inline float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// RD(a * b + c). Host emulation through double: exact whenever a * b + c is a double, which
// holds for the uses below (a has at most 3 significant bits, c = +-b 2^-j with |c| << |a b|).
H3RT_HD inline float fma_rd(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rd(a, b, c);
#else
  const double v = static_cast<double>(a) * b + c;
  float f = static_cast<float>(v);
  if (static_cast<double>(f) > v) f = std::nextafter(f, -INFINITY);
  return f;
#endif
}

H3RT_HD inline uint8_t e4m3_from_float(float q) {  // RNE, satfinite
#if defined(__CUDA_ARCH__)
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
#else
  return f32_to_e4m3_satfinite(q);
#endif
}

H3RT_HD inline float e4m3_to_float(uint8_t s) {
#if defined(__CUDA_ARCH__)
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(s, __NV_E4M3)));  // exact: e4m3 in f16
#else
  return e4m3_to_f32(s);
#endif
}

// ---- block scale (step 3) ----

inline constexpr float kRecip6 = 1.0f / 6.0f;  // RN(1/6)
inline constexpr float kExactScaleMinG = 0x1p-90f;
inline constexpr float kExactScaleMaxG = 0x1p100f;

// RN(a / 6) for a bf16 value a >= 0 (all 2^15 of them are checked by the CPU test).
H3RT_HD inline float div6(float a) {
  const float q0 = a * kRecip6;
  return fma_rn(fma_rn(-6.0f, q0, a), kRecip6, q0);
}

// The per-tensor part of the block-scale computation: g and, where the exact path applies,
// RN(1 / g). `exact` is false for g outside [2^-90, 2^100] (including g == 0): callers then use
// the division-based encoder.
struct ScaleDivider {
  float g, rg;
  bool exact;
  H3RT_HD explicit ScaleDivider(float g_) : g(g_), rg(0.0f), exact(false) {
    if (g >= kExactScaleMinG && g <= kExactScaleMaxG) {
#if defined(__CUDA_ARCH__)
      rg = __frcp_rn(g);
#else
      rg = 1.0f / g;
#endif
      exact = true;
    }
  }
  // A value with the same e4m3 code as scale_quotient(amax, g), for `exact` and bf16 amax >= 0;
  // bit-identical to it when the quotient lies in [2^-12, 448].
  H3RT_HD float quotient(float amax) const {
    const float q1 = div6(amax);
    const float q0 = q1 * rg;
    const float q = q0 < 1024.0f ? fma_rn(fma_rn(-g, q0, q1), rg, q0) : q0;
    return q < kE4m3Max ? q : kE4m3Max;
  }
};

// ---- element codes (steps 1 and 2) ----

// Paired thresholds u_k = (T_k + 1) * 0x10001 of a block with divisor d in [2^-100, FLT_MAX].
struct E2m1Thresholds {
  uint32_t u[7];
  H3RT_HD explicit E2m1Thresholds(float d) {
    // m_k = t_k +- ulp / 2: 0.25 + 2^-26, 0.75 - 2^-25, 1.25 + 2^-24, 1.75 - 2^-24,
    // 2.5 + 2^-23, 3.5 - 2^-23, 5 + 2^-22 (the addends d 2^-j are exact for d >= 2^-100).
    const float c26 = d * 0x1p-26f, c25 = d * 0x1p-25f, c24 = d * 0x1p-24f, c23 = d * 0x1p-23f,
                c22 = d * 0x1p-22f;
    const float w[7] = {fma_rd(0.25f, d, c26),  fma_rd(0.75f, d, -c25), fma_rd(1.25f, d, c24),
                        fma_rd(1.75f, d, -c24), fma_rd(2.5f, d, c23),   fma_rd(3.5f, d, -c23),
                        fma_rd(5.0f, d, c22)};
    for (int k = 0; k < 7; ++k) u[k] = ((float_bits(w[k]) >> 16) + 1u) * 0x00010001u;
  }
};

// Bit 15 of each half: code bits b0, b1, b2 of the element in that half of `pair` (bf16 bits).
struct CodePlanes {
  uint32_t b0, b1, b2;
};
H3RT_HD inline CodePlanes code_planes(uint32_t pair, const E2m1Thresholds& t) {
  const uint32_t p = pair | 0x80008000u;
  uint32_t r[7];
  for (int k = 0; k < 7; ++k) r[k] = p - t.u[k];
  const uint32_t b1 = r[1] ^ r[3] ^ r[5];
  return {(r[0] ^ r[2] ^ r[4]) ^ b1 ^ r[6], b1, r[3]};
}

// Byte j of the result: 0xff if bit 7 of byte (0x7351 >> 4j) & 7 of {lo, hi} is set, else 0,
// i.e. bit 15 of lo's low half, bit 15 of hi's low half, bit 31 of lo, bit 31 of hi.
H3RT_HD inline uint32_t gather_flags(uint32_t lo, uint32_t hi) {
#if defined(__CUDA_ARCH__)
  uint32_t r;  // selector 0x7351 with the replicate-sign bit set in every nibble
  asm("prmt.b32 %0, %1, %2, 0xfbd9;" : "=r"(r) : "r"(lo), "r"(hi));
  return r;
#else
  const uint32_t g = byte_perm(lo, hi, 0x7351u) & 0x80808080u;
  return (g >> 7) * 0xffu;
#endif
}

// acc shifted left by one bit, with bit 0 of every byte set where `flags` (0x00 / 0xff bytes) is.
H3RT_HD inline uint32_t insert_lsbs(uint32_t acc, uint32_t flags) {
#if defined(__CUDA_ARCH__)
  uint32_t r;  // (acc << 1) | (flags & 0x01010101) in one bit operation (and a multiply-add shift)
  asm("lop3.b32 %0, %1, %2, 0x01010101, 0xf8;" : "=r"(r) : "r"(acc * 2u), "r"(flags));
  return r;
#else
  return (acc << 1) | (flags & 0x01010101u);
#endif
}

// The four pair words of eight consecutive bf16 elements (w[j] holds element 2j in its low and
// 2j+1 in its high half): the two halves of each pair word go to the same nibble of bytes (0, 2)
// or (1, 3) of the output.
struct Pairs8 {
  uint32_t ev0, ev1, od0, od1;  // elements (0, 4), (2, 6), (1, 5), (3, 7)
};
H3RT_HD inline Pairs8 pairs8(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  return {byte_perm(w0, w2, 0x5410u), byte_perm(w1, w3, 0x5410u), byte_perm(w0, w2, 0x7632u),
          byte_perm(w1, w3, 0x7632u)};
}

// Four bytes, element 2j in the high nibble of byte j.
H3RT_HD inline uint32_t encode_pairs8(const Pairs8& q, const E2m1Thresholds& t) {
  const CodePlanes pe0 = code_planes(q.ev0, t), pe1 = code_planes(q.ev1, t);
  const CodePlanes po0 = code_planes(q.od0, t), po1 = code_planes(q.od1, t);
  // Per byte j: the flags of elements 2j (even pair words) and 2j+1 (odd ones) shifted in from
  // the right, the first one ending in bit 7: s b2 b1 b0 of element 2j, then of 2j+1.
  uint32_t acc = gather_flags(q.ev0, q.ev1) & 0x01010101u;  // sign
  acc = insert_lsbs(acc, gather_flags(pe0.b2, pe1.b2));
  acc = insert_lsbs(acc, gather_flags(pe0.b1, pe1.b1));
  acc = insert_lsbs(acc, gather_flags(pe0.b0, pe1.b0));
  acc = insert_lsbs(acc, gather_flags(q.od0, q.od1));  // sign
  acc = insert_lsbs(acc, gather_flags(po0.b2, po1.b2));
  acc = insert_lsbs(acc, gather_flags(po0.b1, po1.b1));
  return insert_lsbs(acc, gather_flags(po0.b0, po1.b0));
}

H3RT_HD inline uint32_t encode8_exact(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3,
                                      const E2m1Thresholds& t) {
  return encode_pairs8(pairs8(w0, w1, w2, w3), t);
}

// One 16-element block: the scale code and the per-element encoder state. Valid when sd.exact.
struct ExactBlockEncoder {
  E2m1Thresholds t;
  uint32_t mask;  // 0 when d == 0 (every code +0)
  uint8_t s;
  H3RT_HD static float divisor(uint8_t s, float g) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(g, e4m3_to_float(s));
#else
    return g * e4m3_to_float(s);
#endif
  }
  // amax16: bf16 bits of the block amax|x|.
  H3RT_HD ExactBlockEncoder(uint32_t amax16, const ScaleDivider& sd)
      : ExactBlockEncoder(e4m3_from_float(sd.quotient(bits_float(amax16 << 16))), sd.g) {}
  H3RT_HD ExactBlockEncoder(uint8_t s_, float g)
      : t(divisor(s_, g)), mask(s_ == 0 ? 0u : ~0u), s(s_) {}
  H3RT_HD uint32_t encode8(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) const {
    return encode8_exact(w0, w1, w2, w3, t) & mask;
  }
  H3RT_HD uint32_t encode(const Pairs8& q) const {
    return encode_pairs8(q, t) & mask;
  }
};

// ---- index arithmetic of the quantize kernels ----

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by one widening multiply: with l = ceil(log2 d),
// p = 31 + l and m = ceil(2^p / d) (< 2^32), floor(n m / 2^p) = floor(n / d) because the excess
// n (m - 2^p / d) / 2^p < n / 2^p < 2^-l <= 1 / d.
struct DivU31 {
  uint32_t m = 1, p = 0;
  DivU31() = default;
  explicit DivU31(uint32_t d) {
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    p = 31 + l;
    m = static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d);
  }
  H3RT_HD uint32_t div(uint32_t n) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> p);
  }
};

}  // namespace h3rt::nvfp4
