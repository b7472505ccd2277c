// CPU checks of the Sage attention references: accuracy against exact fp64 attention, the
// quantization contract (ranges, scales, padding) and invariance under a shared K offset.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/attention_sage/attention_sage.h"

namespace h3rt::attention_sage {
namespace {

constexpr float kSmScale = 0.08838834764831845f;  // 1/sqrt(128)

struct Qkv {
  int64_t seq, heads, stride;
  std::vector<uint16_t> bits;
  QkvView view() const { return {bits.data(), seq, heads, stride}; }
};

Qkv random_qkv(int64_t seq, int64_t heads, uint32_t seed, float k_offset = 0.0f) {
  Qkv x{seq, heads, 3 * heads * kHeadDim + 24, {}};
  x.bits.assign(seq * x.stride, 0);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t c = 0; c < 3 * heads * kHeadDim; ++c) {
      bool is_k = c >= heads * kHeadDim && c < 2 * heads * kHeadDim;
      x.bits[t * x.stride + c] = f32_to_bf16(n01(rng) + (is_k ? k_offset : 0.0f));
    }
  return x;
}

struct Err {
  double rel_l2, cosine;
};

Err compare(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0, dot = 0, g2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    dot += got[i] * ref[i];
    g2 += double(got[i]) * got[i];
  }
  return {std::sqrt(num / den), dot / std::sqrt(den * g2)};
}

TEST(SageAttentionCpu, ReferenceTracksExactAttention) {
  for (int64_t seq : {1, 7, 100, 300}) {
    Qkv x = random_qkv(seq, 2, 1234 + static_cast<uint32_t>(seq));
    Quantized z = quantize_reference(x.view(), kSmScale);
    Err e = compare(attention_reference(z), attention_exact_f64(x.view(), kSmScale));
    std::printf("S=%lld rel_l2=%.4f cos=%.6f\n", static_cast<long long>(seq), e.rel_l2, e.cosine);
    EXPECT_LE(e.rel_l2, 0.05) << "S=" << seq;
    EXPECT_GE(e.cosine, 0.999) << "S=" << seq;
  }
}

// The rows form (the self-test's spot check at long S) gives those rows of the whole reference
// bit for bit, in the order asked; a row outside S is an error.
TEST(SageAttentionCpu, ReferenceRowsAreTheWholeReferencesRows) {
  const Qkv x = random_qkv(300, 2, 77);
  const Quantized z = quantize_reference(x.view(), kSmScale);
  const std::vector<float> all = attention_reference(z, RowSum::p8);
  const std::vector<int64_t> rows = {299, 0, 128, 7};
  const std::vector<float> some = attention_reference_rows(z, rows, RowSum::p8);
  const int64_t w = 2 * kHeadDim;
  ASSERT_EQ(some.size(), rows.size() * w);
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(std::memcmp(&some[i * w], &all[rows[i] * w], w * sizeof(float)), 0) << rows[i];
  EXPECT_THROW(attention_reference_rows(z, {300}, RowSum::p8), Error);
}

TEST(SageAttentionCpu, P8RowSumsAreAsAccurate) {
  // The wgmma kernels' denominator (sum of the e4m3 P8 that also weight V) against SageAttention2's
  // (sum of fp32 448 p): both track fp64 attention; p8 no worse than 1.1x fp32_p (plain and peaky).
  for (float amp : {1.0f, 3.0f}) {
    Qkv x = random_qkv(300, 2, 4321 + static_cast<uint32_t>(amp));
    for (int64_t t = 0; t < x.seq; ++t)
      for (int c = 0; c < 2 * 2 * kHeadDim; ++c)
        x.bits[t * x.stride + c] = f32_to_bf16(amp * bf16_to_f32(x.bits[t * x.stride + c]));
    Quantized z = quantize_reference(x.view(), kSmScale);
    const std::vector<double> exact = attention_exact_f64(x.view(), kSmScale);
    Err e32 = compare(attention_reference(z, RowSum::fp32_p), exact);
    Err e8 = compare(attention_reference(z, RowSum::p8), exact);
    std::printf("amp=%.0f rel_l2 fp32_p=%.5f p8=%.5f\n", amp, e32.rel_l2, e8.rel_l2);
    EXPECT_LE(e8.rel_l2, 1.1 * e32.rel_l2);
    EXPECT_GE(e8.cosine, 0.999);
  }
}

TEST(SageAttentionCpu, PeakedScoresStayAccurate) {
  // Larger q/k magnitudes make softmax peaky, the regime of real attention maps.
  Qkv x = random_qkv(200, 1, 99);
  for (int64_t t = 0; t < x.seq; ++t)
    for (int c = 0; c < 2 * kHeadDim; ++c)
      x.bits[t * x.stride + c] = f32_to_bf16(3.0f * bf16_to_f32(x.bits[t * x.stride + c]));
  Quantized z = quantize_reference(x.view(), kSmScale);
  Err e = compare(attention_reference(z), attention_exact_f64(x.view(), kSmScale));
  EXPECT_LE(e.rel_l2, 0.05);
  EXPECT_GE(e.cosine, 0.999);
}

TEST(SageAttentionCpu, KSmoothingRemovesSharedOffset) {
  // A shared K offset changes every score of a row by the same amount: exact attention is
  // unchanged, and the smoothed quantized keys are nearly unchanged too.
  Qkv a = random_qkv(150, 1, 7, 0.0f), b = random_qkv(150, 1, 7, 30.0f);
  Quantized za = quantize_reference(a.view(), kSmScale);
  Quantized zb = quantize_reference(b.view(), kSmScale);
  EXPECT_GT(zb.k_mean[0], 25.0f);
  std::vector<float> oa = attention_reference(za), ob = attention_reference(zb);
  Err ea = compare(oa, attention_exact_f64(a.view(), kSmScale));
  Err eb = compare(ob, attention_exact_f64(b.view(), kSmScale));
  EXPECT_LE(eb.rel_l2, 0.05);
  EXPECT_LE(eb.rel_l2, 2.0 * ea.rel_l2 + 0.01);
}

TEST(SageAttentionCpu, QuantizationContract) {
  Qkv x = random_qkv(77, 2, 5);
  Quantized z = quantize_reference(x.view(), kSmScale);
  EXPECT_EQ(z.padded, 128);
  // Padding rows are zero, values stay in [-127, 127], V bytes are finite e4m3.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < z.padded; ++t)
      for (int d = 0; d < kHeadDim; ++d) {
        int8_t q = z.q8[(h * z.padded + t) * kHeadDim + d];
        int8_t k = z.k8[(h * z.padded + t) * kHeadDim + d];
        EXPECT_GE(q, -127);
        EXPECT_GE(k, -127);
        if (t >= x.seq) EXPECT_TRUE(q == 0 && k == 0);
        uint8_t v = z.v8t[(h * kHeadDim + d) * z.padded + t];
        EXPECT_NE(v & 0x7f, 0x7f);
      }
  // Each Q group reaches +-127 at its largest element.
  int hits = 0;
  for (int64_t g = 0; g < 8; ++g) {
    int mx = 0;
    for (int64_t t : {g, g + 8})
      for (int d = 0; d < kHeadDim; ++d) mx = std::max(mx, std::abs(int(z.q8[t * kHeadDim + d])));
    hits += mx == 127;
  }
  EXPECT_EQ(hits, 8);
  // The slot permutation is a bijection on each group of 16.
  std::vector<int> seen(16, 0);
  for (int t = 0; t < 16; ++t) ++seen[v_slot_of_token(t)];
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_EQ(v_slot_of_token(16 + 9), 16 + 2 + 1);
}

// The int8 rounding contract: the fp32 product with the reciprocal scale, rounded half to even
// (SageAttention2's CUDA quantizer), and a scale floor for all-zero groups.
TEST(SageAttentionCpu, Int8RoundingIsHalfToEvenOfTheProduct) {
  EXPECT_EQ(quantize_int8(2.5f, 1.0f), 2);
  EXPECT_EQ(quantize_int8(3.5f, 1.0f), 4);
  EXPECT_EQ(quantize_int8(-2.5f, 1.0f), -2);
  EXPECT_EQ(quantize_int8(-0.5f, 1.0f), 0);
  EXPECT_EQ(quantize_int8(126.5f, 1.0f), 126);
  EXPECT_EQ(int8_scale(0.0f), 1e-7f / 127.0f);
  EXPECT_EQ(int8_scale(127.0f), 1.0f);
  const float s = int8_scale(3.0f);
  EXPECT_EQ(quantize_int8(3.0f, 1.0f / s), 127);
  EXPECT_EQ(quantize_int8(-3.0f, 1.0f / s), -127);
}

TEST(SageAttentionCpu, RejectsBadStride) {
  Qkv x = random_qkv(4, 1, 1);
  QkvView v = x.view();
  v.row_stride = 100;
  EXPECT_THROW(quantize_reference(v, kSmScale), Error);
}

}  // namespace
}  // namespace h3rt::attention_sage
