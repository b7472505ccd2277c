// The division-free exact NVFP4 encoder on the GPU (src/formats/nvfp4_exact_encode.h) and the
// legacy per-element encoder it replaced, both bit-exact against the host reference: blocks over
// a wide range of magnitudes, given scales inside and outside the exact encoder's g range (the
// division fallback), elements packed around every e2m1 rounding threshold, narrow and strided
// shapes, and a qdata pointer that is only 4-byte aligned.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "formats/nvfp4_exact_encode.h"
#include "formats/nvfp4_layout.h"
#include "formats/nvfp4_quantize.h"
#include "formats/nvfp4_quantize_kernels.cuh"
#include "h3rt/nvfp4.h"

namespace h3rt {
namespace {

struct Shape2 {
  int64_t rows, cols, ld;
};

struct Bytes {
  std::vector<uint8_t> q, s;
};

Bytes host_reference(const std::vector<uint16_t>& x, const Shape2& c, float g) {
  Tensor xt(const_cast<uint16_t*>(x.data()), DType::bf16, {c.rows, c.cols}, {c.ld, 1}, nullptr,
            Device::cpu);
  const Nvfp4Tensor t = nvfp4_quantize(xt, g);
  const uint8_t* q = t.qdata.ptr<uint8_t>();
  const uint8_t* s = t.scales.ptr<uint8_t>();
  return {{q, q + t.qdata.nbytes()}, {s, s + t.scales.nbytes()}};
}

// qdata_offset 4: the qdata pointer is 4- but not 8-byte aligned.
Bytes run_gpu(const std::vector<uint16_t>& x, const Shape2& c, float g, bool legacy, bool force_sw,
              int qdata_offset) {
  Tensor xd = test::upload(x, DType::bf16, {c.rows, c.ld});
  Tensor q = test::device_buffer(DType::u8, {c.rows * c.cols / 2 + 8});
  Tensor s = test::device_buffer(DType::u8, {nvfp4_scales_bytes(c.rows, c.cols)});
  Tensor gd = test::upload(std::vector<float>{g}, DType::f32, {1});
  Nvfp4QuantizeParams p;
  p.x = xd.data();
  p.rows = c.rows;
  p.cols = c.cols;
  p.ld = c.ld;
  p.qdata = test::dptr<uint8_t>(q) + qdata_offset;
  p.scales = test::dptr<uint8_t>(s);
  p.global_scale = test::dptr<float>(gd);
  p.force_software_cvt = force_sw;
  H3RT_CUDA_CHECK(nvfp4_detail::quantize_with_encoder(p, legacy, nullptr));
  const std::vector<uint8_t> qa = test::download<uint8_t>(q);
  return {{qa.begin() + qdata_offset, qa.begin() + qdata_offset + c.rows * c.cols / 2},
          test::download<uint8_t>(s)};
}

void expect_same(const Bytes& got, const Bytes& want, const std::string& what) {
  ASSERT_EQ(got.q.size(), want.q.size()) << what;
  ASSERT_EQ(got.s.size(), want.s.size()) << what;
  size_t dq = 0, ds = 0, first = SIZE_MAX;
  for (size_t i = 0; i < got.q.size(); ++i)
    if (got.q[i] != want.q[i] && dq++ == 0) first = i;
  for (size_t i = 0; i < got.s.size(); ++i) ds += got.s[i] != want.s[i];
  EXPECT_EQ(dq, 0u) << what << ": qdata bytes differ, first at " << first;
  EXPECT_EQ(ds, 0u) << what << ": scale bytes differ";
}

// Normal values, every 16-element block scaled by its own 2^U(-lo, hi), some all-zero blocks,
// some blocks of -0 / tiny values, and padding columns (ld > cols) of garbage.
std::vector<uint16_t> wide_range_input(const Shape2& c, std::mt19937_64& rng, float lo, float hi) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> lg(lo, hi);
  std::uniform_int_distribution<int> kind(0, 31);
  std::vector<uint16_t> x(c.rows * c.ld, 0x7fc0);  // NaN in the unused columns
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t b = 0; b < c.cols / 16; ++b) {
      const float sc = std::exp2(lg(rng));
      const int k = kind(rng);
      for (int i = 0; i < 16; ++i) {
        float v = nd(rng) * sc;
        if (k == 0) v = 0.0f;
        if (k == 1) v = i % 3 == 0 ? -0.0f : v * 1e-30f;
        x[r * c.ld + b * 16 + i] = f32_to_bf16(v);
      }
    }
  return x;
}

const Shape2 kShapes[] = {
    {257, 5376, 5376}, {65, 16, 24}, {300, 48, 48}, {129, 112, 120}, {3, 14336, 14336}};

TEST(Nvfp4ExactCuda, WideRangesAndGivenScalesBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Inside the exact range, its ends, and outside it (the division-based fallback), and g = 0.
  const float gs[] = {1.0f,      1.0f / 2688.0f, 0x1p-90f, 0x1p100f,   3.1e-20f, 7.7e17f,
                      0x1p-100f, 0x1p-126f,      0x1p101f, 0x1.8p120f, 0.0f};
  for (const Shape2& c : kShapes) {
    for (float g : gs) {
      const float lg = std::log2(g > 0.0f ? g : 1.0f);
      // Block magnitudes around g * 6 * [2^-20, 448 * 2^8]: zero, subnormal-e4m3, normal and
      // saturated scales.
      const std::vector<uint16_t> x =
          wide_range_input(c, rng, std::fmax(lg - 20.0f, -133.0f), std::fmin(lg + 20.0f, 124.0f));
      const Bytes want = host_reference(x, c, g);
      const std::string what = "rows " + std::to_string(c.rows) + " cols " +
                               std::to_string(c.cols) + " ld " + std::to_string(c.ld) + " g " +
                               std::to_string(g) + " exact " +
                               std::to_string(nvfp4::ScaleDivider(g).exact);
      for (int offset : {0, 4}) {
        expect_same(run_gpu(x, c, g, false, true, offset), want,
                    what + " new, q+" + std::to_string(offset));
        expect_same(run_gpu(x, c, g, false, false, offset), want, what + " new, default cvt");
      }
      expect_same(run_gpu(x, c, g, true, true, 0), want, what + " legacy");
    }
  }
}

// Each block: one element fixes the scale, the other 15 are the bf16 values nearest t * d and
// their neighbours (up to 3 bf16 ulps away) for the e2m1 thresholds t, with random signs.
TEST(Nvfp4ExactCuda, ElementsAroundEveryThresholdBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> lg(-30.0f, 30.0f), u01(0.0f, 1.0f);
  std::uniform_int_distribution<int> th(0, 6), ulp(-3, 3), sign(0, 1);
  const float t[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const Shape2 c{1024, 5376, 5376};
  for (float g : {1.0f, 1.0f / 2688.0f, 0x1.5p-37f, 0x1.3p41f}) {
    std::vector<uint16_t> x(c.rows * c.cols);
    for (int64_t blk = 0; blk < c.rows * c.cols / 16; ++blk) {
      uint16_t* b = x.data() + blk * 16;
      const float amax = round_bf16(6.0f * g * std::exp2(lg(rng) * 0.25f) * (1.0f + u01(rng)));
      const float d = g * e4m3_to_f32(nvfp4_block_scale(amax, g));
      b[0] = f32_to_bf16(amax);
      for (int i = 1; i < 16; ++i) {
        const int32_t near = f32_to_bf16(t[th(rng)] * d);
        int32_t v = near + ulp(rng);
        if (v < 0) v = 0;
        if (bf16_to_f32(static_cast<uint16_t>(v)) > amax) v = near;
        b[i] = static_cast<uint16_t>(v | (sign(rng) ? 0x8000 : 0));
      }
    }
    const Bytes want = host_reference(x, c, g);
    const std::string what = "g " + std::to_string(g);
    expect_same(run_gpu(x, c, g, false, true, 0), want, what + " new");
    expect_same(run_gpu(x, c, g, true, true, 0), want, what + " legacy");
  }
}

}  // namespace
}  // namespace h3rt
