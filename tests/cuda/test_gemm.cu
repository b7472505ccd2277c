// cuBLASLt GEMMs vs a CPU fp64 product of the same (dequantized) operands.
// Bound per output: |y - ref| <= 2^-8 |ref| (bf16 output rounding, with margin) +
// (K + 2) 2^-24 sum_k |x_k w_k| (worst case of any fp32 summation order), checked for every
// element; the mean relative error must also stay at the bf16 rounding level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "ops/linear/cublaslt_gemm.h"
#include "ops/linear/linear.h"

namespace h3rt {
namespace {

using test::dptr;

struct Ref {
  std::vector<double> y, abs;  // exact product (+bias) and sum |x w|
};

Ref reference(const std::vector<float>& x, int64_t ldx, const std::vector<float>& w,
              const std::vector<float>* bias, double scale, int64_t rows, int64_t in, int64_t out) {
  Ref r;
  r.y.resize(rows * out);
  r.abs.resize(rows * out);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0, a = 0.0;
      const float* xr = x.data() + i * ldx;
      const float* wr = w.data() + o * in;
      for (int64_t k = 0; k < in; ++k) {
        const double p = double(xr[k]) * wr[k];
        s += p;
        a += std::fabs(p);
      }
      r.y[i * out + o] = s * scale + (bias ? (*bias)[o] : 0.0);
      r.abs[i * out + o] = a * scale;
    }
  return r;
}

// partial_roundings: bf16 roundings of partial sums the algorithm adds (a split-K reduction in
// the output type), each up to 2^-8 of the partial's magnitude (bounded by sum |x w|).
void check(const std::vector<uint16_t>& y, int64_t ldy, const Ref& r, int64_t rows, int64_t in,
           int64_t out, int partial_roundings = 0) {
  int64_t bad = 0;
  double rel_sum = 0.0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < out; ++o) {
      const double got = bf16_to_f32(y[i * ldy + o]), want = r.y[i * out + o];
      const double tol = std::ldexp(std::fabs(want), -8) +
                         double(in + 2) * std::ldexp(r.abs[i * out + o], -24) +
                         partial_roundings * std::ldexp(r.abs[i * out + o], -8) + 1e-30;
      const double err = std::fabs(got - want);
      if (!(err <= tol) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << o << "] = " << got << ", want " << want << " (tol "
                      << tol << ")";
      rel_sum += err / (std::fabs(want) + r.abs[i * out + o] * 1e-3);
    }
  EXPECT_EQ(bad, 0);
  EXPECT_LT(rel_sum / double(rows * out), 1.0 / 256) << "mean relative error";
}

void run_bf16(int64_t rows, int64_t in, int64_t out, bool bias, int64_t x_pad, int64_t y_pad) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t ldx = in + x_pad, ldy = out + y_pad;
  auto x = test::random_bf16(rows * ldx, g, 0.0f, 1.0f);
  auto w = test::random_bf16(out * in, g, 0.0f, 1.0f / std::sqrt(float(in)));
  auto b = test::random_bf16(out, g, 0.0f, 0.5f);
  Ref r = reference(x.f, ldx, w.f, bias ? &b.f : nullptr, 1.0, rows, in, out);
  Tensor dx = test::upload(x.bits, DType::bf16, {rows, ldx});
  Tensor dw = test::upload(w.bits, DType::bf16, {out, in});
  Tensor db = test::upload(b.bits, DType::bf16, {out});
  Tensor dy = test::device_buffer(DType::bf16, {rows, ldy});
  ops::LinearCudaParams p;
  p.x = dptr<__nv_bfloat16>(dx);
  p.w = dptr<__nv_bfloat16>(dw);
  p.bias = bias ? dptr<__nv_bfloat16>(db) : nullptr;
  p.y = dptr<__nv_bfloat16>(dy);
  p.rows = rows;
  p.in = in;
  p.out = out;
  p.x_row_stride = ldx;
  p.y_row_stride = ldy;
  ASSERT_EQ(ops::linear_bf16_cuda(p, nullptr), cudaSuccess);
  ASSERT_EQ(ops::linear_bf16_cuda(p, nullptr), cudaSuccess);  // second call: cached plan
  const auto y = test::download<uint16_t>(dy);
  check(y, ldy, r, rows, in, out);
  for (int64_t i = 0; i < rows; ++i)  // the padding columns of y are never written
    for (int64_t o = out; o < ldy; ++o) ASSERT_EQ(y[i * ldy + o], 0xffff);
}

TEST(CudaGemm, Bf16MatchesFp64) {
  H3RT_REQUIRE_GPU();
  run_bf16(257, 2048, 384, false, 0, 0);
}
TEST(CudaGemm, Bf16BiasStridedReleaseWidth) {
  H3RT_REQUIRE_GPU();
  run_bf16(67, 5376, 264, true, 64, 8);
}

// The e4m3 quantizer bit-exact with the host, then the fp8 GEMM (with and without bias) against
// fp64 of the same quantized operands.
void fp8_gemm_matches_fp64(int64_t rows, int64_t out) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t in = 5376;
  const float x_scale = 0.0125f, w_scale = 0.002f;
  auto x = test::random_bf16(rows * in, g, 0.0f, 1.5f);  // beyond 448*scale in the tails: saturates
  std::normal_distribution<float> wd(0.0f, 60.0f);
  std::vector<uint8_t> wq(out * in);
  std::vector<float> wf(out * in);
  for (size_t i = 0; i < wq.size(); ++i) {
    wq[i] = f32_to_e4m3_satfinite(wd(g));
    wf[i] = e4m3_to_f32(wq[i]);
  }
  auto b = test::random_bf16(out, g, 0.0f, 0.5f);
  std::vector<uint8_t> xq(rows * in);
  std::vector<float> xf(rows * in);
  for (size_t i = 0; i < xq.size(); ++i) {
    xq[i] = f32_to_e4m3_satfinite(x.f[i] / x_scale);
    xf[i] = e4m3_to_f32(xq[i]);
  }

  Tensor dx = test::upload(x.bits, DType::bf16, {rows, in});
  Tensor dxq = test::device_buffer(DType::e4m3, {rows, in});
  Tensor dw = test::upload(wq, DType::e4m3, {out, in});
  Tensor dsx = test::upload(std::vector<float>{x_scale}, DType::f32, {1});
  Tensor dsw = test::upload(std::vector<float>{w_scale}, DType::f32, {1});
  Tensor db = test::upload(b.bits, DType::bf16, {out});
  Tensor dy = test::device_buffer(DType::bf16, {rows, out});
  ops::QuantizeE4m3CudaParams qp;
  qp.x = dptr<__nv_bfloat16>(dx);
  qp.q = dptr<__nv_fp8_e4m3>(dxq);
  qp.scale = dptr<float>(dsx);
  qp.rows = rows;
  qp.cols = in;
  ASSERT_EQ(ops::quantize_e4m3_cuda(qp, nullptr), cudaSuccess);
  const auto got_q = test::download<uint8_t>(dxq);
  int64_t qbad = 0;
  for (size_t i = 0; i < xq.size(); ++i) qbad += got_q[i] != xq[i];
  EXPECT_EQ(qbad, 0) << "quantized activations differ from the host e4m3 conversion";

  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "with bias" : "no bias");
    Ref r = reference(xf, in, wf, bias ? &b.f : nullptr, double(x_scale) * w_scale, rows, in, out);
    H3RT_CUDA_CHECK(cudaMemset(dy.data(), 0xff, dy.nbytes()));
    ops::LinearFp8CudaParams p;
    p.x = dptr<__nv_fp8_e4m3>(dxq);
    p.w = dptr<__nv_fp8_e4m3>(dw);
    p.x_scale = dptr<float>(dsx);
    p.w_scale = dptr<float>(dsw);
    p.bias = bias ? dptr<__nv_bfloat16>(db) : nullptr;
    p.y = dptr<__nv_bfloat16>(dy);
    p.rows = rows;
    p.in = in;
    p.out = out;
    ASSERT_EQ(ops::linear_fp8_cuda(p, nullptr), cudaSuccess);
    check(test::download<uint16_t>(dy), out, r, rows, in, out);
  }
}

// Ragged tiles (131 rows, 272 outputs) and several whole ones.
TEST(CudaGemm, Fp8ScaledQuantizerBitExactAndGemmMatchesFp64) {
  H3RT_REQUIRE_GPU();
  fp8_gemm_matches_fp64(131, 272);
  fp8_gemm_matches_fp64(600, 768);
}

}  // namespace
}  // namespace h3rt

namespace h3rt {
namespace {

// Every algorithm of cuBLASLt's heuristic list (Gemm::algo, what bench gemm-algos times) is the
// one the list describes and computes the same product within the fp64 bound (plus the bf16
// roundings of a split-K reduction in the output type); index 0 is the default path's; an index
// past the list is refused.
TEST(CudaGemm, EveryHeuristicAlgorithmMatchesFp64) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 300, in = 1024, out = 512;
  auto x = test::random_bf16(rows * in, g, 0.0f, 1.0f);
  auto w = test::random_bf16(out * in, g, 0.0f, 1.0f / 32);
  auto b = test::random_bf16(out, g, 0.0f, 0.5f);
  const Ref r = reference(x.f, in, w.f, &b.f, 1.0, rows, in, out);
  Tensor dx = test::upload(x.bits, DType::bf16, {rows, in});
  Tensor dw = test::upload(w.bits, DType::bf16, {out, in});
  Tensor db = test::upload(b.bits, DType::bf16, {out});
  Tensor dy = test::device_buffer(DType::bf16, {rows, out});
  ops::lt::Gemm gm;
  gm.w = dptr<__nv_bfloat16>(dw);
  gm.x = dptr<__nv_bfloat16>(dx);
  gm.x_ld = in;
  gm.bias = dptr<__nv_bfloat16>(db);
  gm.y = dptr<__nv_bfloat16>(dy);
  gm.y_ld = out;
  gm.rows = rows;
  gm.in = in;
  gm.out = out;
  const std::vector<ops::lt::AlgoInfo> list = ops::lt::algos(gm, 8);
  ASSERT_FALSE(list.empty());
  for (size_t i = 0; i < list.size(); ++i) {
    const ops::lt::AlgoInfo& a = list[i];
    SCOPED_TRACE("algo " + std::to_string(i) + " (id " + std::to_string(a.id) + ", split-K " +
                 std::to_string(a.split_k) + ", reduction " + std::to_string(a.reduction) + ")");
    gm.algo = static_cast<int>(i);
    EXPECT_TRUE(ops::lt::algo_of(gm).same_config(a)) << "Gemm::algo runs another algorithm";
    ASSERT_EQ(ops::lt::gemm(gm, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const bool bf16_partials = a.split_k > 1 && (a.reduction == 1 || a.reduction == 4);
    check(test::download<uint16_t>(dy), out, r, rows, in, out, bf16_partials ? a.split_k : 0);
  }
  gm.algo = 0;  // the default path (linear_bf16_cuda's plan) runs the list's first
  EXPECT_TRUE(ops::lt::algo_of(gm).same_config(list[0]));
  gm.algo = static_cast<int>(list.size());
  if (list.size() < 8) EXPECT_EQ(ops::lt::gemm(gm, nullptr), cudaErrorNotSupported);
}

// h3rt's pick (Gemm::algo 0) is the configuration preferred for a shape on the GPU it was
// measured on (the H100: fc1 fp8 at the seed shape, tile 403 cluster 5) and the heuristic's first
// with H3RT_CUBLASLT_TABLE=0 or on other GPUs; `listed` indexes the heuristic's list as algos()
// gives it. Plans are only built (no GEMM runs): the pointers set the alignment.
TEST(CudaGemm, PreferredConfigurationFollowsTheGpu) {
  H3RT_REQUIRE_GPU();
  if (std::getenv("H3RT_CUBLASLT_TABLE")) GTEST_SKIP() << "H3RT_CUBLASLT_TABLE already set";
  Tensor buf = test::device_buffer(DType::f32, {64});
  ops::lt::Gemm gm;
  gm.kind = ops::lt::Operands::kFp8;
  gm.w = gm.x = gm.w_scale = gm.x_scale = dptr<float>(buf);
  gm.bias = gm.y = reinterpret_cast<__nv_bfloat16*>(dptr<float>(buf));
  gm.in = gm.x_ld = 5376;
  gm.out = gm.y_ld = 28672;
  gm.rows = 37810;
  const std::vector<ops::lt::AlgoInfo> list = ops::lt::algos(gm, ops::lt::kMaxAlgos);
  ASSERT_FALSE(list.empty());
  int dev = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, dev), cudaSuccess);
  const bool offered = std::any_of(list.begin(), list.end(), [](const ops::lt::AlgoInfo& a) {
    return a.tile == 403 && a.cluster == 5 && a.split_k <= 1 && a.reduction == 0;
  });
  const ops::lt::AlgoInfo pick = ops::lt::algo_of(gm);
  if (std::string(prop.name).find("H100") != std::string::npos && offered) {
    EXPECT_EQ(pick.tile, 403);
    EXPECT_EQ(pick.cluster, 5);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    ops::lt::Gemm g = gm;
    g.algo = static_cast<int>(i);
    g.listed = true;
    EXPECT_TRUE(ops::lt::algo_of(g).same_config(list[i])) << "listed index " << i;
  }
  gm.rows = 37811;  // a fresh plan, built with the list turned off
  ASSERT_EQ(setenv("H3RT_CUBLASLT_TABLE", "0", 1), 0);
  const ops::lt::AlgoInfo first = ops::lt::algo_of(gm);
  unsetenv("H3RT_CUBLASLT_TABLE");
  ops::lt::Gemm g = gm;
  g.listed = true;
  EXPECT_TRUE(first.same_config(ops::lt::algo_of(g)))
      << "with the list off, algo 0 is the heuristic's first";
}

}  // namespace
}  // namespace h3rt
