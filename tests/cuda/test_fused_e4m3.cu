// Producers with an e4m3 output (ops/linear/e4m3_out.h), the inputs of fp8 layers with a static
// input scale: rmsnorm_modulate (with and without the fused residual) and swiglu (row kernel and
// table path) write q = e4m3_satfinite(y / s) themselves, and q (and the bf16 output written
// alongside, and the residual stream) must be bit-identical to the unfused pipeline "producer
// writes bf16, then quantize_e4m3_cuda" on fresh random data, with a scale small enough that
// the tails saturate; one case also checks q against the host's f32_to_e4m3_satfinite. Then a
// whole fp8 forward: fused (the default) and unfused (H3RT_FP8_FUSE=0) give the same bits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "model/block_cuda.h"
#include "model/forward_session_cuda.h"
#include "model/synthetic_gemm_cuda.h"
#include "norm_test_util.h"
#include "ops/linear/linear.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "swiglu_test_util.h"

namespace h3rt {
namespace {

using test::dptr;
using bf16 = __nv_bfloat16;

// quantize_e4m3_cuda of y [rows, cols] with scale s (device scalar).
Tensor quantize_after(const Tensor& y, int64_t rows, int64_t cols, const Tensor& s) {
  Tensor q = test::device_buffer(DType::e4m3, {rows, cols});
  ops::QuantizeE4m3CudaParams p{dptr<bf16>(y), dptr<__nv_fp8_e4m3>(q), dptr<float>(s), rows, cols};
  H3RT_CUDA_CHECK(ops::quantize_e4m3_cuda(p, nullptr));
  return q;
}

ops::E4m3Out out_of(const Tensor& q, const Tensor& s) {
  ops::E4m3Out o;
  o.q = dptr<__nv_fp8_e4m3>(q);
  o.scale = dptr<float>(s);
  return o;
}

// The host rule on every element: q = f32_to_e4m3_satfinite(y / s), and some saturate.
void expect_host_rule(const Tensor& q, const Tensor& y, float s) {
  const auto qv = test::download<uint8_t>(q);
  const auto yv = test::download<uint16_t>(y);
  int64_t bad = 0, saturated = 0;
  for (size_t i = 0; i < qv.size(); ++i) {
    const uint8_t want = f32_to_e4m3_satfinite(bf16_to_f32(yv[i]) / s);
    bad += qv[i] != want;
    saturated += (want & 0x7f) == 0x7e;
  }
  EXPECT_EQ(bad, 0) << "bytes differing from the host's e4m3 rule";
  EXPECT_GT(saturated, 0) << "the scale was meant to make the tails saturate";
}

struct NormCase {
  int64_t rows, dim;
  bool residual, with_y, host_check = false;
};

void run_norm(const NormCase& c) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << c.rows << " dim " << c.dim
                                  << " residual " << c.residual << " y " << c.with_y);
  H3RT_REQUIRE_GPU();
  std::mt19937_64 g(seed);
  const int64_t rows = c.rows, dim = c.dim;
  const std::vector<uint16_t> xh = test::random_rows_bf16(rows, dim, g).bits;
  const test::NormInputs in(xh, rows, dim, g, seed);
  const float scale = 0.004f;  // |y| beyond 448 * 0.004 = 1.8 saturates
  Tensor s = test::upload(std::vector<float>{scale}, DType::f32, {1});
  Tensor y_ref = test::device_buffer(DType::bf16, {rows, dim});
  Tensor y_fused = test::device_buffer(DType::bf16, {rows, dim});

  ops::RmsNormModulateCudaParams p = in.params(c.residual);
  ops::RmsNormModulateCudaParams pr = p;
  pr.x = dptr<bf16>(in.x_ref);
  pr.y = dptr<bf16>(y_ref);
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(pr, nullptr));
  const Tensor q_ref = quantize_after(y_ref, rows, dim, s);

  Tensor q = test::device_buffer(DType::e4m3, {rows, dim});
  ops::RmsNormModulateCudaParams pf = p;
  pf.x = dptr<bf16>(in.x_fused);
  pf.y = c.with_y ? dptr<bf16>(y_fused) : nullptr;
  pf.e4m3 = out_of(q, s);
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(pf, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  test::expect_same_bytes(q, q_ref, "q");
  if (c.residual) test::expect_same_bytes(in.x_fused, in.x_ref, "residual stream x");
  if (c.with_y) test::expect_same_bytes(y_fused, y_ref, "bf16 y written alongside");
  if (c.host_check) expect_host_rule(q, y_ref, scale);
}

TEST(FusedE4m3, RmsNormModulateReleaseWidth) {
  run_norm({1000, 5376, false, false, true});
  run_norm({37, 5376, false, true});
}
TEST(FusedE4m3, ResidualRmsNormModulate) {
  run_norm({1000, 5376, true, false});
  run_norm({77, 5376, true, true});
  run_norm({50, 192, true, false});
}
TEST(FusedE4m3, RmsNormModulateTinyWidths) {
  for (int64_t dim : {192, 384}) run_norm({131, dim, false, false});
}

void run_swiglu(int64_t rows, int64_t ffn, bool table, bool with_out) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << rows << " ffn " << ffn
                                  << " table " << table << " out " << with_out);
  H3RT_REQUIRE_GPU();
  std::mt19937_64 g(seed);
  Tensor in = test::random_device_bf16(rows, 2 * ffn, g, 2.0f);
  const Tensor silu_table = test::silu_table_on_gpu();
  const float scale = 0.002f;
  Tensor s = test::upload(std::vector<float>{scale}, DType::f32, {1});
  ops::SwigluCudaParams p;
  p.in = dptr<bf16>(in);
  p.rows = rows;
  p.ffn = ffn;
  p.silu_table = table ? dptr<bf16>(silu_table) : nullptr;
  Tensor out_ref = test::device_buffer(DType::bf16, {rows, ffn});
  ops::SwigluCudaParams pr = p;
  pr.out = dptr<bf16>(out_ref);
  H3RT_CUDA_CHECK(ops::swiglu_cuda(pr, nullptr));
  const Tensor q_ref = quantize_after(out_ref, rows, ffn, s);

  Tensor q = test::device_buffer(DType::e4m3, {rows, ffn});
  Tensor out = test::device_buffer(DType::bf16, {rows, ffn});
  ops::SwigluCudaParams pf = p;
  pf.out = with_out ? dptr<bf16>(out) : nullptr;
  pf.e4m3 = out_of(q, s);
  H3RT_CUDA_CHECK(ops::swiglu_cuda(pf, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  test::expect_same_bytes(q, q_ref, "q");
  if (with_out) test::expect_same_bytes(out, out_ref, "bf16 out written alongside");
  if (table && !with_out) expect_host_rule(q, out_ref, scale);
}

TEST(FusedE4m3, SwigluRowKernelAndTablePath) {
  for (bool table : {false, true}) {
    run_swiglu(333, 14336, table, false);
    run_swiglu(29, 384, table, true);
  }
}

TEST(FusedE4m3, RefusesWhatItCannotTake) {
  H3RT_REQUIRE_GPU();
  Tensor x = test::device_buffer(DType::bf16, {4, 64});
  Tensor q = test::device_buffer(DType::e4m3, {4, 72});
  ops::RmsNormModulateCudaParams p;
  p.x = dptr<bf16>(x);
  p.rows = 4;
  p.dim = 64;
  p.e4m3.q = dptr<__nv_fp8_e4m3>(q);
  EXPECT_THROW(ops::rmsnorm_modulate_cuda(p, nullptr), Error) << "no scale";
  Tensor s = test::upload(std::vector<float>{1.0f}, DType::f32, {1});
  p.e4m3.scale = dptr<float>(s);
  p.e4m3.q_row_stride = 68;
  EXPECT_THROW(ops::rmsnorm_modulate_cuda(p, nullptr), Error) << "row stride not a multiple of 8";
}

// A whole fp8 forward (the tiny preset, static input scales on every block projection): the
// fused producers (H3RT_FP8_FUSE=1, the default) and the unfused path (=0) give bit-identical
// velocities.
TEST(FusedE4m3, Fp8ForwardBitIdenticalToUnfused) {
  H3RT_REQUIRE_GPU();
  const H3Config c = H3Config::tiny();
  const model::DeviceModel m = model::make_synthetic_gemm_model(c, 7, SyntheticGemm::fp8, 64);
  ASSERT_TRUE(m.has_fp8());
  const ForwardInputs in = test::golden_inputs().inputs();
  model::ForwardSessionOptions o;
  o.cuda_graph = false;
  ForwardOutputs a, b;
  setenv("H3RT_FP8_FUSE", "1", 1);
  EXPECT_EQ(model::fused_projection_inputs(m.blocks[0]),
            (std::vector<std::string>{"qkv", "fc1", "fc2"}));
  {
    model::ForwardSessionCuda s(m, in.layout, o);
    a = s.forward(in);
  }
  setenv("H3RT_FP8_FUSE", "0", 1);
  EXPECT_TRUE(model::fused_projection_inputs(m.blocks[0]).empty());
  {
    model::ForwardSessionCuda s(m, in.layout, o);
    b = s.forward(in);
  }
  unsetenv("H3RT_FP8_FUSE");
  test::expect_same_bits(a.video_velocity, b.video_velocity, "fused vs unfused video");
  test::expect_same_bits(a.audio_velocity, b.audio_velocity, "fused vs unfused audio");
}

}  // namespace
}  // namespace h3rt
