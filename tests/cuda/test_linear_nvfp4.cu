// linear_nvfp4 on the GPU vs the fp64 product of the dequantized operands.
//
// Data: fresh random bf16 matrices (rows with very different norms) quantized by the host
// reference quantizer (weights with the fp32 global-scale rule, activations with the bf16 rule).
// Reference per output: y = alpha * sum_k a_k w_k (+ b) with a, w the dequantized values
// without global scales (exact in float), accumulated in double; alpha = fp32(g_a * g_w).
//
// Bound: the dequantized products are exact in bf16 and fp32, so an algorithm's error before the
// final bf16 rounding is its fp32 accumulation (and epilogue) error. The bar is a relative error
// of 1e-5 measured against alpha * sum_k |a_k w_k| (the dot product's natural scale; |y| itself
// can be ~0 through cancellation); after the bf16 rounding of the output we allow 1 bf16 ulp of
// |y| on top: |y_gpu - y| <= ulp_bf16(y) + 1e-5 * alpha * sum_k |a_k w_k|, every element. Also,
// at most 5% of the outputs may differ from the correctly rounded bf16 of the reference (the
// accumulation error moves an output across a bf16 rounding point only rarely; a wrong scale,
// nibble order or bias fails nearly every element). The padding of strided y (and of strided
// bf16 activations, filled with NaN) must stay untouched / unread.
//
// Each algorithm is a test parameter; an algorithm that returns cudaErrorNotSupported for every
// case (kBlockScaledSm100 on an H200) is reported as skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "formats/nvfp4_layout.h"
#include "h3rt/nvfp4.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"
#include "ops/linear_nvfp4/nvfp4_dequant.h"

namespace h3rt {
namespace {

using ops::Nvfp4GemmAlgo;
using test::dptr;

template <typename F>
void parallel_for(int64_t n, F f) {
  const int64_t nt =
      std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> ts;
  for (int64_t t = 0; t < nt; ++t)
    ts.emplace_back([&, t] {
      for (int64_t i = t * n / nt; i < (t + 1) * n / nt; ++i) f(i);
    });
  for (auto& t : ts) t.join();
}

// bf16 bits [rows, ld] ~ N(0, sd) times a per-row factor exp(U(-2, 2)); columns >= cols hold
// NaN (0xffff). Rows are generated in parallel from seeds derived from `seed`.
std::vector<uint16_t> random_matrix(int64_t rows, int64_t cols, int64_t ld, float sd,
                                    uint64_t seed) {
  std::vector<uint16_t> x(static_cast<size_t>(rows * ld), 0xffff);
  constexpr int64_t kChunk = 64;
  parallel_for((rows + kChunk - 1) / kChunk, [&](int64_t c) {
    std::mt19937_64 g(seed + 0x9E3779B97F4A7C15ull * (c + 1));
    std::normal_distribution<float> d(0.0f, sd);
    std::uniform_real_distribution<float> lg(-2.0f, 2.0f);
    for (int64_t r = c * kChunk; r < std::min(rows, (c + 1) * kChunk); ++r) {
      const float s = std::exp(lg(g));
      for (int64_t k = 0; k < cols; ++k) x[r * ld + k] = f32_to_bf16(d(g) * s);
    }
  });
  return x;
}

// A host NVFP4 tensor and its dequantized values without the global scale.
struct Operand {
  std::vector<uint8_t> q, s;
  float g = 0.0f;
  std::vector<float> deq;  // [rows, cols]
};

// Host reference quantizer, run on 128-row slices in parallel (a slice starting at a multiple of
// 128 owns a contiguous range of the tiled scales).
Operand quantize(const std::vector<uint16_t>& x, int64_t rows, int64_t cols, Nvfp4ScaleRule rule) {
  Operand o;
  std::vector<float> amax(static_cast<size_t>(rows));
  parallel_for(rows, [&](int64_t r) {
    float m = 0.0f;
    for (int64_t k = 0; k < cols; ++k) m = std::max(m, std::fabs(bf16_to_f32(x[r * cols + k])));
    amax[r] = m;
  });
  o.g = nvfp4_global_scale_from_amax(*std::max_element(amax.begin(), amax.end()), rule);
  o.q.resize(static_cast<size_t>(rows * cols / 2));
  o.s.resize(static_cast<size_t>(nvfp4_scales_bytes(rows, cols)));
  const int64_t tile_bytes = 128 * nvfp4::scale_cols(cols);
  parallel_for((rows + 127) / 128, [&](int64_t t) {
    const int64_t r0 = t * 128, n = std::min<int64_t>(128, rows - r0);
    Tensor slice(const_cast<uint16_t*>(x.data() + r0 * cols), DType::bf16, {n, cols}, {cols, 1},
                 nullptr, Device::cpu);
    nvfp4_quantize_into(slice, o.g, o.q.data() + r0 * cols / 2, o.s.data() + t * tile_bytes);
  });
  o.deq.resize(static_cast<size_t>(rows * cols));
  const int64_t kb = cols / 16;
  parallel_for(rows, [&](int64_t r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = o.q[r * cols / 2 + c / 2];
      const uint8_t code = c % 2 == 0 ? byte >> 4 : byte & 0xf;
      o.deq[r * cols + c] =
          e2m1_to_f32(code) * e4m3_to_f32(o.s[nvfp4::scale_offset(r, c / 16, kb)]);
    }
  });
  return o;
}

struct Ref {
  std::vector<double> y, abs;  // alpha * sum a w (no bias) and alpha * sum |a w|
};

Ref reference(const std::vector<float>& a, const std::vector<float>& w, double alpha, int64_t rows,
              int64_t in, int64_t out) {
  Ref r;
  r.y.resize(static_cast<size_t>(rows * out));
  r.abs.resize(r.y.size());
  parallel_for(rows * out, [&](int64_t i) {
    const float* ar = a.data() + (i / out) * in;
    const float* wr = w.data() + (i % out) * in;
    double s[4] = {0, 0, 0, 0}, m[4] = {0, 0, 0, 0};
    for (int64_t k = 0; k < in; k += 4)
      for (int j = 0; j < 4; ++j) {
        const double p = double(ar[k + j]) * wr[k + j];
        s[j] += p;
        m[j] += std::fabs(p);
      }
    r.y[i] = alpha * ((s[0] + s[1]) + (s[2] + s[3]));
    r.abs[i] = alpha * ((m[0] + m[1]) + (m[2] + m[3]));
  });
  return r;
}

// One problem's operands on the device and the references of both activation kinds.
struct Problem {
  int64_t rows, in, out, a_ld;
  Tensor wq, ws, wg, aq, as, ag, a16, bias;
  std::vector<float> bias_f;
  Ref ref_w4a4, ref_w4a16;
};

std::shared_ptr<Problem> make_problem(int64_t rows, int64_t in, int64_t out, int64_t a_pad) {
  const uint64_t seed = test::fresh_seed();
  std::printf("problem rows %lld in %lld out %lld: seed %llu\n", (long long)rows, (long long)in,
              (long long)out, (unsigned long long)seed);
  auto pb = std::make_shared<Problem>();
  pb->rows = rows;
  pb->in = in;
  pb->out = out;
  pb->a_ld = in + a_pad;
  const auto wx = random_matrix(out, in, in, 1.0f / std::sqrt(float(in)), seed);
  const Operand w = quantize(wx, out, in, Nvfp4ScaleRule::kF32Divide);
  const auto ax = random_matrix(rows, in, in, 1.0f, seed ^ 0x5555);
  const Operand a = quantize(ax, rows, in, Nvfp4ScaleRule::kBf16Activation);
  const auto a16 = random_matrix(rows, in, pb->a_ld, 1.0f, seed ^ 0xaaaa);
  std::vector<float> a16f(static_cast<size_t>(rows * in));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < in; ++k) a16f[r * in + k] = bf16_to_f32(a16[r * pb->a_ld + k]);
  std::mt19937_64 g(seed ^ 0xb1a5);
  std::normal_distribution<float> bd(0.0f, 0.5f);
  std::vector<uint16_t> bias(static_cast<size_t>(out));
  for (auto& b : bias) {
    b = f32_to_bf16(bd(g));
    pb->bias_f.push_back(bf16_to_f32(b));
  }
  pb->wq = test::upload(w.q, DType::u8, {out, in / 2});
  pb->ws = test::upload(w.s, DType::u8, {int64_t(w.s.size())});
  pb->wg = test::upload(std::vector<float>{w.g}, DType::f32, {1});
  pb->aq = test::upload(a.q, DType::u8, {rows, in / 2});
  pb->as = test::upload(a.s, DType::u8, {int64_t(a.s.size())});
  pb->ag = test::upload(std::vector<float>{a.g}, DType::f32, {1});
  pb->a16 = test::upload(a16, DType::bf16, {rows, pb->a_ld});
  pb->bias = test::upload(bias, DType::bf16, {out});
  pb->ref_w4a4 = reference(a.deq, w.deq, double(a.g * w.g), rows, in, out);
  pb->ref_w4a16 = reference(a16f, w.deq, double(w.g), rows, in, out);
  return pb;
}

// Problems are built once per process and shared by the algorithm parameters.
std::shared_ptr<Problem> problem(int64_t rows, int64_t in, int64_t out, int64_t a_pad) {
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::shared_ptr<Problem>> cache;
  auto& p = cache[{rows, in, out, a_pad}];
  if (!p) p = make_problem(rows, in, out, a_pad);
  return p;
}

double bf16_ulp(double v) {
  const double a = std::max(std::fabs(v), 0x1p-126);
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

void check(const std::vector<uint16_t>& y, int64_t ldy, const Problem& pb, const Ref& r,
           bool bias) {
  int64_t bad = 0, mismatches = 0;
  double worst = 0.0;  // max of (|err| - ulp) / (alpha sum |a w|), the pre-rounding error bar
  for (int64_t i = 0; i < pb.rows; ++i)
    for (int64_t o = 0; o < pb.out; ++o) {
      const int64_t k = i * pb.out + o;
      const double want = r.y[k] + (bias ? pb.bias_f[o] : 0.0);
      const uint16_t bits = y[i * ldy + o];
      const double got = bf16_to_f32(bits);
      const double err = std::fabs(got - want), ulp = bf16_ulp(want);
      const double tol = ulp + 1e-5 * r.abs[k];
      if (!(err <= tol) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << o << "] = " << got << ", want " << want << " (tol "
                      << tol << ")";
      mismatches += bits != f32_to_bf16(static_cast<float>(want));
      if (r.abs[k] > 0) worst = std::max(worst, (err - ulp) / r.abs[k]);
    }
  EXPECT_EQ(bad, 0);
  const double n = double(pb.rows * pb.out);
  EXPECT_LE(mismatches, 0.05 * n) << "outputs differing from the rounded reference";
  std::printf(
      "  %lld x %lld x %lld: %lld of %.0f outputs differ from bf16(ref); max (err - ulp) "
      "/ sum|a w| = %.3g\n",
      (long long)pb.rows, (long long)pb.in, (long long)pb.out, (long long)mismatches, n, worst);
  for (int64_t i = 0; i < pb.rows; ++i)
    for (int64_t o = pb.out; o < ldy; ++o) ASSERT_EQ(y[i * ldy + o], 0xffff) << "padding written";
}

struct Case {
  bool w4a4, bias;
  int64_t y_pad;
};

// Runs `algo` on one case twice (the second call uses the cached plan), checks the second
// output. False when the algorithm declines (cudaErrorNotSupported).
bool run_case(Nvfp4GemmAlgo algo, const Problem& pb, const Case& c) {
  SCOPED_TRACE(std::string(c.w4a4 ? "W4A4" : "W4A16") + (c.bias ? " bias" : "") + " y_pad " +
               std::to_string(c.y_pad));
  const int64_t ldy = pb.out + c.y_pad;
  Tensor y = test::device_buffer(DType::bf16, {pb.rows, ldy});
  ops::LinearNvfp4CudaParams p;
  if (c.w4a4) {
    p.a_q = dptr<uint8_t>(pb.aq);
    p.a_scales = dptr<uint8_t>(pb.as);
    p.a_global = dptr<float>(pb.ag);
  } else {
    p.a = dptr<__nv_bfloat16>(pb.a16);
    p.a_row_stride = pb.a_ld;
  }
  p.w_q = dptr<uint8_t>(pb.wq);
  p.w_scales = dptr<uint8_t>(pb.ws);
  p.w_global = dptr<float>(pb.wg);
  p.bias = c.bias ? dptr<__nv_bfloat16>(pb.bias) : nullptr;
  p.y = dptr<__nv_bfloat16>(y);
  p.y_row_stride = ldy;
  p.rows = pb.rows;
  p.in = pb.in;
  p.out = pb.out;
  p.algo = algo;
  const size_t bytes = ops::linear_nvfp4_workspace_bytes(p);
  Tensor ws = test::device_buffer(DType::u8, {std::max<int64_t>(1, int64_t(bytes))}, false);
  p.workspace = ws.data();
  p.workspace_bytes = bytes;
  cudaError_t e = ops::linear_nvfp4_cuda(p, nullptr);
  if (e == cudaErrorNotSupported) return false;
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  H3RT_CUDA_CHECK(cudaMemset(y.data(), 0xff, y.nbytes()));
  e = ops::linear_nvfp4_cuda(p, nullptr);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  check(test::download<uint16_t>(y), ldy, pb, c.w4a4 ? pb.ref_w4a4 : pb.ref_w4a16, c.bias);
  return true;
}

const char* name_of(Nvfp4GemmAlgo a) {
  switch (a) {
    case Nvfp4GemmAlgo::kAuto:
      return "Auto";
    case Nvfp4GemmAlgo::kDequantCublas:
      return "DequantCublas";
    case Nvfp4GemmAlgo::kBlockScaledSm100:
      return "BlockScaledSm100";
  }
  return "?";
}

struct ProblemCases {
  int64_t rows, in, out, a_pad;
  std::vector<Case> cases;
};

class LinearNvfp4Algo : public ::testing::TestWithParam<Nvfp4GemmAlgo> {
 protected:
  void run_all(const std::vector<ProblemCases>& list) {
    const Nvfp4GemmAlgo algo = GetParam();
    int ran = 0, declined = 0;
    for (const ProblemCases& pc : list) {
      SCOPED_TRACE("rows " + std::to_string(pc.rows) + " in " + std::to_string(pc.in) + " out " +
                   std::to_string(pc.out));
      const auto pb = problem(pc.rows, pc.in, pc.out, pc.a_pad);
      for (const Case& c : pc.cases) (run_case(algo, *pb, c) ? ran : declined)++;
    }
    // These must run on every CUDA device this project supports (sm_80+).
    if (algo == Nvfp4GemmAlgo::kDequantCublas || algo == Nvfp4GemmAlgo::kAuto)
      EXPECT_EQ(declined, 0) << name_of(algo) << " declined a case";
    if (ran == 0)
      GTEST_SKIP() << name_of(algo) << " is not supported on this device "
                   << "(cudaErrorNotSupported for every case)";
    if (declined)
      std::printf("%s declined %d of %d cases\n", name_of(algo), declined, ran + declined);
  }
};

TEST_P(LinearNvfp4Algo, SmallShapesStridesBias) {
  H3RT_REQUIRE_GPU();
  run_all({
      {300,
       512,
       264,
       64,
       {{true, true, 8}, {false, true, 0}, {true, false, 0}, {false, false, 24}}},
      {1, 64, 8, 0, {{true, false, 0}, {false, true, 8}}},
      {129, 1024, 136, 0, {{true, true, 0}, {false, true, 0}}},
  });
}

// The H3 projections (out x in): qkv 21504 x 5376, attention out 5376 x 7168, fc1 28672 x 5376,
// fc2 5376 x 14336, at a small row count that is not a multiple of 8.
TEST_P(LinearNvfp4Algo, H3ProjectionShapes) {
  H3RT_REQUIRE_GPU();
  const std::vector<Case> both = {{true, true, 0}, {false, true, 8}};
  run_all({{19, 5376, 21504, 0, both},
           {19, 7168, 5376, 16, both},
           {19, 5376, 28672, 0, both},
           {19, 14336, 5376, 0, both}});
}

INSTANTIATE_TEST_SUITE_P(Algos, LinearNvfp4Algo,
                         ::testing::Values(Nvfp4GemmAlgo::kDequantCublas,
                                           Nvfp4GemmAlgo::kBlockScaledSm100,
                                           Nvfp4GemmAlgo::kAuto),
                         [](const auto& info) { return std::string(name_of(info.param)); });

// The dequantization kernel is bit-exact (the products are exact in bf16), writes nothing past
// a row, and writes the GEMM constants.
TEST(LinearNvfp4Cuda, DequantKernelBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Shape2 {
    int64_t rows, cols, ld;
  };
  for (const Shape2& s : {Shape2{300, 448, 448}, Shape2{1, 64, 72}, Shape2{257, 5376, 5376},
                          Shape2{129, 14336, 14344}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " cols " + std::to_string(s.cols));
    const auto x = random_matrix(s.rows, s.cols, s.cols, 1.0f, seed + s.cols);
    const Operand o = quantize(x, s.rows, s.cols, Nvfp4ScaleRule::kBf16Activation);
    Tensor q = test::upload(o.q, DType::u8, {s.rows, s.cols / 2});
    Tensor sc = test::upload(o.s, DType::u8, {int64_t(o.s.size())});
    Tensor out = test::device_buffer(DType::bf16, {s.rows, s.ld});
    const float ga = 0.37f, gw = o.g;
    Tensor g = test::upload(std::vector<float>{ga, gw}, DType::f32, {2});
    Tensor consts = test::device_buffer(DType::f32, {s.rows});
    ops::Nvfp4DequantParams p;
    p.q = dptr<uint8_t>(q);
    p.scales = dptr<uint8_t>(sc);
    p.out = dptr<__nv_bfloat16>(out);
    p.rows = s.rows;
    p.cols = s.cols;
    p.out_row_stride = s.ld;
    p.g_a = dptr<float>(g);
    p.g_w = dptr<float>(g) + 1;
    p.alpha_out = dptr<float>(consts);
    p.alpha_n = s.rows;
    ASSERT_EQ(ops::nvfp4_dequant_bf16(p, nullptr), cudaSuccess);
    const auto got = test::download<uint16_t>(out);
    int64_t bad = 0;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.ld; ++c) {
        const uint16_t want = c < s.cols ? f32_to_bf16(o.deq[r * s.cols + c]) : 0xffff;
        if (got[r * s.ld + c] != want && bad++ < 5)
          ADD_FAILURE() << "[" << r << "," << c << "] got 0x" << std::hex << got[r * s.ld + c]
                        << " want 0x" << want;
      }
    EXPECT_EQ(bad, 0);
    const auto k = test::download<float>(consts);
    for (int64_t i = 0; i < s.rows; ++i) ASSERT_EQ(k[i], ga * gw);
  }
}

// Argument checks run before any device work (no GPU needed).
TEST(LinearNvfp4Cuda, RejectsBadArguments) {
  alignas(256) static uint8_t fake[1024];
  ops::LinearNvfp4CudaParams p;
  p.a_q = fake;
  p.a_scales = fake;
  p.a_global = reinterpret_cast<const float*>(fake);
  p.w_q = fake;
  p.w_scales = fake;
  p.w_global = reinterpret_cast<const float*>(fake);
  p.y = reinterpret_cast<__nv_bfloat16*>(fake);
  p.rows = 4;
  p.in = 96;  // not a multiple of 64
  p.out = 8;
  EXPECT_THROW(ops::linear_nvfp4_cuda(p, nullptr), Error);
  p.in = 128;
  p.out = 12;  // not a multiple of 8
  EXPECT_THROW(ops::linear_nvfp4_cuda(p, nullptr), Error);
  p.out = 8;
  p.a = reinterpret_cast<const __nv_bfloat16*>(fake);  // both activation kinds
  EXPECT_THROW(ops::linear_nvfp4_cuda(p, nullptr), Error);
  p.a_q = nullptr;
  p.a_row_stride = 100;  // below in
  EXPECT_THROW(ops::linear_nvfp4_cuda(p, nullptr), Error);
  p.a_row_stride = 0;
  p.y_row_stride = 12;  // not a multiple of 8
  EXPECT_THROW(ops::linear_nvfp4_cuda(p, nullptr), Error);
  p.y_row_stride = 0;
  p.w_global = nullptr;
  EXPECT_THROW(ops::linear_nvfp4_cuda(p, nullptr), Error);
}

TEST(LinearNvfp4Cuda, WorkspaceTooSmallIsAnError) {
  H3RT_REQUIRE_GPU();
  const auto pb = problem(1, 64, 8, 0);
  Tensor y = test::device_buffer(DType::bf16, {1, 8});
  ops::LinearNvfp4CudaParams p;
  p.a = dptr<__nv_bfloat16>(pb->a16);
  p.w_q = dptr<uint8_t>(pb->wq);
  p.w_scales = dptr<uint8_t>(pb->ws);
  p.w_global = dptr<float>(pb->wg);
  p.y = dptr<__nv_bfloat16>(y);
  p.rows = 1;
  p.in = 64;
  p.out = 8;
  p.algo = Nvfp4GemmAlgo::kDequantCublas;
  ASSERT_GT(ops::linear_nvfp4_workspace_bytes(p), 0u);
  Tensor ws = test::device_buffer(DType::u8, {1024});
  p.workspace = ws.data();
  p.workspace_bytes = 1024;
  EXPECT_THROW(ops::linear_nvfp4_cuda(p, nullptr), Error);
  EXPECT_NE(ops::linear_nvfp4_resolve(Nvfp4GemmAlgo::kAuto), Nvfp4GemmAlgo::kAuto);
}

}  // namespace
}  // namespace h3rt
