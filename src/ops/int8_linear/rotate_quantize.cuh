// Exact device steps of the int8 convrot activation rule (int8_linear.h: the rule and why the
// bits agree with the host), shared by the standalone quantizer (quantize.cu) and the producers
// that rotate and quantize their own output rows (rmsnorm_modulate, swiglu: int8_fused.h).
// A row is staged in shared memory as 512-column units of two 256-column pieces (kPiecePitch
// apart); rotate_unit works on one unit per warp pass, quantize_staged_row on a whole row.
//
// Two forms of the rotation, bit-identical in q and scale (Int8RotateMath, int8_fused.h):
//  - double: the host's double butterflies, operation for operation (int8_linear.h);
//  - integer, the default on the GPUs whose FP64 runs at 1/64 of FP32 (sm_120 / sm_121) and on
//    Hopper (measured faster; elsewhere by request: H3RT_INT8_ROTATE), in tiers chosen per
//    512-column unit (warp-uniform)
//    from the exponents of its groups' nonzero values (span = e_max - e_min; a bf16 value is
//    +-M 2^(e - 134), M < 2^8, subnormals e = 1):
//    1. int32 (every group: span <= 14 and e_min >= 7, rotate_int32.h): one FMA turns each value
//       into an integer plus a magic offset, wrapping 32-bit butterflies, one conversion and one
//       exact power-of-two multiply back. Ordinary activations fall here.
//    2. int64 (every group: span <= kMaxSpan<G> = 45 - log2 G), only where FP64 is slow
//       (int64_tier_compiled; elsewhere such units take the double form): every term is an integer
//       multiple of u = 2^(e_min - 134) below 2^(8 + span) units, so every partial sum of the
//       G-term butterflies lies below G 2^(8 + span) <= 2^53 units: the double butterflies are
//       exact there (the value is representable: u 2^-896 >= 2^-1029 in the double path's scaled
//       domain), and so are int64 butterflies on the terms +-M << (e - e_min). Both hold the exact
//       sum S u. Back to f32: cvt.rn.f32.s64(S) times 2^k, k = e_min - 134 - m (m = log2 sqrt G,
//       k >= -137: an f32 subnormal at worst, exact in f32; multiplied by mul.rn.f32 without
//       .ftz), which is rn_f32(S 2^k), the double path's single rounding: |S| < 2^24 makes the
//       conversion exact and the multiply is then the one rounding; |S| >= 2^24 gives
//       |S 2^k| >= 2^-113, a normal result, where rounding to 24 bits commutes with the exact
//       scaling (overflow: inf both ways).
//    3. double, where some group spans further (values 2^38+ apart in one group of 256, rare):
//       the whole warp rotates that unit with the double form's operations.
//    Tiers 1 and 2 give rn_f32 of the exact sum, which the double butterflies also give wherever
//    tier 2 applies, so the result is the double form's in every case. The sign of a zero may
//    differ (the integer tiers give +0), which never reaches q or s (amax takes |v|, q(+-0) = 0).
//    G = 4 judges a lane's 16 columns at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/int8_linear/int8_fused.h"
#include "ops/int8_linear/int8_math.cuh"
#include "ops/int8_linear/rotate_int32.h"

namespace h3rt::ops::int8_detail {

// Archs (__CUDA_ARCH__ or a binary's version x 10) whose FP64 runs at 1/64 of FP32: the 12.x
// GPUs (GeForce RTX 50xx sm_120, GB10 sm_121). Only there has the integer form an int64 tier.
__host__ __device__ constexpr bool slow_fp64_arch(int arch) {
  return arch >= 1200 && arch < 1300;
}

// The one place that picks the default form per compiled arch: integer on the 12.x GPUs and on
// Hopper (measured on an H200: the team quantizer 6% and the fused norm 8-10% faster than the
// double form, bench/RESULTS.md session 21), double elsewhere (B200: not measured).
__host__ __device__ constexpr bool integer_rotation_default(int arch) {
  return slow_fp64_arch(arch) || (arch >= 900 && arch < 1000);
}

// Whether this compiled kernel's integer form has the int64 tier: only where FP64 is slow. Where
// FP64 runs at half rate (Hopper, B200) the double butterflies cost fewer instructions than int64
// ones (tools/sass/count.sh), so a unit outside the int32 tier goes straight to double there.
__device__ __forceinline__ constexpr bool int64_tier_compiled() {
#ifdef __CUDA_ARCH__
  return slow_fp64_arch(__CUDA_ARCH__);
#else
  return false;
#endif
}

// Whether this compiled kernel rotates in the integer form for `math`.
__device__ __forceinline__ bool integer_rotation(Int8RotateMath math) {
#ifdef __CUDA_ARCH__
  return math == Int8RotateMath::kInteger ||
         (math == Int8RotateMath::kAuto && integer_rotation_default(__CUDA_ARCH__));
#else
  return false;
#endif
}

// s = max(amax / 127, 1e-30) as std::max writes it (a < b ? b : a).
__device__ __forceinline__ float row_scale(float amax) {
  const float a = __fdiv_rn(amax, 127.0f);
  return a < 1e-30f ? 1e-30f : a;
}

// The host's radix-4 butterfly, operation for operation (see the header on a1 - a0).
__device__ __forceinline__ void butterfly(double& a0, double& a1, double& a2, double& a3) {
  const double p = __dadd_rn(a0, a1), d = __dsub_rn(a0, a1);
  const double o0 = __dsub_rn(__dadd_rn(p, a2), a3);
  const double o1 = __dadd_rn(__dsub_rn(p, a2), a3);
  const double o2 = __dadd_rn(__dadd_rn(d, a2), a3);
  const double o3 = __dadd_rn(__dsub_rn(a2, d), a3);
  a0 = o0;
  a1 = o1;
  a2 = o2;
  a3 = o3;
}

// The integer form's butterfly: the same four sums, exact in any order.
__device__ __forceinline__ void butterfly(long long& a0, long long& a1, long long& a2,
                                          long long& a3) {
  const long long p = a0 + a1, d = a0 - a1, s = a2 + a3, t = a2 - a3;
  a0 = p + t;  // a0 + a1 + a2 - a3
  a1 = p - t;  // a0 + a1 - a2 + a3
  a2 = d + s;  // a0 - a1 + a2 + a3
  a3 = s - d;  // -a0 + a1 + a2 + a3
}

// One stage of stride s (1 or 4) over 16 values held in registers.
template <int S, class T>
__device__ __forceinline__ void stage16(T (&a)[16]) {
#pragma unroll
  for (int blk = 0; blk < 16; blk += 4 * S)
#pragma unroll
    for (int t = blk; t < blk + S; ++t) butterfly(a[t], a[t + S], a[t + 2 * S], a[t + 3 * S]);
}

__host__ __device__ constexpr int half_log2(int g) {
  int m = 0;
  while ((1 << (2 * m)) < g) ++m;
  return m;
}

// Row staging: 512-column units (one warp pass: 32 lanes x 16 columns) of two 256-column
// pieces (one bulk copy each).
constexpr int kUnitCols = 512;                 // one warp pass: 32 lanes x 16 columns
constexpr int kPieceBytes = 512;               // 256 bf16 columns: one bulk copy
constexpr int kPiecePitch = kPieceBytes + 32;  // +8 banks: the u16 scatter of G = 256 is
                                               // conflict-free across the two half-warps
constexpr int kUnitPitch = 2 * kPiecePitch;
constexpr int kTile64Bytes = 32 * 17 * 8;  // per-warp transpose tile of doubles

// bf16_bits for every non-NaN f (NaN only arises from non-finite input, which is undefined).
__device__ __forceinline__ uint32_t bf16_bits_finite(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// {bf16(lo), bf16(hi)} packed (lo in bits 0-15): IEEE round-to-nearest-even to bf16, which is the
// host's bit rule for every non-NaN f32 (subnormals kept, as no .ftz is given; overflow -> inf).
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// Each half to at most 127. The lower bound -128 needs no instruction: |v| <= amax,
// bf16(s) >= s (1 - 2^-8), s >= amax / 127 (1 - 2^-24) (the 1e-30 floor only raises s) and rcp,
// t are f32-rounded, so |t| < 127 (1 + 2^-22) / (1 - 2^-8) < 127.75, whose bf16 rounding is at
// most 127.5 in magnitude, and rne(-127.5) = -128: clamping below would change nothing.
__device__ __forceinline__ uint32_t bf16x2_clamp_high(uint32_t v) {
  asm("min.bf16x2 %0, %0, %1;" : "+r"(v) : "r"(0x42FE42FEu));  // 127
  return v;
}

// scaled_double with an arithmetic shift: the same bits (sign at 31, magnitude at 13..27).
__device__ __forceinline__ double scaled_double_sar(uint32_t w, bool high) {
  const int32_t v = high ? static_cast<int32_t>(w) : static_cast<int32_t>(w << 16);
  return __hiloint2double(static_cast<int>(static_cast<uint32_t>(v >> 3) & 0x8fffe000u), 0);
}

// Two columns (one staged word: bf16 lo, hi) -> two int8 in the low bytes of the results' bits.
//  - t = v * rcp and bf16(t) as in quantize1 (cvt.rn.bf16x2 is the host's rounding);
//  - clamp(rne(y)) = rne(clamp(y)) for the integer bounds, and min.bf16x2 against the exact bf16
//    value 127 returns one of its operands (the lower bound never binds: bf16x2_clamp_high);
//  - for yc in [-128, 127], yc + 1.5 * 2^23 lies in [2^23, 2^24) (spacing 1) and 1.5 * 2^23 is
//    even, so the f32 add (round to nearest even) gives 1.5 * 2^23 + rne(yc) exactly, whose bits
//    are 0x4B400000 + rne(yc): the low byte is rne(yc) as int8.
__device__ __forceinline__ void quantize2(uint32_t w, float rcp, uint32_t& q0, uint32_t& q1) {
  const float t0 = __fmul_rn(__uint_as_float(w << 16), rcp);
  const float t1 = __fmul_rn(__uint_as_float(w & 0xffff0000u), rcp);
  const uint32_t y = bf16x2_clamp_high(bf16x2_bits(t0, t1));
  q0 = __float_as_uint(__fadd_rn(__uint_as_float(y << 16), 12582912.0f));
  q1 = __float_as_uint(__fadd_rn(__uint_as_float(y & 0xffff0000u), 12582912.0f));
}

// 16 bf16 columns (8 words, column order) -> 16 int8 bytes.
__device__ __forceinline__ uint4 quantize16(const uint4 (&v)[2], float rcp) {
  const uint32_t w[8] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t q0, q1, q2, q3;
    quantize2(w[2 * i], rcp, q0, q1);
    quantize2(w[2 * i + 1], rcp, q2, q3);
    o[i] = __byte_perm(__byte_perm(q0, q1, 0x0040), __byte_perm(q2, q3, 0x0040), 0x5410);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// transpose() with whole words (double, int64 or 32-bit, as the tile's element type): lane L
// stores a[c] at tile[L * 17 + c], then loads the words `src(c)` names. The odd pitch keeps each
// half-warp's 16 stores, and the G = 256 loads, on distinct banks (bank pairs for 64-bit words).
// Moving words through memory keeps their bits.
template <class T, class Src>
__device__ __forceinline__ void transpose_tile(T (&a)[16], double* tile2, int lane, Src src) {
  T* const tile = reinterpret_cast<T*>(tile2);
#pragma unroll
  for (int c = 0; c < 16; ++c) tile[lane * 17 + c] = a[c];
  __syncwarp();
#pragma unroll
  for (int c = 0; c < 16; ++c) a[c] = tile[src(c)];
  __syncwarp();
}

// The butterfly stages of rotate<G> after the first on this lane's 16 values (slot order
// afterwards: see below).
template <int G, class T>
__device__ __forceinline__ void rotate16_rest(T (&a)[16], double* tile2, int lane) {
  if constexpr (G >= 16) stage16<4>(a);
  // After the transpose, as in rotate<G>: G = 64: lane 4g + u holds columns 16 d2 + 4u + d0
  // (slot 4 d2 + d0) of group g; G = 256: lane 16g + u holds columns 16 d + u (slot d).
  if constexpr (G == 64) {
    const int g0 = lane & ~3, u = lane & 3;
    transpose_tile(a, tile2, lane, [&](int j) { return (g0 + j / 4) * 17 + 4 * u + j % 4; });
    stage16<4>(a);
  } else if constexpr (G == 256) {
    const int g0 = lane & ~15, u = lane & 15;
    transpose_tile(a, tile2, lane, [&](int j) { return (g0 + j) * 17 + u; });
    stage16<1>(a);
    stage16<4>(a);
  }
}

// The butterfly stages of rotate<G> on this lane's 16 values.
template <int G, class T>
__device__ __forceinline__ void rotate16(T (&a)[16], double* tile2, int lane) {
  stage16<1>(a);
  rotate16_rest<G>(a, tile2, lane);
}

// Writes the f32 results of rotate16 (slot order) back into the unit as bf16 in column order and
// raises mf to their largest magnitude (max |bf16(f)| = bf16(max |f|): the rounding is monotone
// and odd).
template <int G>
__device__ __forceinline__ void store_rotated(const float (&f)[16], unsigned char* unit, int lane,
                                              float& mf) {
  uint32_t b[8];  // bf16 pairs: slots 2i (low half) and 2i + 1
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    mf = fmaxf(mf, fmaxf(fabsf(f[2 * i]), fabsf(f[2 * i + 1])));
    b[i] = bf16x2_bits(f[2 * i], f[2 * i + 1]);
  }
  if constexpr (G <= 16) {  // slots are this lane's own columns
    uint4* own = reinterpret_cast<uint4*>(unit + (lane >> 4) * kPiecePitch + (lane & 15) * 32);
    own[0] = make_uint4(b[0], b[1], b[2], b[3]);
    own[1] = make_uint4(b[4], b[5], b[6], b[7]);
  } else {
    // Slot j's column, relative to a per-lane base: G = 64: 16 (j / 4) + j % 4 after
    // 64 ((lane >> 2) & 3) + 4 (lane & 3); G = 256: 16 j after lane & 15; the piece is lane >> 4.
    unsigned char* const base =
        unit + (lane >> 4) * kPiecePitch +
        (G == 64 ? 64 * ((lane >> 2) & 3) + 4 * (lane & 3) : (lane & 15)) * 2;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int rel = G == 64 ? 16 * (j / 4) + j % 4 : 16 * j;
      const uint32_t pair = b[j / 2];
      *reinterpret_cast<uint16_t*>(base + 2 * rel) =
          static_cast<uint16_t>(j % 2 ? pair >> 16 : pair & 0xffffu);
    }
  }
}

// ---- the double form: rotate<G>'s operations ----
template <int G>
__device__ __forceinline__ void rotate_unit_double(const uint32_t (&w)[8], unsigned char* unit,
                                                   double* tile2, int lane, float& mf) {
  double a[16];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = scaled_double_sar(w[i], false);
    a[2 * i + 1] = scaled_double_sar(w[i], true);
  }
  rotate16<G>(a, tile2, lane);
  const double back = __hiloint2double((1023 + 896 - half_log2(G)) << 20, 0);  // 2^(896-m)
  float f[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) f[j] = __double2float_rn(__dmul_rn(a[j], back));
  store_rotated<G>(f, unit, lane, mf);
}

// ---- the integer form (header): exact int64 sums where every group's span allows ----

// Largest exponent span of one group's nonzero values for which the double butterflies are
// exact: G terms below 2^(8 + span) units sum below 2^53 units.
template <int G>
inline constexpr int kMaxSpan = 45 - 2 * half_log2(G);

// The bf16 magnitude range of this lane's 16 values, widened to its group's (G >= 64: the
// lanes of one group share it, before and after the transpose): lo = the least NONZERO
// magnitude (15 bits; 0x8000 when all are zero), hi = the largest. Per 16-bit half,
// y = (h | 0x8000) - 1 = 0x7fff + |h| (no borrow crosses the halves): as s16 its minimum is the
// least nonzero magnitude's (zeros give +0x7fff), as u16 its maximum the largest's. The lanes
// then reduce one word: low half the s16 minimum as a u16 key (y ^ 0x7fff, larger for smaller
// magnitudes, 0 for zeros), high half the u16 maximum.
template <int G>
__device__ __forceinline__ void group_magnitudes(const uint32_t (&w)[8], uint32_t& lo,
                                                 uint32_t& hi) {
  uint32_t mn = 0x7fff7fffu, mx = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t y = (w[i] | 0x80008000u) - 0x00010001u;
    mn = __vmins2(mn, y);
    mx = __vmaxu2(mx, y);
  }
  const uint32_t key = mn ^ 0x7fff7fffu;
  uint32_t pk = __vmaxu2(__byte_perm(key, mx, 0x5410), __byte_perm(key, mx, 0x7632));
  constexpr int lanes = G >= 16 ? G / 16 : 1;  // lanes per group
#pragma unroll
  for (int o = 1; o < lanes; o <<= 1) pk = __vmaxu2(pk, __shfl_xor_sync(0xffffffffu, pk, o));
  const uint32_t k = pk & 0xffffu;
  hi = (pk >> 16) - 0x7fffu;
  lo = k ? (k ^ 0x7fffu) - 0x7fffu : 0x8000u;
}

// exp(m) = max(m >> 7, 1): the e of a magnitude's M 2^(e - 134).
__device__ __forceinline__ int bf16_exp(uint32_t mag) {
  return max(static_cast<int>(mag >> 7), 1);
}

// Signed integer M 2^(e - e_min) of bf16 bits h (low 16 bits; zero for +-0 whatever e_min).
__device__ __forceinline__ long long fixed_term(uint32_t h, int e_min) {
  const uint32_t mag = h & 0x7fffu;
  const int e = bf16_exp(mag);
  const int m = static_cast<int>(mag) + 128 - (e << 7);  // 0x80 | mantissa; subnormal: mantissa
  const int sm = (h & 0x8000u) ? -m : m;
  return static_cast<long long>(sm) << (max(e, e_min) - e_min);
}

// rn_f32(s 2^(e_min - 134 - mlog)): one correctly rounded conversion, then an exact power of two
// (an f32 subnormal for k < -126; mul.rn.f32 without .ftz keeps it).
__device__ __forceinline__ float fixed_to_f32(long long s, float pow2) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(__ll2float_rn(s)), "f"(pow2));
  return r;
}

// The int32 tier (rotate_int32.h): this lane's group has span <= kMaxSpan32, e_min >= kMinExp32.
template <int G>
__device__ __forceinline__ void rotate_unit_int32(const uint32_t (&w)[8], int e_min,
                                                  unsigned char* unit, double* tile2, int lane,
                                                  float& mf) {
  const float up = pow2f(134 - e_min);  // e_min in [7, 254]
  uint32_t a[16];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = term32(__uint_as_float(w[i] << 16), up);
    a[2 * i + 1] = term32(__uint_as_float(w[i] & 0xffff0000u), up);
  }
#pragma unroll
  for (int t = 0; t < 16; t += 4) butterfly_unbias(a[t], a[t + 1], a[t + 2], a[t + 3]);
  rotate16_rest<G>(a, tile2, lane);
  const float down = pow2f(e_min - 134 - half_log2(G));  // in [-131, 120]
  float f[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) f[j] = from32(a[j], down);
  store_rotated<G>(f, unit, lane, mf);
}

template <int G>
__device__ __forceinline__ void rotate_unit_integer(const uint32_t (&w)[8], int e_min,
                                                    unsigned char* unit, double* tile2, int lane,
                                                    float& mf) {
  long long a[16];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = fixed_term(w[i], e_min);
    a[2 * i + 1] = fixed_term(w[i] >> 16, e_min);
  }
  rotate16<G>(a, tile2, lane);
  const int k = e_min - 134 - half_log2(G);  // in [-137, 120]
  const float pow2 = __uint_as_float(k >= -126 ? uint32_t(k + 127) << 23 : 1u << (k + 149));
  float f[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) f[j] = fixed_to_f32(a[j], pow2);
  store_rotated<G>(f, unit, lane, mf);
}

// Rotates this lane's 16 columns (`raw`) of the 512-column unit at `unit` (two 256-column pieces
// kPiecePitch apart) exactly as rotate<G> does (double form, or the integer form's tiers when
// `integer`: the same bits, header), writes the bf16 results back into the unit in column order
// and raises mf to the largest |f32 result|. Called by the whole warp with a warp-uniform
// `integer`; `tiers` (tests; null: off) counts the units the integer form rotated in double
// (tiers[0]) and in int64 (tiers[1]; only where int64_tier_compiled()).
template <int G>
__device__ __forceinline__ void rotate_unit(const uint4 (&raw)[2], unsigned char* unit,
                                            double* tile2, int lane, float& mf, bool integer,
                                            uint32_t* tiers = nullptr) {
  const uint32_t w[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w,
                         raw[1].x, raw[1].y, raw[1].z, raw[1].w};
  if (integer) {
    uint32_t lo, hi;
    group_magnitudes<G>(w, lo, hi);
    const bool zero = lo > 0x7fffu;  // every value of the group is +-0
    const int e_lo = bf16_exp(lo), e_hi = bf16_exp(hi);
    if (__all_sync(0xffffffffu, zero || int32_tier(e_lo, e_hi))) {
      rotate_unit_int32<G>(w, zero ? kZeroExp : e_lo, unit, tile2, lane, mf);
      return;
    }
    const int e_min = zero ? 1 : e_lo;
    if (int64_tier_compiled() && __all_sync(0xffffffffu, zero || e_hi - e_min <= kMaxSpan<G>)) {
      if (tiers && lane == 0) atomicAdd(tiers + 1, 1u);
      rotate_unit_integer<G>(w, e_min, unit, tile2, lane, mf);
      return;
    }
    if (tiers && lane == 0) atomicAdd(tiers, 1u);
  }
  rotate_unit_double<G>(w, unit, tile2, lane, mf);
}

// Shared-memory bytes of a staged row of k columns, and of the per-warp transpose tiles that
// quantize_staged_row needs for `warps` warps.
// Static shared memory of quantize_staged_row (one amax slot per warp), beside the caller's
// dynamic stage and tiles.
constexpr int kStagedReduceSlots = 32;
constexpr int kStagedStaticBytes = kStagedReduceSlots * 4;
__host__ __device__ constexpr int staged_row_bytes(int64_t k) {
  return static_cast<int>((k + kUnitCols - 1) / kUnitCols) * kUnitPitch;
}
__host__ __device__ constexpr int staged_tile_bytes(int group, int warps) {
  return group >= 64 ? warps * kTile64Bytes : 0;
}
// Byte offset of column `col` (a multiple of 8: one 16-byte vector) in a staged row.
__device__ __forceinline__ int staged_offset(int col) {
  return (col >> 8) * kPiecePitch + (col & 255) * 2;
}

// Rotates and quantizes the bf16 row staged at `row` (k columns, k % 16 == 0, in the layout
// above) with every warp of the CTA: warp w takes units w, w + W, ... with the team kernel's
// operations (rotate_unit, the bf16 amax, row_scale, quantize16), so the bytes equal the
// standalone quantizer's on the same values (either rotation form: `math`; `tiers` as in
// rotate_unit). Writes q[0, k) and *scale. Called by all threads; begins with a barrier (the
// producer's stores to the stage become visible) and ends with one (the stage, tiles and
// reduction slots may be refilled for the next row).
template <int G>
__device__ __forceinline__ void quantize_staged_row(unsigned char* row, int k, unsigned char* tiles,
                                                    int8_t* q, float* scale, Int8RotateMath math,
                                                    uint32_t* tiers) {
  static_assert(G == 16 || G == 64 || G == 256, "fused producers take G = 16, 64 or 256");
  __shared__ uint32_t red[kStagedReduceSlots];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int units = (k + kUnitCols - 1) / kUnitCols;
  const int lane_off = (lane >> 4) * kPiecePitch + (lane & 15) * 32;
  double* const tile2 = reinterpret_cast<double*>(tiles + (G >= 64 ? warp * kTile64Bytes : 0));
  const bool integer = integer_rotation(math);
  __syncthreads();
  float mf = 0.0f;
  for (int u = warp; u < units; u += nwarps) {
    unsigned char* const unit = row + u * kUnitPitch;
    uint4 raw[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    if (u * kUnitCols + lane * 16 < k) {
      const uint4* own = reinterpret_cast<const uint4*>(unit + lane_off);
      raw[0] = own[0];
      raw[1] = own[1];
    }
    __syncwarp();  // every lane has read its columns before rotate_unit scatters into the unit
    rotate_unit<G>(raw, unit, tile2, lane, mf, integer, tiers);  // zeros past k: zeros
  }
  uint32_t m = __float_as_uint(mf);  // non-negative floats order like their bits
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) red[warp] = m;
  __syncthreads();  // also: every warp's scattered bf16 values are visible below
  for (int v = 0; v < nwarps; ++v) m = max(m, red[v]);
  const float amax = bf16_value(bf16_bits_finite(__uint_as_float(m)));
  const float sc = row_scale(amax);
  const float rcp = __frcp_rn(bf16_value(bf16_bits(sc)));
  if (threadIdx.x == 0) *scale = sc;
  for (int u = warp; u < units; u += nwarps) {
    const int col = u * kUnitCols + lane * 16;
    if (col < k) {
      const uint4* own = reinterpret_cast<const uint4*>(row + u * kUnitPitch + lane_off);
      const uint4 v[2] = {own[0], own[1]};
      *reinterpret_cast<uint4*>(q + col) = quantize16(v, rcp);
    }
  }
  __syncthreads();
}

}  // namespace h3rt::ops::int8_detail
