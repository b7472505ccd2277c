// The division-free NVFP4 encoder (src/formats/nvfp4_exact_encode.h, run verbatim by the CUDA
// quantizer) against the IEEE-division reference: element codes for every finite bf16 x over
// many divisors (powers of two, range ends, random, and divisors that put x / d within a few ulps
// of a rounding threshold), the block-scale quotient for every bf16 amax over many g, and whole
// blocks against nvfp4_quantize.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "formats/nvfp4_exact_encode.h"
#include "formats/nvfp4_layout.h"
#include "h3rt/formats.h"
#include "h3rt/nvfp4.h"
#include "h3rt/tensor.h"

namespace h3rt {
namespace {

// Reference code of one element: e2m1(clamp(x / d, -6, 6)) as nvfp4_encode computes it (the
// magnitude through e2m1_magnitude, which test_nvfp4.cpp checks against f32_to_e2m1).
uint32_t reference_code(uint16_t xb, float d) {
  const float v = bf16_to_f32(xb) / d;
  return nvfp4::e2m1_magnitude(std::fabs(v)) | (std::signbit(v) ? 8u : 0u);
}

// Every finite bf16 bit pattern, encoded eight at a time, against the reference for divisor d.
// Returns the number of mismatching elements (reports the first few).
int check_all_bf16(float d) {
  const nvfp4::E2m1Thresholds t(d);
  int bad = 0;
  for (uint32_t base = 0; base < 0x10000u; base += 8) {
    uint32_t w[4];
    for (int j = 0; j < 4; ++j) w[j] = (base + 2 * j) | (base + 2 * j + 1) << 16;
    const uint32_t got = nvfp4::encode8_exact(w[0], w[1], w[2], w[3], t);
    for (uint32_t i = 0; i < 8; ++i) {
      const uint16_t xb = static_cast<uint16_t>(base + i);
      if ((xb & 0x7f80u) == 0x7f80u) continue;  // inf / NaN: not given a defined encoding
      const uint32_t code = (got >> (8 * (i / 2) + ((i & 1) ? 0 : 4))) & 0xfu;
      const uint32_t want = reference_code(xb, d);
      if (code != want && bad++ < 5)
        ADD_FAILURE() << "x=" << bf16_to_f32(xb) << " (0x" << std::hex << xb << ") d=" << d
                      << " (0x" << std::bit_cast<uint32_t>(d) << std::dec << "): got " << code
                      << " want " << want;
    }
  }
  return bad;
}

TEST(Nvfp4ExactEncode, BytePermMatchesThePtxDefinition) {
  EXPECT_EQ(nvfp4::byte_perm(0x33221100u, 0x77665544u, 0x7351u), 0x77335511u);
  EXPECT_EQ(nvfp4::byte_perm(0x33221100u, 0x77665544u, 0x5410u), 0x55441100u);
  EXPECT_EQ(nvfp4::byte_perm(0x33221100u, 0x77665544u, 0x7632u), 0x77663322u);
  EXPECT_EQ(nvfp4::byte_perm(0xabcd1234u, 0u, 0x3232u), 0xabcdabcdu);
}

TEST(Nvfp4ExactEncode, CodesMatchDivisionOnPowersOfTwoAndRangeEnds) {
  std::vector<float> ds;
  for (int e = -100; e <= 127; ++e) ds.push_back(std::ldexp(1.0f, e));
  for (float d : {0x1p-100f, 0x1.000002p-100f, 0x1.fffffep-100f, FLT_MAX, 0x1.fffffcp127f,
                  0x1.5p126f, 1.0f / 2688.0f, 448.0f / 2688.0f, 0x1.000002p0f, 0x1.fffffep-1f})
    ds.push_back(d);
  for (float d : ds) ASSERT_EQ(check_all_bf16(d), 0) << "d=" << d;
}

TEST(Nvfp4ExactEncode, CodesMatchDivisionOnRandomDivisorsAndBlockScales) {
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<float> lg(-99.0f, 127.0f);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7fffffu), code(1, 0x7e);
  for (int i = 0; i < 300; ++i) {
    const float d = std::ldexp(1.0f + static_cast<float>(mant(rng)) * 0x1p-23f,
                               static_cast<int>(std::floor(lg(rng))));
    ASSERT_EQ(check_all_bf16(d), 0);
  }
  // Divisors as the quantizer forms them: d = RN(g * e4m3), g a bf16 (the activation rule).
  for (int i = 0; i < 300; ++i) {
    const float g = bf16_to_f32(f32_to_bf16(std::ldexp(1.0f, static_cast<int>(lg(rng) * 0.5f)) *
                                            (1.0f + static_cast<float>(mant(rng)) * 0x1p-23f)));
    const float d = g * e4m3_to_f32(static_cast<uint8_t>(code(rng)));
    if (!(d >= 0x1p-100f && d <= FLT_MAX)) continue;
    ASSERT_EQ(check_all_bf16(d), 0);
  }
}

// Divisors that put some x / d within a few ulps of every rounding threshold, including the
// double-rounding cases (x < m d with RN(x / d) == t, e.g. d = (2^25 + 1) / 3 2^e, x = 2^(e+23)).
TEST(Nvfp4ExactEncode, CodesMatchDivisionNearEveryThreshold) {
  std::mt19937 rng(77);
  std::uniform_int_distribution<uint32_t> xbits(0x0100u, 0x7f00u);
  const float thresholds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  int checked = 0;
  for (int e = -60; e <= 60; e += 17)
    ASSERT_EQ(check_all_bf16(std::ldexp(static_cast<float>((1 << 25) + 1) / 3.0f, e)), 0);
  for (int i = 0; i < 40; ++i) {
    const float x = bf16_to_f32(static_cast<uint16_t>(xbits(rng)));
    for (float t : thresholds) {
      const float d0 = x / t;
      if (!(d0 >= 0x1p-99f && d0 <= 0x1p126f)) continue;
      float d = d0;
      for (int k = 0; k < 3; ++k) d = std::nextafter(d, 0.0f);
      for (int k = -3; k <= 3; ++k, d = std::nextafter(d, INFINITY)) {
        ASSERT_EQ(check_all_bf16(d), 0);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(Nvfp4ExactEncode, DivideBySixIsCorrectlyRoundedForEveryBf16) {
  for (uint32_t b = 0; b < 0x7f80u; ++b) {
    const float a = bf16_to_f32(static_cast<uint16_t>(b));
    ASSERT_EQ(std::bit_cast<uint32_t>(nvfp4::div6(a)), std::bit_cast<uint32_t>(a / 6.0f)) << a;
  }
}

// The block-scale quotient: same e4m3 code as scale_quotient for every bf16 amax, and the same
// bits where the quotient is in [2^-12, 448]; g over bf16 values and random floats in the range.
TEST(Nvfp4ExactEncode, ScaleQuotientMatchesIeeeDivisions) {
  std::vector<float> gs = {nvfp4::kExactScaleMinG, nvfp4::kExactScaleMaxG, 1.0f / 2688.0f,
                           0x1.fffffep-91f * 2.0f, 0x1.fffffep99f};
  for (uint32_t b = 0x1280u; b <= 0x7180u; b += 11)
    gs.push_back(bf16_to_f32(static_cast<uint16_t>(b)));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> lg(-90.0f, 100.0f);
  for (int i = 0; i < 300; ++i) gs.push_back(std::exp2(lg(rng)));
  size_t exact_bits = 0;
  for (float g : gs) {
    const nvfp4::ScaleDivider sd(g);
    ASSERT_TRUE(sd.exact) << g;
    for (uint32_t b = 0; b < 0x7f80u; ++b) {
      const float a = bf16_to_f32(static_cast<uint16_t>(b));
      const float want = nvfp4::scale_quotient(a, g), got = sd.quotient(a);
      if (std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want)) {
        ++exact_bits;
        continue;
      }
      ASSERT_FALSE(want >= 0x1p-12f && want <= nvfp4::kE4m3Max) << a << " / 6 / " << g;
      ASSERT_EQ(f32_to_e4m3_satfinite(got), f32_to_e4m3_satfinite(want)) << a << " / 6 / " << g;
    }
  }
  EXPECT_GT(exact_bits, 10000000u);
  EXPECT_FALSE(nvfp4::ScaleDivider(0.0f).exact);
  EXPECT_FALSE(nvfp4::ScaleDivider(0x1.fffffep-91f).exact);
  EXPECT_FALSE(nvfp4::ScaleDivider(0x1.000002p100f).exact);
}

// Whole blocks: scale byte and packed codes equal to the reference quantizer's.
TEST(Nvfp4ExactEncode, BlocksMatchTheReferenceQuantizer) {
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> lg(-40.0f, 40.0f);
  const int64_t rows = 64, cols = 256, kb = cols / 16;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<uint16_t> x(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      const float row_scale = std::exp2(lg(rng));
      for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = f32_to_bf16(nd(rng) * row_scale);
    }
    for (int k = 0; k < 16; ++k) x[(k * 37) % (rows * cols)] = 0;  // zeros and -0
    x[5] = 0x8000;
    for (int i = 0; i < 16; ++i) x[cols + i] = 0;  // an all-zero block
    Tensor xt(x.data(), DType::bf16, {rows, cols}, {cols, 1}, nullptr, Device::cpu);
    const float amax = abs_max(xt);
    const float g = trial % 3 == 0 ? nvfp4_global_scale_from_amax(amax, Nvfp4ScaleRule::kF32Divide)
                    : trial % 3 == 1
                        ? nvfp4_global_scale_from_amax(amax, Nvfp4ScaleRule::kBf16Activation)
                        : std::exp2(lg(rng));  // a given g: saturated and tiny scales too
    const nvfp4::ScaleDivider sd(g);
    if (!sd.exact) continue;
    const Nvfp4Tensor ref = nvfp4_quantize(xt, g);
    const uint8_t* rq = ref.qdata.ptr<uint8_t>();
    const uint8_t* rs = ref.scales.ptr<uint8_t>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < kb; ++b) {
        const uint16_t* blk = x.data() + r * cols + b * 16;
        uint32_t w[8], a16 = 0;
        for (int j = 0; j < 8; ++j) {
          w[j] = blk[2 * j] | static_cast<uint32_t>(blk[2 * j + 1]) << 16;
          a16 = std::max({a16, blk[2 * j] & 0x7fffu, blk[2 * j + 1] & 0x7fffu});
        }
        const nvfp4::ExactBlockEncoder e(a16, sd);
        ASSERT_EQ(e.s, rs[nvfp4::scale_offset(r, b, kb)]) << "row " << r << " block " << b;
        const uint32_t lo = e.encode8(w[0], w[1], w[2], w[3]),
                       hi = e.encode8(w[4], w[5], w[6], w[7]);
        for (int i = 0; i < 4; ++i) {
          ASSERT_EQ((lo >> (8 * i)) & 0xffu, rq[r * cols / 2 + b * 8 + i]) << r << " " << b;
          ASSERT_EQ((hi >> (8 * i)) & 0xffu, rq[r * cols / 2 + b * 8 + 4 + i]) << r << " " << b;
        }
      }
    }
  }
}

TEST(Nvfp4ExactEncode, DivU31IsExact) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> n31(0, 0x7fffffffu);
  for (uint32_t d :
       {1u, 2u, 3u, 7u, 16u, 336u, 896u, 1000u, 65535u, 65537u, 0x40000001u, 0x7fffffffu}) {
    const nvfp4::DivU31 f(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 0x7fffffffu, 0x7ffffffeu})
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    for (int i = 0; i < 20000; ++i) {
      const uint32_t n = n31(rng);
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
}  // namespace h3rt
