// The sm_90a NVFP4 GEMM with in-mainloop dequantization (nvfp4_gemm::mainloop_sm90, and
// mainloop_sm90_expanded_w, which takes W expanded to f16 scratch) against an fp64 product of the
// dequantized operands, on fresh random data quantized by the host reference
// quantizer. The operands' products are exact, so the kernel may differ from the fp64 value only
// by its fp32 accumulation: every output must be the bf16 rounding of some value within
// tol = 1e-5 * |alpha| * sum_k |a_k w_k| (+ fp32 epilogue roundings) of the fp64 value, i.e.
// 1e-5 relative to the size of the dot product's terms (a cancelling sum has no relative bound).
// For typical outputs tol is a fraction of a bf16 ulp: outputs must equal the bf16 rounding of the
// fp64 value except near a rounding boundary, and such outputs must stay rare (<= 1%).
// A wrong block, scale, element order or stale tile moves outputs by many ulps.
// Also checked: padding columns of a strided y and the rows past `rows` stay untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "h3rt/nvfp4.h"
#include "ops/linear_nvfp4/linear_nvfp4_kernels.h"

namespace h3rt {
namespace {

using ops::LinearNvfp4CudaParams;

struct Case {
  int64_t rows, in, out;
  bool w4a4, bias;
  int64_t y_pad = 0;        // y_row_stride = out + y_pad
  int64_t a_pad = 0;        // W4A16: a_row_stride = in + a_pad
  int64_t check_rows = 0;   // 0: every row; else this many sampled rows (plus the first/last)
  bool expanded_w = false;  // W4A4 through mainloop_sm90_expanded_w (W expanded to scratch)
};

std::string describe(const Case& c) {
  return std::string(c.w4a4 ? "W4A4" : "W4A16") + (c.expanded_w ? " expanded W" : "") +
         " rows=" + std::to_string(c.rows) + " in=" + std::to_string(c.in) +
         " out=" + std::to_string(c.out) + (c.bias ? " bias" : "") +
         " y_pad=" + std::to_string(c.y_pad) + " a_pad=" + std::to_string(c.a_pad);
}

// Random rows with per-row magnitudes, plus all-zero blocks, tiny blocks (subnormal e4m3 scales)
// and an outlier, so zero, subnormal and large block scales all occur. Row stride `ld`.
test::Bf16Data make_matrix(int64_t rows, int64_t cols, int64_t ld, std::mt19937_64& rng) {
  test::Bf16Data d = test::random_rows_bf16(rows, ld, rng);
  std::uniform_int_distribution<int64_t> row(0, rows - 1), blk(0, cols / 16 - 1);
  for (int k = 0; k < 8; ++k) {
    const int64_t r = row(rng), b = blk(rng);
    for (int i = 0; i < 16; ++i) {
      const int64_t at = r * ld + b * 16 + i;
      d.bits[at] = k < 4 ? 0 : f32_to_bf16(d.f[at] * 1e-4f);
      d.f[at] = bf16_to_f32(d.bits[at]);
    }
  }
  const int64_t at = row(rng) * ld + blk(rng) * 16;
  d.bits[at] = f32_to_bf16(300.0f);
  d.f[at] = bf16_to_f32(d.bits[at]);
  return d;
}

struct Quantized {
  std::vector<uint8_t> q, s;
  float g;
  std::vector<float> deq;  // e2m1 * block scale (no global scale), [rows, cols], exact
};

Quantized quantize(const test::Bf16Data& x, int64_t rows, int64_t cols, int64_t ld) {
  Tensor t(const_cast<uint16_t*>(x.bits.data()), DType::bf16, {rows, cols}, {ld, 1}, nullptr,
           Device::cpu);
  Quantized r;
  r.g = nvfp4_global_scale(t, Nvfp4ScaleRule::kF32Divide);
  Nvfp4Tensor n = nvfp4_quantize(t, r.g);
  const uint8_t* q = n.qdata.ptr<uint8_t>();
  const uint8_t* s = n.scales.ptr<uint8_t>();
  r.q.assign(q, q + n.qdata.nbytes());
  r.s.assign(s, s + n.scales.nbytes());
  Tensor deq = nvfp4_dequantize(n.qdata, n.scales, 1.0f);
  const float* f = deq.ptr<float>();
  r.deq.assign(f, f + rows * cols);
  return r;
}

template <typename F>
void parallel_for(int64_t n, F&& f) {
  const int64_t nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> ts;
  for (int64_t t = 0; t < nt; ++t)
    ts.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += nt) f(i);
    });
  for (auto& t : ts) t.join();
}

struct Stats {
  int64_t checked = 0, exact = 0, boundary = 0, bad = 0, first_bad_row = -1, first_bad_col = -1;
  float first_got = 0.0f;
  double first_want = 0.0;
};

void run_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t lda = c.in + c.a_pad, ldy = c.out + c.y_pad;

  // Operands: A as NVFP4 (W4A4) or bf16 (W4A16), W as NVFP4; A rows dequantized for the reference.
  test::Bf16Data a_bf16 = make_matrix(c.rows, c.in, c.w4a4 ? c.in : lda, rng);
  Quantized aq;
  std::vector<float> a_ref;
  if (c.w4a4) {
    aq = quantize(a_bf16, c.rows, c.in, c.in);
    a_ref = aq.deq;
  } else {
    a_ref.resize(c.rows * c.in);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t k = 0; k < c.in; ++k) a_ref[r * c.in + k] = a_bf16.f[r * lda + k];
  }
  test::Bf16Data w_bf16 = make_matrix(c.out, c.in, c.in, rng);
  const Quantized wq = quantize(w_bf16, c.out, c.in, c.in);
  const test::Bf16Data bias = test::random_bf16(c.out, rng, 0.0f, 2.0f);

  // Device buffers; y has 3 extra poisoned rows to catch writes past `rows`.
  const float ga = c.w4a4 ? aq.g : 1.0f;
  Tensor d_a = c.w4a4 ? test::upload(aq.q, DType::u8, {c.rows, c.in / 2})
                      : test::upload(a_bf16.bits, DType::bf16, {c.rows, lda});
  Tensor d_as = c.w4a4 ? test::upload(aq.s, DType::u8, {int64_t(aq.s.size())}) : Tensor();
  Tensor d_ag = test::upload(std::vector<float>{ga}, DType::f32, {1});
  Tensor d_w = test::upload(wq.q, DType::u8, {c.out, c.in / 2});
  Tensor d_ws = test::upload(wq.s, DType::u8, {int64_t(wq.s.size())});
  Tensor d_wg = test::upload(std::vector<float>{wq.g}, DType::f32, {1});
  Tensor d_b = test::upload(bias.bits, DType::bf16, {c.out});
  Tensor d_y = test::device_buffer(DType::bf16, {c.rows + 3, ldy});

  LinearNvfp4CudaParams p;
  if (c.w4a4) {
    p.a_q = test::dptr<uint8_t>(d_a);
    p.a_scales = test::dptr<uint8_t>(d_as);
    p.a_global = test::dptr<float>(d_ag);
  } else {
    p.a = test::dptr<__nv_bfloat16>(d_a);
    p.a_row_stride = lda;
  }
  p.w_q = test::dptr<uint8_t>(d_w);
  p.w_scales = test::dptr<uint8_t>(d_ws);
  p.w_global = test::dptr<float>(d_wg);
  p.bias = c.bias ? test::dptr<__nv_bfloat16>(d_b) : nullptr;
  p.y = test::dptr<__nv_bfloat16>(d_y);
  p.y_row_stride = ldy;
  p.rows = c.rows;
  p.in = c.in;
  p.out = c.out;
  p.algo = ops::Nvfp4GemmAlgo::kMainloopSm90;
  Tensor d_scratch;
  if (c.expanded_w) {  // scratch poisoned: every byte the GEMM reads must be written first
    p.algo = ops::Nvfp4GemmAlgo::kMainloopSm90ExpandedW;
    const size_t bytes = ops::nvfp4_gemm::mainloop_sm90_expanded_w_workspace_bytes(p);
    d_scratch = test::device_buffer(DType::u8, {int64_t(bytes)});
    p.workspace = d_scratch.data();
    p.workspace_bytes = bytes;
    ASSERT_EQ(ops::nvfp4_gemm::mainloop_sm90_expanded_w(p, nullptr), cudaSuccess);
  } else {
    ASSERT_EQ(ops::nvfp4_gemm::mainloop_sm90(p, nullptr), cudaSuccess);
  }
  const std::vector<uint16_t> y = test::download<uint16_t>(d_y);

  // Untouched: padding columns and the extra rows.
  int64_t touched = 0;
  for (int64_t r = 0; r < c.rows + 3; ++r)
    for (int64_t j = (r < c.rows ? c.out : 0); j < ldy; ++j) touched += y[r * ldy + j] != 0xffff;
  EXPECT_EQ(touched, 0) << "writes outside y[rows, out]";

  // Rows to check: all, or a sample that always includes the first and the last (tail tile).
  std::vector<int64_t> rows;
  if (c.check_rows == 0 || c.check_rows >= c.rows) {
    for (int64_t r = 0; r < c.rows; ++r) rows.push_back(r);
  } else {
    std::uniform_int_distribution<int64_t> pick(0, c.rows - 1);
    rows = {0, c.rows - 1};
    for (int64_t i = 0; i < c.check_rows; ++i) rows.push_back(pick(rng));
  }
  const double alpha = static_cast<double>(ga * wq.g);  // the fp32 product, as the kernel uses
  std::vector<Stats> per_row(rows.size());
  parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t i) {
    const int64_t r = rows[i];
    const float* ar = a_ref.data() + r * c.in;
    Stats& st = per_row[i];
    for (int64_t n = 0; n < c.out; ++n) {
      const float* wr = wq.deq.data() + n * c.in;
      double s[4] = {0, 0, 0, 0}, sa[4] = {0, 0, 0, 0};
      for (int64_t k = 0; k < c.in; k += 4)
        for (int u = 0; u < 4; ++u) {
          const double t = double(ar[k + u]) * double(wr[k + u]);
          s[u] += t;
          sa[u] += std::fabs(t);
        }
      const double acc = (s[0] + s[1]) + (s[2] + s[3]);
      const double sum_abs = (sa[0] + sa[1]) + (sa[2] + sa[3]);
      const double b = c.bias ? double(bias.f[n]) : 0.0;
      const double ref = alpha * acc + b;
      const double tol =
          1e-5 * std::fabs(alpha) * sum_abs + 0x1p-23 * (std::fabs(ref) + std::fabs(b));
      const uint16_t got_bits = y[r * ldy + n];
      const uint16_t want_bits = f32_to_bf16(static_cast<float>(ref));
      const float got = bf16_to_f32(got_bits), want = bf16_to_f32(want_bits);
      ++st.checked;
      bool ok = got_bits == want_bits;
      if (ok) {
        ++st.exact;
      } else if (std::isfinite(got) && std::isfinite(want)) {
        // got is the rounding of some value within tol of ref iff the boundary of got's
        // rounding interval on ref's side is within tol of ref.
        const int32_t o = test::bf16_ordered(got_bits) + (ref > double(got) ? 1 : -1);
        const uint16_t nb = o >= 0 ? uint16_t(o) : uint16_t(0x8000 | -o);
        ok = std::fabs(ref - 0.5 * (double(got) + double(bf16_to_f32(nb)))) <= tol;
        st.boundary += ok;
      }
      if (!ok) {
        if (st.bad == 0) {
          st.first_bad_row = r;
          st.first_bad_col = n;
          st.first_got = got;
          st.first_want = ref;
        }
        ++st.bad;
      }
    }
  });
  Stats tot;
  for (const Stats& s : per_row) {
    if (s.bad > 0 && tot.bad == 0) {
      tot.first_bad_row = s.first_bad_row;
      tot.first_bad_col = s.first_bad_col;
      tot.first_got = s.first_got;
      tot.first_want = s.first_want;
    }
    tot.checked += s.checked;
    tot.exact += s.exact;
    tot.boundary += s.boundary;
    tot.bad += s.bad;
  }
  EXPECT_EQ(tot.bad, 0) << "first bad y[" << tot.first_bad_row << ", " << tot.first_bad_col
                        << "] = " << tot.first_got << ", fp64 reference " << tot.first_want;
  // Near-boundary outputs are rare when the kernel is right (its error is far below an ulp).
  EXPECT_LE(tot.boundary, tot.checked / 100 + 2)
      << "too many outputs not the rounding of the fp64 value";
  EXPECT_GT(tot.checked, 0);
  std::printf("[ mainloop ] %s: %lld checked, %lld exact, %lld within tol of a boundary\n",
              describe(c).c_str(), static_cast<long long>(tot.checked),
              static_cast<long long>(tot.exact), static_cast<long long>(tot.boundary));
}

// Skips without a GPU, or where the kernel is not built or cannot run (not an sm_90 device).
bool mainloop_available() {
  if (!cuda::cuda_device_available()) return false;
  LinearNvfp4CudaParams p;  // invalid on purpose: an sm_90a build answers InvalidValue
  const cudaError_t e = ops::nvfp4_gemm::mainloop_sm90(p, nullptr);
  if (e == cudaErrorNotSupported) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    const bool sm90 = major == 9 && minor == 0;
    const bool built =
        (std::string(",") + H3RT_CUDA_ARCH_LIST + ",").find(",90a,") != std::string::npos;
    EXPECT_FALSE(sm90 && built) << "sm_90a build on an sm_90 device must run";
    return false;
  }
  EXPECT_EQ(e, cudaErrorInvalidValue);
  return true;
}

#define H3RT_REQUIRE_MAINLOOP()                                                       \
  do {                                                                                \
    if (!mainloop_available()) GTEST_SKIP() << "no sm_90 device or kernel not built"; \
  } while (0)

TEST(LinearNvfp4Mainloop, W4A4SmallAndOddShapes) {
  H3RT_REQUIRE_MAINLOOP();
  run_case({300, 64, 256, true, true, 8});
  run_case({77, 128, 264, true, false});
  run_case({129, 192, 8, true, true, 16});
  run_case({1000, 320, 520, true, true});
}

TEST(LinearNvfp4Mainloop, W4A4DeepK) {
  H3RT_REQUIRE_MAINLOOP();
  run_case({1000, 5376, 256, true, false});
  run_case({300, 14336, 256, true, true, 24});
}

TEST(LinearNvfp4Mainloop, W4A4ModelWidth) {
  H3RT_REQUIRE_MAINLOOP();
  run_case({1000, 5376, 5376, true, true, 8, 0, 48});
}

// Expanded W: the same kernel with W streamed from f16 scratch; A still dequantized in the loop.
TEST(LinearNvfp4Mainloop, W4A4ExpandedW) {
  H3RT_REQUIRE_MAINLOOP();
  for (Case c : std::vector<Case>{{300, 64, 256, true, true, 8},
                                  {77, 128, 264, true, false},
                                  {129, 192, 8, true, true, 16},
                                  {1000, 320, 520, true, true},
                                  {300, 14336, 256, true, true, 24},
                                  {1000, 5376, 5376, true, true, 8, 0, 48}}) {
    c.expanded_w = true;
    run_case(c);
  }
}

TEST(LinearNvfp4Mainloop, W4A16) {
  H3RT_REQUIRE_MAINLOOP();
  run_case({300, 64, 256, false, true, 0, 8});
  run_case({77, 128, 264, false, false, 8, 0});
  run_case({300, 14336, 256, false, true, 0, 16});
  run_case({1000, 5376, 5376, false, true, 8, 24, 48});
}

TEST(LinearNvfp4Mainloop, RejectsBadShapes) {
  H3RT_REQUIRE_MAINLOOP();
  Tensor w = test::device_buffer(DType::u8, {256, 32});
  Tensor s = test::device_buffer(DType::u8, {2048});
  Tensor g = test::upload(std::vector<float>{1.0f}, DType::f32, {1});
  Tensor y = test::device_buffer(DType::bf16, {8, 256});
  LinearNvfp4CudaParams p;
  p.a_q = test::dptr<uint8_t>(w);
  p.a_scales = test::dptr<uint8_t>(s);
  p.a_global = test::dptr<float>(g);
  p.w_q = test::dptr<uint8_t>(w);
  p.w_scales = test::dptr<uint8_t>(s);
  p.w_global = test::dptr<float>(g);
  p.y = test::dptr<__nv_bfloat16>(y);
  p.rows = 8;
  p.out = 256;
  p.in = 48;  // not a multiple of 64
  EXPECT_EQ(ops::nvfp4_gemm::mainloop_sm90(p, nullptr), cudaErrorInvalidValue);
  p.in = 64;
  p.out = 252;  // not a multiple of 8
  EXPECT_EQ(ops::nvfp4_gemm::mainloop_sm90(p, nullptr), cudaErrorInvalidValue);
  p.out = 256;
  EXPECT_EQ(ops::nvfp4_gemm::mainloop_sm90(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Expanded W: scratch too small is an error naming the bytes needed; W4A16 is declined.
  p.workspace_bytes = ops::nvfp4_gemm::mainloop_sm90_expanded_w_workspace_bytes(p) - 1;
  p.workspace = w.data();
  EXPECT_THROW(ops::nvfp4_gemm::mainloop_sm90_expanded_w(p, nullptr), Error);
  p.a_q = nullptr;
  p.a = test::dptr<__nv_bfloat16>(y);
  EXPECT_EQ(ops::nvfp4_gemm::mainloop_sm90_expanded_w(p, nullptr), cudaErrorNotSupported);
}

}  // namespace
}  // namespace h3rt
