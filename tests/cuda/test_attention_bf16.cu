// Flash bf16 attention vs the CPU fp64 reference (attention_cpu), reading q/k/v through strides
// from a fused QKV buffer [S, 3, heads, 128] and writing a token-major output with a padded row
// stride. FlashAttention rule: the kernel's error against fp64 must stay within 2x that of a
// plain bf16 implementation (bf16 scores, fp32 softmax rounded to bf16, bf16 output).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "ops/attention/attention.h"

namespace h3rt {
namespace {

using test::dptr;

struct Err {
  double max = 0.0, mean = 0.0;
};

Err error_of(const std::vector<float>& got, int64_t ld, const std::vector<float>& want,
             int64_t rows, int64_t span) {
  Err e;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < span; ++c) {
      const double d = std::fabs(double(got[r * ld + c]) - want[r * span + c]);
      e.max = std::max(e.max, d);
      e.mean += d;
    }
  e.mean /= double(rows * span);
  return e;
}

// The plain bf16 baseline of the FlashAttention rule.
std::vector<float> naive_bf16(const std::vector<float>& qkv, int64_t rows, int64_t heads,
                              float scale) {
  const int64_t span = heads * 128, ld = 3 * span;
  std::vector<float> out(rows * span), s(rows);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < rows; ++i) {
      const float* q = qkv.data() + i * ld + h * 128;
      float mx = -INFINITY;
      for (int64_t j = 0; j < rows; ++j) {
        const float* k = qkv.data() + j * ld + span + h * 128;
        float acc = 0.0f;
        for (int d = 0; d < 128; ++d) acc += q[d] * k[d];
        s[j] = round_bf16(round_bf16(acc) * scale);
        mx = std::max(mx, s[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < rows; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < rows; ++j) s[j] = round_bf16(s[j] / sum);
      for (int d = 0; d < 128; ++d) {
        float acc = 0.0f;
        for (int64_t j = 0; j < rows; ++j) acc += s[j] * qkv[j * ld + 2 * span + h * 128 + d];
        out[i * span + h * 128 + d] = round_bf16(acc);
      }
    }
  return out;
}

void run_case(int64_t rows, int64_t heads, float q_sd) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", S " + std::to_string(rows) + ", heads " +
               std::to_string(heads));
  std::mt19937_64 g(seed);
  const int64_t span = heads * 128, ld = 3 * span, out_ld = span + 64;
  auto qkv = test::random_bf16(rows * ld, g, 0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r)  // sharper softmax: larger q
    for (int64_t c = 0; c < span; ++c)
      qkv.f[r * ld + c] = bf16_to_f32(qkv.bits[r * ld + c] = f32_to_bf16(qkv.f[r * ld + c] * q_sd));
  const float scale = 1.0f / std::sqrt(128.0f);

  std::vector<float> want(rows * span);
  ops::AttentionParams c;
  c.q = qkv.f.data();
  c.k = qkv.f.data() + span;
  c.v = qkv.f.data() + 2 * span;
  c.q_row_stride = c.k_row_stride = c.v_row_stride = ld;
  c.out = want.data();
  c.rows = rows;
  c.heads = heads;
  ops::attention_cpu(c);
  const Err base = error_of(naive_bf16(qkv.f, rows, heads, scale), span, want, rows, span);

  Tensor dqkv = test::upload(qkv.bits, DType::bf16, {rows, 3, heads, 128});
  Tensor dout = test::device_buffer(DType::bf16, {rows, out_ld});
  ops::AttentionCudaParams p =
      ops::attention_params_from_qkv(dptr<__nv_bfloat16>(dqkv), rows, heads, nullptr);
  p.out = dptr<__nv_bfloat16>(dout);
  p.out_row_stride = out_ld;
  ASSERT_EQ(ops::attention_workspace_bytes(p, ops::AttentionKernel::flash_bf16), 0u);
  ASSERT_EQ(ops::attention_cuda(p, ops::AttentionKernel::flash_bf16, nullptr), cudaSuccess);
  const auto bits = test::download<uint16_t>(dout);
  std::vector<float> got(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) got[i] = bf16_to_f32(bits[i]);
  const Err err = error_of(got, out_ld, want, rows, span);
  std::printf("attention S=%lld heads=%lld: max err %.3g (bf16 baseline %.3g), mean %.3g (%.3g)\n",
              static_cast<long long>(rows), static_cast<long long>(heads), err.max, base.max,
              err.mean, base.mean);
  EXPECT_LE(err.max, 2.0 * base.max + 1e-6);
  EXPECT_LE(err.mean, 2.0 * base.mean + 1e-7);
  int64_t touched = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t cidx = span; cidx < out_ld; ++cidx) touched += bits[r * out_ld + cidx] != 0xffff;
  EXPECT_EQ(touched, 0) << "the kernel wrote into the output's row padding";
}

TEST(CudaAttentionBf16, SingleRow) {
  H3RT_REQUIRE_GPU();
  run_case(1, 2, 1.0f);
}
TEST(CudaAttentionBf16, TinyRagged) {
  H3RT_REQUIRE_GPU();
  run_case(37, 3, 2.0f);
}
TEST(CudaAttentionBf16, ExactTiles) {
  H3RT_REQUIRE_GPU();
  run_case(128, 2, 2.0f);
}
TEST(CudaAttentionBf16, RaggedMultiTile) {
  H3RT_REQUIRE_GPU();
  run_case(333, 2, 3.0f);
}
TEST(CudaAttentionBf16, LongerSequence) {
  H3RT_REQUIRE_GPU();
  run_case(1111, 2, 2.0f);
}

}  // namespace
}  // namespace h3rt
