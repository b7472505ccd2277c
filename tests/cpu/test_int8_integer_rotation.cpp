// The integer form of the int8 convrot activation rotation (src/ops/int8_linear/
// rotate_quantize.cuh, used by default on sm_120 / sm_121) emulated on the host and compared bit
// for bit with the host rule (hadamard_rotate_rows, int8_quantize_rows: the double form): fresh
// random rows with wide exponent ranges, zeros of both signs, subnormal bf16, values near the bf16
// maximum, groups at each tier's limits (int32, int64, and the double fallback, which the
// emulation must report), and the golden int8_convrot vectors. The int32 tier runs the device's
// own scalar steps (rotate_int32.h, shared with the kernels); the int64 tier's emulation lives
// here: it proves the device's arithmetic off the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>
#include <vector>

#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/safetensors.h"
#include "ops/int8_linear/rotate_int32.h"
#include "test_util.h"

namespace h3rt {
namespace {

int half_log2(int64_t g) {
  int m = 0;
  while ((int64_t{1} << (2 * m)) < g) ++m;
  return m;
}

// e of a bf16 magnitude M 2^(e - 134) (subnormals: 1).
int bf16_exp(uint32_t mag) {
  return std::max(static_cast<int>(mag >> 7), 1);
}

// One row rotated the device's integer way. Per group of g: e_min / e_max over the nonzero
// values; span <= 14 and e_min >= 7 (or all zeros): the int32 tier, with the kernels' own steps
// (rotate_int32.h); else span <= 45 - log2 g: int64 terms +-M << (e - e_min), the integer
// butterflies, then float(S) (one rounding) times the f32 2^(e_min - 134 - m). Otherwise
// ("fallback", unless `no_fallback`, which a test uses to show that the fallback is needed) the
// host's double form. `no_int32` sends the int32 tier's groups to int64 instead.
struct IntegerRotation {
  std::vector<float> rot;  // f32 results, as hadamard_rotate_rows gives them
  int64_t fallback_groups = 0;
  int64_t int32_groups = 0;
};

// The int32 tier on one group (rotate_int32.h's steps in the host loop's butterfly order).
void rotate_int32(const uint16_t* x, int64_t g, int e_min, float* out) {
  namespace d = ops::int8_detail;
  const int m = half_log2(g);
  std::vector<uint32_t> a(static_cast<size_t>(g));
  const float up = d::pow2f(134 - e_min);
  for (int64_t i = 0; i < g; ++i) a[i] = d::term32(bf16_to_f32(x[i]), up);
  for (int64_t t = 0; t < g; t += 4) d::butterfly_unbias(a[t], a[t + 1], a[t + 2], a[t + 3]);
  for (int64_t s = 4; s < g; s *= 4)
    for (int64_t blk = 0; blk < g; blk += 4 * s)
      for (int64_t t = blk; t < blk + s; ++t)
        d::butterfly(a[t], a[t + s], a[t + 2 * s], a[t + 3 * s]);
  const float down = d::pow2f(e_min - 134 - m);
  for (int64_t j = 0; j < g; ++j) out[j] = d::from32(a[j], down);
}

IntegerRotation rotate_integer(const uint16_t* x, int64_t k, int64_t g, bool no_fallback = false,
                               bool no_int32 = false) {
  const int m = half_log2(g), max_span = 45 - 2 * m;
  IntegerRotation out;
  out.rot.resize(static_cast<size_t>(k));
  std::vector<int64_t> a(static_cast<size_t>(g));
  for (int64_t base = 0; base < k; base += g) {
    uint32_t lo = 0x8000, hi = 0;  // least nonzero and largest magnitude
    for (int64_t i = 0; i < g; ++i) {
      const uint32_t mag = x[base + i] & 0x7fffu;
      hi = std::max(hi, mag);
      if (mag) lo = std::min(lo, mag);
    }
    const bool zero = lo == 0x8000;
    if (!no_int32 && (zero || ops::int8_detail::int32_tier(bf16_exp(lo), bf16_exp(hi)))) {
      ++out.int32_groups;
      rotate_int32(x + base, g, zero ? ops::int8_detail::kZeroExp : bf16_exp(lo),
                   out.rot.data() + base);
      continue;
    }
    const int e_min = zero ? 1 : bf16_exp(lo);
    if (!zero && bf16_exp(hi) - e_min > max_span && !no_fallback) {
      ++out.fallback_groups;
      std::vector<float> v(static_cast<size_t>(g));
      for (int64_t i = 0; i < g; ++i) v[i] = bf16_to_f32(x[base + i]);
      hadamard_rotate_rows(v.data(), out.rot.data() + base, 1, g, g);
      continue;
    }
    for (int64_t i = 0; i < g; ++i) {
      const uint32_t h = x[base + i], mag = h & 0x7fffu;
      const int e = bf16_exp(mag);
      const int64_t mm = static_cast<int64_t>(mag) + 128 - (int64_t{e} << 7);
      const int64_t t = mm * (int64_t{1} << (std::max(e, e_min) - e_min));
      a[i] = (h & 0x8000u) ? -t : t;
    }
    for (int64_t s = 1; s < g; s *= 4)
      for (int64_t blk = 0; blk < g; blk += 4 * s)
        for (int64_t t = blk; t < blk + s; ++t) {
          const int64_t a0 = a[t], a1 = a[t + s], a2 = a[t + 2 * s], a3 = a[t + 3 * s];
          const int64_t p = a0 + a1, d = a0 - a1, sum = a2 + a3, dif = a2 - a3;
          a[t] = p + dif;
          a[t + s] = p - dif;
          a[t + 2 * s] = d + sum;
          a[t + 3 * s] = sum - d;
        }
    const float pow2 = std::ldexp(1.0f, e_min - 134 - m);  // an exact f32, subnormal below -126
    for (int64_t j = 0; j < g; ++j)
      out.rot[base + j] = static_cast<float>(a[j]) * pow2;  // rn int64 -> f32, then exact scaling
  }
  return out;
}

// A fresh seed per run (recorded in the trace): every run draws new rows.
uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The f32 rotation of each row of `x` [rows, k] (bf16 bits) by both forms: results must be the
// same bits but for the sign of a zero (the integer form gives +0), with the int32 tier and
// without it (every integer group in int64). Returns the groups of each tier.
struct Tiers {
  int64_t fallbacks = 0, int32 = 0;
};
Tiers expect_same_rotation(const std::vector<uint16_t>& x, int64_t rows, int64_t k, int64_t g) {
  std::vector<float> xf(x.size()), want(x.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_f32(x[i]);
  hadamard_rotate_rows(xf.data(), want.data(), rows, k, g);
  Tiers tiers;
  for (bool no_int32 : {false, true}) {
    int64_t bad = 0, first = -1, zero_signs = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const IntegerRotation got = rotate_integer(x.data() + r * k, k, g, false, no_int32);
      if (!no_int32)
        tiers = {tiers.fallbacks + got.fallback_groups, tiers.int32 + got.int32_groups};
      for (int64_t j = 0; j < k; ++j) {
        const float a = got.rot[j], b = want[r * k + j];
        if (f32_bits(a) == f32_bits(b)) continue;
        if (a == 0.0f && b == 0.0f) {
          ++zero_signs;
          continue;
        }
        if (bad++ == 0) first = r * k + j;
      }
    }
    EXPECT_EQ(bad, 0) << "g " << g << (no_int32 ? " (int64 only)" : "") << ": " << bad
                      << " rotated values differ, first at row " << first / k << " col "
                      << first % k;
    if (zero_signs)
      std::printf("g %lld: %lld zeros differ in sign only\n", (long long)g, (long long)zero_signs);
  }
  return tiers;
}

// q and scale of the integer form (rotate, round to bf16, then the same per-row quantizer: the
// host rule without rotation) against int8_quantize_rows with the rotation, byte for byte.
void expect_same_quantization(const Tensor& x, int64_t g, const Tensor& want_q,
                              const Tensor& want_s, const std::string& what) {
  const int64_t rows = x.size(0), k = x.size(1);
  Tensor rot = Tensor::zeros(DType::bf16, {rows, k});
  const Tensor xc = x.contiguous_copy();
  for (int64_t r = 0; r < rows; ++r) {
    const IntegerRotation got = rotate_integer(xc.ptr<uint16_t>() + r * k, k, g);
    for (int64_t j = 0; j < k; ++j) rot.ptr<uint16_t>()[r * k + j] = f32_to_bf16(got.rot[j]);
  }
  const Int8Rows q = int8_quantize_rows(rot, 0);
  EXPECT_EQ(std::memcmp(q.q.data(), want_q.contiguous_copy().data(), q.q.nbytes()), 0)
      << what << ": q differs";
  EXPECT_EQ(std::memcmp(q.scale.data(), want_s.contiguous_copy().data(), q.scale.nbytes()), 0)
      << what << ": scale differs";
}

// Random bf16 bits of one of several kinds per group (kind = group index mod 7), spanning what
// the integer form must handle.
std::vector<uint16_t> random_rows(int64_t rows, int64_t k, int64_t g, std::mt19937_64& rng,
                                  bool near_max) {
  std::vector<uint16_t> x(static_cast<size_t>(rows * k));
  std::uniform_int_distribution<int> mant(0, 127), sign(0, 1), pick(0, 3);
  std::uniform_int_distribution<int> base_exp(1, 180), span(0, 50);  // no f32 overflow
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t base = 0; base < k; base += g) {
      const int kind = static_cast<int>((r * (k / g) + base / g) % 7);
      const int lo = base_exp(rng), hi = std::min(254, lo + span(rng));
      std::uniform_int_distribution<int> exp_in(lo, hi);
      for (int64_t i = 0; i < g; ++i) {
        int e = exp_in(rng);
        if (kind == 1) e = pick(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, 30)(rng);
        if (kind == 2) e = 0;                         // subnormal (or zero) only
        if (kind == 3 && pick(rng) != 0) e = -1;      // mostly zeros, both signs
        if (kind == 4) e = -1;                        // an all-zero group
        if (kind == 5) e = pick(rng) == 0 ? lo : hi;  // the two ends of the span
        if (near_max) e = std::uniform_int_distribution<int>(240, 254)(rng);
        const uint16_t s = static_cast<uint16_t>(sign(rng) << 15);
        x[r * k + base + i] =
            e < 0 ? s : static_cast<uint16_t>(s | (e << 7) | mant(rng));  // -1: +-0
      }
    }
  return x;
}

TEST(Int8IntegerRotation, MatchesDoubleFormOnRandomRows) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t g : {4, 16, 64, 256}) {
    const int64_t rows = 40, k = 4 * 256;
    const std::vector<uint16_t> x = random_rows(rows, k, g, rng, false);
    const Tiers tiers = expect_same_rotation(x, rows, k, g);
    // Spans up to 50 are drawn: some groups must take the fallback, most must not, and some
    // must take each integer tier.
    const int64_t groups = rows * k / g;
    EXPECT_GT(tiers.fallbacks, 0) << "g " << g;
    EXPECT_LT(tiers.fallbacks, groups / 2) << "g " << g;
    EXPECT_GT(tiers.int32, 0) << "g " << g;
    EXPECT_LT(tiers.int32 + tiers.fallbacks, groups) << "g " << g << ": no group took int64";
    Tensor t = Tensor::zeros(DType::bf16, {rows, k});
    std::memcpy(t.data(), x.data(), x.size() * 2);
    const Int8Rows want = int8_quantize_rows(t, g);
    expect_same_quantization(t, g, want.q, want.scale, "g " + std::to_string(g));
  }
}

// Values near the bf16 maximum: the rotation may overflow f32 (inf both ways); compared as f32.
TEST(Int8IntegerRotation, MatchesDoubleFormNearBf16Max) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t g : {16, 64, 256}) {
    const std::vector<uint16_t> x = random_rows(8, 512, g, rng, true);
    EXPECT_EQ(expect_same_rotation(x, 8, 512, g).fallbacks, 0) << "g " << g;
  }
}

// Each group's fallback is decided by its own span: span = limit rotates as integers, limit + 1
// falls back; subnormal-only and all-zero groups never fall back.
TEST(Int8IntegerRotation, FallbackExactlyBeyondTheSpanLimit) {
  for (int64_t g : {4, 16, 64, 256}) {
    const int limit = 45 - 2 * half_log2(g);
    for (int extra : {0, 1}) {
      std::vector<uint16_t> x(static_cast<size_t>(g), 0);
      x[0] = static_cast<uint16_t>((10 << 7) | 0x7f);
      x[g - 1] = static_cast<uint16_t>(0x8000 | ((10 + limit + extra) << 7) | 0x7f);
      x[1] = 0x8000;  // -0 does not count
      const IntegerRotation r = rotate_integer(x.data(), g, g);
      EXPECT_EQ(r.fallback_groups, extra) << "g " << g << " span " << limit + extra;
      expect_same_rotation(x, 1, g, g);
    }
    std::vector<uint16_t> sub(static_cast<size_t>(g)), zero(static_cast<size_t>(g), 0x8000);
    for (int64_t i = 0; i < g; ++i) sub[i] = static_cast<uint16_t>((i * 37) & 0x807f);
    EXPECT_EQ(rotate_integer(sub.data(), g, g).fallback_groups, 0);
    EXPECT_EQ(rotate_integer(zero.data(), g, g).fallback_groups, 0);
    expect_same_rotation(sub, 1, g, g);
    expect_same_rotation(zero, 1, g, g);
  }
}

// The int32 tier's limits: span 14 with e_min 7 takes it, span 15 or e_min 6 does not (int64
// then); every term at the tier's largest magnitude, all of one sign, sums to just below 2^30
// (the wrapping magic offsets must cancel exactly), and mixed signs cancel to small sums.
TEST(Int8IntegerRotation, Int32TierAtItsLimits) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> mant(0, 127), coin(0, 1);
  for (int64_t g : {4, 16, 64, 256}) {
    for (const auto& [e_lo, span, int32] : {std::tuple{7, 14, true},
                                            {7, 15, false},
                                            {6, 14, false},
                                            {120, 14, true},
                                            {240, 14, true},
                                            {100, 0, true}}) {
      for (int signs = 0; signs < 3; ++signs) {  // all +, all -, mixed
        std::vector<uint16_t> x(static_cast<size_t>(g));
        for (int64_t i = 0; i < g; ++i) {
          const int e = i == 0 ? e_lo : e_lo + span;  // one value at e_min, the rest at e_max
          const bool neg = signs == 1 || (signs == 2 && coin(rng));
          x[i] = static_cast<uint16_t>((neg ? 0x8000 : 0) | (e << 7) |
                                       (signs == 2 ? mant(rng) : 0x7f));
        }
        const IntegerRotation r = rotate_integer(x.data(), g, g);
        EXPECT_EQ(r.int32_groups, int32 ? 1 : 0)
            << "g " << g << " e_min " << e_lo << " span " << span;
        EXPECT_EQ(expect_same_rotation(x, 1, g, g).fallbacks, 0);
      }
    }
  }
}

// Why the fallback exists: beyond the limit the double butterflies round, so integer sums there
// would differ. Group of 4: a0 = a2 = 255 * 2^46 u, a1 = 255 u (span 46 > 43): the host's
// (a0 + a1) needs 54 bits and rounds, and a0 + a1 - a2 comes out 256 u instead of 255 u.
TEST(Int8IntegerRotation, WithoutFallbackWideSpansDiffer) {
  const uint16_t big = static_cast<uint16_t>(((60 + 46) << 7) | 0x7f), small = (60 << 7) | 0x7f;
  const std::vector<uint16_t> x = {big, small, big, 0};
  const IntegerRotation exact = rotate_integer(x.data(), 4, 4, /*no_fallback=*/true);
  std::vector<float> xf(4), want(4);
  for (int i = 0; i < 4; ++i) xf[i] = bf16_to_f32(x[i]);
  hadamard_rotate_rows(xf.data(), want.data(), 1, 4, 4);
  EXPECT_EQ(exact.rot[1], std::ldexp(255.0f, 60 - 134 - 1));  // the exact sum, halved
  EXPECT_EQ(want[1], std::ldexp(256.0f, 60 - 134 - 1));       // the double form's rounding
  EXPECT_EQ(rotate_integer(x.data(), 4, 4).fallback_groups, 1);
  EXPECT_EQ(expect_same_rotation(x, 1, 4, 4).fallbacks, 1);
}

TEST(Int8IntegerRotation, GoldenVectorsByteExact) {
  const std::string dir = test::shared_dir() + "/golden/int8_convrot";
  std::ifstream f(dir + "/manifest.json");
  ASSERT_TRUE(f.good()) << "missing " << dir << "/manifest.json";
  int cases = 0;
  const nlohmann::json manifest = nlohmann::json::parse(f);
  for (const auto& e : manifest["entries"]) {
    const std::string tag = e["tag"];
    const SafetensorsFile file = SafetensorsFile::open(dir + "/" + tag + ".safetensors");
    const int64_t group = e["group_size"];
    expect_same_quantization(file.get("x"), group, file.get("xq"), file.get("xs"), tag + " x");
    expect_same_quantization(file.get("w"), group, file.get("wq"), file.get("ws"), tag + " w");
    ++cases;
  }
  EXPECT_EQ(cases, 5);
}

}  // namespace
}  // namespace h3rt
