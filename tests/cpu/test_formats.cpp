// Exhaustive and dense checks of the host number formats (include/h3rt/formats.h) against an
// independent reference written here with integer arithmetic only: a float is taken apart into
// sign, integer significand and exponent, rounded to nearest-even by shifting, and re-encoded.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "h3rt/formats.h"

namespace h3rt {
namespace {

// A binary format with `mbits` stored mantissa bits, minimum normal exponent `emin`, exponent
// bias `bias` and subnormals. Overflow saturates to `max_code` (satfinite) or gives `inf_code`.
struct Format {
  int mbits, emin, bias;
  uint32_t max_code;  // largest finite magnitude code
  bool saturate;      // satfinite (true) or overflow to infinity (false)
  uint32_t inf_code;
  int sign_bit;  // position of the sign in the code
};

constexpr Format kBf16{7, -126, 127, 0x7f7f, false, 0x7f80, 15};
constexpr Format kF16{10, -14, 15, 0x7bff, false, 0x7c00, 15};
constexpr Format kE4m3{3, -6, 7, 0x7e, true, 0, 7};
constexpr Format kE2m1{1, 0, 1, 0x7, true, 0, 3};

// Rounds the magnitude of a finite float (bits u, sign ignored) to `f`, returning the magnitude
// code. Integer arithmetic only.
uint32_t ref_round(uint32_t u, const Format& f) {
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t e = a >> 23, m = a & 0x7fffffu;
  if (a == 0) return 0;
  // value = sig * 2^exp2, sig < 2^24
  const uint64_t sig = e ? (m | 0x800000u) : m;
  const int exp2 = e ? static_cast<int>(e) - 150 : -149;
  int lg = 63 - std::countl_zero(sig) + exp2;              // floor(log2(value))
  const int qexp = (lg < f.emin ? f.emin : lg) - f.mbits;  // quantum exponent
  const int shift = qexp - exp2;
  uint64_t r;  // value in quanta, rounded to nearest even
  if (shift <= 0) {
    if (-shift > 40)
      r = uint64_t{1} << 40;  // far beyond any format here: overflows below
    else
      r = sig << -shift;
  } else if (shift > 30) {
    r = 0;
  } else {
    r = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
  }
  // Encode r * 2^qexp: r < 2^(mbits+1) here unless rounding carried into the next binade.
  int be = qexp + f.mbits - f.emin + 1;  // biased exponent when r is normalised
  if (r >= (uint64_t{2} << f.mbits)) {   // carried: r == 2^(mbits+1)
    r >>= 1;
    ++be;
  }
  uint32_t code;
  if (r < (uint64_t{1} << f.mbits))
    code = static_cast<uint32_t>(r);  // subnormal (be == 1)
  else
    code =
        static_cast<uint32_t>(be) << f.mbits | static_cast<uint32_t>(r - (uint64_t{1} << f.mbits));
  if (r >= (uint64_t{1} << 40) || code > f.max_code) return f.saturate ? f.max_code : f.inf_code;
  return code;
}

// The reference conversion of a finite or infinite float.
uint32_t ref_convert(uint32_t u, const Format& f) {
  const uint32_t sign = (u >> 31) << f.sign_bit;
  if ((u & 0x7fffffffu) == 0x7f800000u) return sign | (f.saturate ? f.max_code : f.inf_code);
  return sign | ref_round(u, f);
}

// Every pattern where u % stride == 0, plus the exact ties, their neighbours and the boundaries of
// `f`: for each code magnitude c (and the first overflow step), the float at the midpoint between
// c and c+1 and the floats one ulp either side, in both signs.
std::vector<uint32_t> special_inputs(const Format& f, int max_be) {
  std::vector<uint32_t> out;
  for (int be = 0; be <= max_be; ++be) {
    for (uint32_t man = 0; man < (1u << f.mbits); ++man) {
      // value of code (be, man) and the next one up, as doubles (exact)
      const int e = (be == 0 ? 1 : be) - f.bias;
      const double v = std::ldexp((be == 0 ? 0.0 : 1.0) + man / double(1u << f.mbits), e);
      const double q = std::ldexp(1.0, e - f.mbits);
      for (double x : {v, v + q / 2}) {
        const float fx = static_cast<float>(x);
        if (static_cast<double>(fx) != x || !std::isfinite(fx)) continue;
        const uint32_t b = std::bit_cast<uint32_t>(fx);
        for (uint32_t d : {b - 1, b, b + 1}) {
          out.push_back(d);
          out.push_back(d | 0x80000000u);
        }
      }
    }
  }
  return out;
}

// Checks `conv` against the reference on: every `dense`-th mantissa of the float binades with
// exponent field in [lo, hi] (where the format's rounding happens), every `sparse`-th pattern of
// the other binades (plain zero or saturation), all exact ties with their neighbours, and `extra`.
template <typename Conv>
void sweep(const Format& f, int max_be, uint32_t lo, uint32_t hi, uint32_t dense, uint32_t sparse,
           Conv conv, const char* name, const std::vector<uint32_t>& extra = {}) {
  uint64_t bad = 0, n = 0;
  auto check = [&](uint32_t u) {
    ++n;
    if ((u & 0x7fffffffu) > 0x7f800000u) return;  // NaN: tested separately
    const uint32_t want = ref_convert(u, f), got = conv(std::bit_cast<float>(u));
    if (got != want && bad++ < 5)
      ADD_FAILURE() << name << "(" << std::bit_cast<float>(u) << " = 0x" << std::hex << u
                    << ") = 0x" << got << ", reference 0x" << want;
  };
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t e = 0; e < 256; ++e) {
      const uint32_t step = (e >= lo && e <= hi) ? dense : sparse;
      for (uint32_t m = (e * 131) % step; m < (1u << 23); m += step)
        check(sign << 31 | e << 23 | m);
    }
  for (uint32_t u : special_inputs(f, max_be)) check(u);
  for (uint32_t u : extra) check(u);
  EXPECT_EQ(bad, 0u) << name << " (" << n << " inputs)";
}

TEST(Formats, Bf16AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(back))) << b;
      EXPECT_EQ(back >> 15, b >> 15) << b;
    } else {
      ASSERT_EQ(back, b);
    }
  }
}

TEST(Formats, F16AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    // the value, independently: sign * (implicit bit + man) * 2^(exp - 25)
    const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 31  ? INFINITY
               : e == 0 ? std::ldexp(m, -24)
                        : std::ldexp(m | 0x400, int(e) - 25);
    if (h & 0x8000) v = -v;
    ASSERT_EQ(static_cast<double>(f), v) << h;
    ASSERT_EQ(f32_to_f16(f), h);
  }
}

TEST(Formats, SmallFormatsAllCodesRoundTrip) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float f = e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(f32_to_e4m3_satfinite(f), 0x7f);
      continue;
    }
    EXPECT_EQ(f32_to_e4m3_satfinite(f), c) << c;
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint32_t c = 0; c < 16; ++c) {
    const float f = e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f, (c & 8 ? -1 : 1) * e2m1[c & 7]);
    EXPECT_EQ(f32_to_e2m1(f), c) << c;
  }
}

TEST(Formats, NanInputs) {
  for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu}) {
    const float n = std::bit_cast<float>(u);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(n))));
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(n))));
    EXPECT_EQ(f32_to_e4m3_satfinite(n), 0x7f);
    EXPECT_EQ(f32_to_e2m1(n), 0x7);
  }
}

// bf16 rounding looks at the low 16 bits only, the same way in every binade: every tie
// (low half 0x8000) and its neighbours for all 2^16 high halves, every 7th pattern of the
// subnormal, unit and overflow binades, a sparse stride elsewhere.
TEST(Formats, Bf16MatchesIntegerReference) {
  std::vector<uint32_t> ties;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      ties.push_back(hi << 16 | lo);
  auto conv = [](float x) { return uint32_t{f32_to_bf16(x)}; };
  sweep(kBf16, 254, 0, 1, 7, 1021, conv, "f32_to_bf16", ties);
  sweep(kBf16, 254, 126, 127, 7, 1u << 23, conv, "f32_to_bf16");
  sweep(kBf16, 254, 253, 254, 7, 1u << 23, conv, "f32_to_bf16");
}

TEST(Formats, F16MatchesIntegerReference) {
  // exponent fields 101..142: 2^-26 (half the smallest subnormal) .. 2^15 (the top binade)
  sweep(
      kF16, 30, 101, 142, 61, 1021, [](float x) { return uint32_t{f32_to_f16(x)}; }, "f32_to_f16");
}

TEST(Formats, E4m3SatfiniteMatchesIntegerReference) {
  // exponent fields 116..136: 2^-11 (below half the smallest subnormal) .. 2^9 (beyond 464)
  sweep(
      kE4m3, 15, 116, 136, 7, 1021, [](float x) { return uint32_t{f32_to_e4m3_satfinite(x)}; },
      "f32_to_e4m3");
  // Named boundaries: 448 is the largest finite value; up to 464 (the midpoint to the absent 480)
  // rounds to it, beyond saturates; 2^-9 is the smallest subnormal and 2^-10 ties to zero.
  EXPECT_EQ(f32_to_e4m3_satfinite(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_satfinite(463.9f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_satfinite(464.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_satfinite(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_satfinite(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_e4m3_satfinite(0x1p-10f), 0x00);
  EXPECT_EQ(f32_to_e4m3_satfinite(0x1.0001p-10f), 0x01);
  EXPECT_EQ(f32_to_e4m3_satfinite(3 * 0x1p-10f), 0x02);  // tie 1.5 quanta -> 2 (even)
  EXPECT_EQ(f32_to_e4m3_satfinite(-0.0f), 0x80);
}

TEST(Formats, E2m1MatchesIntegerReference) {
  // exponent fields 124..129: 2^-3 .. 2^2 (every threshold from 0.25 to 6 lies there)
  sweep(
      kE2m1, 3, 124, 129, 7, 1021, [](float x) { return uint32_t{f32_to_e2m1(x)}; }, "f32_to_e2m1");
  const float in[] = {0.25f, 0.26f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, 6.0f, 7.0f, 1e9f};
  const uint8_t want[] = {0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 7, 7};
  for (size_t i = 0; i < std::size(in); ++i) {
    EXPECT_EQ(f32_to_e2m1(in[i]), want[i]) << in[i];
    EXPECT_EQ(f32_to_e2m1(-in[i]), want[i] | 8) << -in[i];
  }
}

}  // namespace
}  // namespace h3rt
