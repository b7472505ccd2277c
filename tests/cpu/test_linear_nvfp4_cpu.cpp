// linear_nvfp4_cpu (the host reference of the NVFP4 GEMM) against an independent naive version:
// nvfp4_dequantize with a unit global scale, a plain double matmul, then alpha (the fp32
// product of the global scales), the bias and the roundings written out step by step; plus
// hand-computed values for the rounding and sign conventions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "h3rt/formats.h"
#include "h3rt/nvfp4.h"
#include "h3rt/tensor.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"

namespace h3rt {
namespace {

Tensor random_bf16(int64_t rows, int64_t cols, std::mt19937_64& g, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::uniform_real_distribution<float> lg(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(lg(g));
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = d(g) * s;
  }
  return tensor_from_f32(v, {rows, cols}, DType::bf16);
}

struct Naive {
  std::vector<float> y;
  std::vector<uint16_t> y_bf16;
};

// ap: [rows, in] floats (dequantized without g, or bf16 values); wp likewise [out, in].
Naive naive(const float* ap, const float* wp, int64_t rows, int64_t in, int64_t out, float alpha,
            const std::vector<float>* bias) {
  Naive n;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0.0;
      for (int64_t k = 0; k < in; ++k) acc += double(ap[r * in + k]) * double(wp[o * in + k]);
      double v = double(alpha) * acc;
      if (bias) v += (*bias)[o];
      n.y.push_back(static_cast<float>(v));
      n.y_bf16.push_back(f32_to_bf16(n.y.back()));
    }
  return n;
}

void expect_same(const std::vector<float>& got_f, const std::vector<uint16_t>& got_b,
                 const Naive& want) {
  ASSERT_EQ(got_f.size(), want.y.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got_f.size(); ++i) {
    const bool same = std::bit_cast<uint32_t>(got_f[i]) == std::bit_cast<uint32_t>(want.y[i]) &&
                      got_b[i] == want.y_bf16[i];
    if (!same && bad++ < 5)
      ADD_FAILURE() << "y[" << i << "] = " << got_f[i] << " (bf16 0x" << std::hex << got_b[i]
                    << "), want " << want.y[i] << " (0x" << want.y_bf16[i] << ")";
  }
  EXPECT_EQ(bad, 0);
}

struct Shape3 {
  int64_t rows, in, out;
};

TEST(LinearNvfp4Cpu, MatchesNaiveDequantizeAndMatmul) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  // in = 160: 10 scale blocks per row, so the tiled scales have padding columns; rows 130 and
  // out 136 cross a 128-row scale tile.
  for (const Shape3& s : {Shape3{5, 64, 24}, Shape3{130, 160, 16}, Shape3{3, 96, 136}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " in " + std::to_string(s.in) + " out " +
                 std::to_string(s.out));
    const Tensor wx = random_bf16(s.out, s.in, g, 0.1f);
    const Tensor ax = random_bf16(s.rows, s.in, g, 1.0f);
    const Nvfp4Tensor w = nvfp4_quantize(wx, nvfp4_global_scale(wx, Nvfp4ScaleRule::kF32Divide));
    const Nvfp4Tensor a =
        nvfp4_quantize(ax, nvfp4_global_scale(ax, Nvfp4ScaleRule::kBf16Activation));
    ASSERT_GT(w.global_scale, 0.0f);
    const Tensor wd = nvfp4_dequantize(w.qdata, w.scales, 1.0f);
    const Tensor ad = nvfp4_dequantize(a.qdata, a.scales, 1.0f);
    const std::vector<float> a16 = ax.to_f32();
    std::vector<float> bias_f;
    std::vector<uint16_t> bias_b;
    std::normal_distribution<float> bd(0.0f, 0.5f);
    for (int64_t o = 0; o < s.out; ++o) {
      bias_b.push_back(f32_to_bf16(bd(g)));
      bias_f.push_back(bf16_to_f32(bias_b.back()));
    }
    for (bool w4a4 : {true, false})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(std::string(w4a4 ? "W4A4" : "W4A16") + (with_bias ? " bias" : ""));
        std::vector<float> y(static_cast<size_t>(s.rows * s.out), NAN);
        std::vector<uint16_t> yb(y.size(), 0xffff);
        ops::LinearNvfp4CpuParams p;
        if (w4a4) {
          p.a_q = a.qdata.ptr<uint8_t>();
          p.a_scales = a.scales.ptr<uint8_t>();
          p.a_global = a.global_scale;
        } else {
          p.a = ax.ptr<uint16_t>();
        }
        p.w_q = w.qdata.ptr<uint8_t>();
        p.w_scales = w.scales.ptr<uint8_t>();
        p.w_global = w.global_scale;
        p.bias = with_bias ? bias_b.data() : nullptr;
        p.y_f32 = y.data();
        p.y_bf16 = yb.data();
        p.rows = s.rows;
        p.in = s.in;
        p.out = s.out;
        ops::linear_nvfp4_cpu(p);
        const float alpha = w4a4 ? a.global_scale * w.global_scale : w.global_scale;
        expect_same(y, yb,
                    naive(w4a4 ? ad.ptr<float>() : a16.data(), wd.ptr<float>(), s.rows, s.in, s.out,
                          alpha, with_bias ? &bias_f : nullptr));
      }
  }
}

// One row of 16 activations against 8 weight rows with hand-picked codes and scales.
TEST(LinearNvfp4Cpu, HandComputedValuesAndRounding) {
  const int64_t in = 16, out = 8;
  // bf16 activations: 242 and fifteen ones, so sum(a) = 257 (not a bf16 number).
  std::vector<uint16_t> a(in, f32_to_bf16(1.0f));
  a[0] = f32_to_bf16(242.0f);
  // Weight row o: every code the same. Byte = code << 4 | code (element 2j in the high nibble).
  const uint8_t codes[out] = {0x2, 0xF, 0x1, 0x0,
                              0x8, 0x7, 0x2, 0xA};  // 1, -6, .5, 0, -0, 6, 1, -1
  const uint8_t scales[out] = {0x38, 0x40, 0x38, 0x38, 0x38, 0x01, 0x38, 0x38};  // 1, 2, ... 2^-9
  std::vector<uint8_t> wq(out * in / 2), ws(nvfp4_scales_bytes(out, in), 0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t j = 0; j < in / 2; ++j) wq[o * in / 2 + j] = uint8_t(codes[o] << 4 | codes[o]);
    ws[o * 16] = scales[o];  // tiled offset of (row o < 32, block 0) is o * 16
  }
  // Code 0x2 in the high nibble only for row 6: elements 2j = 1, elements 2j+1 = 0.
  for (int64_t j = 0; j < in / 2; ++j) wq[6 * in / 2 + j] = 0x20;
  std::vector<uint16_t> bias(out, 0);
  bias[7] = f32_to_bf16(0.5f);
  std::vector<float> y(out);
  std::vector<uint16_t> yb(out);
  ops::LinearNvfp4CpuParams p;
  p.a = a.data();
  p.w_q = wq.data();
  p.w_scales = ws.data();
  p.w_global = 1.0f;
  p.bias = bias.data();
  p.y_f32 = y.data();
  p.y_bf16 = yb.data();
  p.rows = 1;
  p.in = in;
  p.out = out;
  ops::linear_nvfp4_cpu(p);
  EXPECT_EQ(y[0], 257.0f);
  EXPECT_EQ(bf16_to_f32(yb[0]), 256.0f);  // tie between 256 and 258: to even
  EXPECT_EQ(y[1], -3084.0f);              // -12 * 257
  EXPECT_EQ(bf16_to_f32(yb[1]), -3088.0f);
  EXPECT_EQ(y[2], 128.5f);
  EXPECT_EQ(bf16_to_f32(yb[2]), 128.0f);  // tie between 128 and 129: to even
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], std::ldexp(6.0f * 257.0f, -9));
  EXPECT_EQ(y[6], 242.0f + 7.0f);  // even elements only: a[0] + a[2] + ... + a[14]
  EXPECT_EQ(y[7], -257.0f + 0.5f);
  EXPECT_EQ(bf16_to_f32(yb[7]), -256.0f);

  // W4A4 with global scales: alpha is the fp32 product g_a * g_w, applied once.
  std::vector<uint8_t> aq(in / 2, 0x22), as(nvfp4_scales_bytes(1, in), 0);  // all 1.0
  as[0] = 0x38;
  p.a = nullptr;
  p.a_q = aq.data();
  p.a_scales = as.data();
  p.a_global = 0.1f;
  p.w_global = 0.3f;
  p.bias = nullptr;
  ops::linear_nvfp4_cpu(p);
  const float alpha = 0.1f * 0.3f;
  EXPECT_EQ(y[0], static_cast<float>(double(alpha) * 16.0));
  EXPECT_EQ(y[1], static_cast<float>(double(alpha) * -192.0));
}

TEST(LinearNvfp4Cpu, RejectsBadArguments) {
  std::vector<uint8_t> q(64), s(1024);
  std::vector<float> y(64);
  ops::LinearNvfp4CpuParams p;
  p.w_q = q.data();
  p.w_scales = s.data();
  p.y_f32 = y.data();
  p.rows = 1;
  p.in = 24;  // not a multiple of 16
  p.out = 2;
  p.a_q = q.data();
  p.a_scales = s.data();
  EXPECT_THROW(ops::linear_nvfp4_cpu(p), Error);
  p.in = 32;
  p.a_scales = nullptr;  // NVFP4 activations without scales
  EXPECT_THROW(ops::linear_nvfp4_cpu(p), Error);
  p.a_q = nullptr;  // neither activation kind
  EXPECT_THROW(ops::linear_nvfp4_cpu(p), Error);
  p.a = reinterpret_cast<const uint16_t*>(q.data());
  p.y_f32 = nullptr;  // no output
  EXPECT_THROW(ops::linear_nvfp4_cpu(p), Error);
}

}  // namespace
}  // namespace h3rt
