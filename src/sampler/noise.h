// h3rt's seeded Gaussian noise: a public contract. The latents a seed produces must not change
// between versions, hosts or GPUs, so every step below is exact integer arithmetic or float32
// arithmetic with one correctly rounded IEEE operation at a time (fp_exact.h), and the
// transcendental functions are our own fixed polynomials instead of a libm's.
//
// Value i (i >= 0) of the sequence (seed, stream), written to out[k] for i = offset + k:
//   1. Philox4x32-10 (Salmon et al., SC11; multipliers 0xD2511F53, 0xCD9E8D57, Weyl key
//      increments 0x9E3779B9, 0xBB67AE85) with key = (lo32(seed), hi32(seed)) and
//      counter = (lo32(i/4), hi32(i/4), lo32(stream), hi32(stream)) gives words x0..x3.
//   2. Lane l = i % 4 uses the pair p = l / 2, i.e. words (a, b) = (x[2p], x[2p+1]):
//        u = (2*(a >> 9) + 1) * 2^-24      uniform in (0, 1), exact in float32
//        k = b >> 8                         angle 2*pi*k/2^24, reduced exactly in integers:
//                                           q = (k + 2^21) >> 22, rem = k - q*2^22 in
//                                           [-2^21, 2^21), phi = float(rem) * 0x1.921fb6p-22f
//                                           (float32(2*pi) * 2^-24, one rounding), |phi| <= pi/4
//        r = sqrt(-2 * det_log(u))
//        even lane: r * cos(q*pi/2 + phi), odd lane: r * sin(q*pi/2 + phi)
//      (Box-Muller), where cos/sin of phi are det_cos/det_sin and the quadrant q only swaps
//      and negates them.
// Seeds and streams in use: video noise is stream 0, drawn as the [1, 24, T, Hl, Wl] latent
// (flat index = element index) and then patchified; audio noise is stream 1, drawn directly
// in row layout [2N, 32]. This mirrors the reference pipeline's draw order, though not its
// generator (torch's), whose values cannot be reproduced.
//
// The operation order of this file and its hexadecimal coefficients define the bits: any change
// changes the latents of every seed, so treat one as a versioned break of the contract.
// Accuracy: det_log, det_sin and det_cos are within a few float32 ulps of the exact functions
// on the ranges used; the normals agree with a float64 Box-Muller on the same Philox words
// to 2.5e-7 relative (measured over 2^20 values).
#pragma once

#include <cstdint>
#include <cstring>

#include "sampler/fp_exact.h"

namespace h3rt::noise {

struct Words4 {
  uint32_t v[4];
};

H3RT_HD inline uint32_t mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// Philox4x32-10: ten rounds, the key bumped by the Weyl constants between rounds.
H3RT_HD inline Words4 philox4x32_10(Words4 c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = mulhi32(0xD2511F53u, c.v[0]), lo0 = 0xD2511F53u * c.v[0];
    const uint32_t hi1 = mulhi32(0xCD9E8D57u, c.v[2]), lo1 = 0xCD9E8D57u * c.v[2];
    c = Words4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Natural log of a positive normal float: x = m * 2^e with m in [sqrt(1/2), sqrt(2)) taken
// from the bits, ln m = 2 atanh(s) with s = (m-1)/(m+1), |s| < 0.172, by its odd series to
// s^11, and e*ln2 added in two parts (ln2_hi has 15 significant bits, so e*ln2_hi is exact).
H3RT_HD inline float det_log(float x) {
  using namespace h3rt::fp;
  const uint32_t bits = float_bits(x);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  float m = bits_float((bits & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  if (m > 0x1.6a09e6p+0f) {  // float32(sqrt(2)); the halving is exact
    m = mul(m, 0.5f);
    e += 1;
  }
  const float s = div(sub(m, 1.0f), add(m, 1.0f));  // m - 1 is exact (Sterbenz)
  const float z = mul(s, s);
  float p = 0x1.745d18p-4f;            // 1/11
  p = add(mul(p, z), 0x1.c71c72p-4f);  // 1/9
  p = add(mul(p, z), 0x1.24924ap-3f);  // 1/7
  p = add(mul(p, z), 0x1.99999ap-3f);  // 1/5
  p = add(mul(p, z), 0x1.555556p-2f);  // 1/3
  const float two_s = add(s, s);
  const float log_m = add(two_s, mul(mul(two_s, z), p));
  const float ef = static_cast<float>(e);
  const float ln2_hi = 0x1.62e4p-1f, ln2_lo = 0x1.7f7d1cp-20f;
  return add(mul(ef, ln2_hi), add(log_m, mul(ef, ln2_lo)));
}

// sin and cos on [-pi/4, pi/4] by their Taylor series (truncation error < 2e-9 there).
H3RT_HD inline float det_sin(float a) {
  using namespace h3rt::fp;
  const float z = mul(a, a);
  float p = 0x1.71de3ap-19f;             // 1/9!
  p = add(mul(p, z), -0x1.a01a02p-13f);  // -1/7!
  p = add(mul(p, z), 0x1.111112p-7f);    // 1/5!
  p = add(mul(p, z), -0x1.555556p-3f);   // -1/3!
  return add(a, mul(mul(a, z), p));
}

H3RT_HD inline float det_cos(float a) {
  using namespace h3rt::fp;
  const float z = mul(a, a);
  float p = -0x1.27e4fcp-22f;            // -1/10!
  p = add(mul(p, z), 0x1.a01a02p-16f);   // 1/8!
  p = add(mul(p, z), -0x1.6c16c2p-10f);  // -1/6!
  p = add(mul(p, z), 0x1.555556p-5f);    // 1/4!
  p = add(mul(p, z), -0.5f);             // -1/2!
  return add(1.0f, mul(z, p));
}

// Two normals from one pair of Philox words (see the contract above).
H3RT_HD inline void box_muller(uint32_t a, uint32_t b, float* z_cos, float* z_sin) {
  using namespace h3rt::fp;
  const float u = mul(static_cast<float>(2u * (a >> 9) + 1u), 0x1p-24f);  // exact
  const float r = fp::sqrt(mul(-2.0f, det_log(u)));
  const uint32_t k = b >> 8;                       // 24-bit angle, 2^24 = 2*pi
  const uint32_t q_full = (k + (1u << 21)) >> 22;  // nearest quarter turn
  const int32_t rem = static_cast<int32_t>(k) - static_cast<int32_t>(q_full << 22);
  const float phi = mul(static_cast<float>(rem), 0x1.921fb6p-22f);  // float(2*pi) * 2^-24
  const float c = det_cos(phi), s = det_sin(phi);
  // Rotate by q quarter turns: swap on odd q, then negate cos for q in {1, 2}, sin for q >= 2.
  const uint32_t q = q_full & 3u;
  const float cs0 = (q & 1u) ? s : c, sn0 = (q & 1u) ? c : s;
  const float cs = (q == 1u || q == 2u) ? -cs0 : cs0;
  const float sn = (q >= 2u) ? -sn0 : sn0;
  *z_cos = mul(r, cs);
  *z_sin = mul(r, sn);
}

// Values 4*block .. 4*block+3 of the (seed, stream) sequence.
H3RT_HD inline void gaussian4(uint64_t seed, uint64_t stream, uint64_t block, float out[4]) {
  const Words4 w =
      philox4x32_10(Words4{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                            static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  box_muller(w.v[0], w.v[1], &out[0], &out[1]);
  box_muller(w.v[2], w.v[3], &out[2], &out[3]);
}

// Writes values [offset, offset + n) to out[0, n): the loop every backend runs, one block of
// four at a time (the CUDA kernel runs the same per-block body, one block per thread).
H3RT_HD inline void gaussian_block_store(uint64_t seed, uint64_t stream, uint64_t offset,
                                         float* out, uint64_t n, uint64_t block) {
  float v[4];
  gaussian4(seed, stream, block, v);
  for (uint64_t lane = 0; lane < 4; ++lane) {
    const uint64_t i = 4 * block + lane;  // sequence index
    if (i >= offset && i - offset < n) out[i - offset] = v[lane];
  }
}

}  // namespace h3rt::noise
