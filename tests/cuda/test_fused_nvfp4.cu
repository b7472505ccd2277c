// NVFP4 quantization fused into its producers (src/formats/nvfp4_quantize_fused.h): for
// rmsnorm_modulate (qkv / fc1 input), swiglu (fc2 input) and the flash and Sage attention
// epilogues (out_proj input; every Sage kernel variant), the fused qdata, every scale byte (padding
// included) and the global scale bits must equal those of the unfused producer (bf16 out) followed
// by nvfp4_quantize, with a given g (kGiven) and a computed one (kTwoPass, kBf16Activation rule),
// at release widths on fresh random data with row counts that are not multiples of 128.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "formats/nvfp4_quantize.h"
#include "formats/nvfp4_quantize_fused.h"
#include "h3rt/nvfp4.h"
#include "norm_test_util.h"
#include "ops/attention/attention.h"
#include "ops/attention_sage/attention_sage_cuda.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "swiglu_test_util.h"

namespace h3rt {
namespace {

using test::dptr;
using Src = Nvfp4GlobalScaleSource;

constexpr int64_t kHidden = 5376, kFfn = 14336, kHeads = 56;

// Fast host bf16 data (large cases): uniform in (-a, a) with a per-row factor in [2^-3, 2^3]
// and a few exactly-zero and tiny blocks, so zero, subnormal and saturated scales occur.
std::vector<uint16_t> random_bf16(int64_t rows, int64_t cols, uint64_t seed, float a) {
  std::vector<uint16_t> v(rows * cols);
  uint64_t s = seed | 1;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const float rs = std::exp2(static_cast<float>(next() % 7) - 3.0f);
    for (int64_t c = 0; c < cols; ++c) {
      const float u = static_cast<float>(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
      v[r * cols + c] = f32_to_bf16(u * a * rs);
    }
  }
  for (int k = 0; k < 16; ++k) {
    const int64_t r = next() % rows, b = next() % (cols / 16);
    for (int i = 0; i < 16; ++i) {
      uint16_t& x = v[r * cols + b * 16 + i];
      x = k < 8 ? 0 : f32_to_bf16(bf16_to_f32(x) * 1e-6f);
    }
  }
  return v;
}

Tensor zeroed(DType dt, Shape shape) {
  Tensor t = test::device_buffer(dt, std::move(shape));
  H3RT_CUDA_CHECK(cudaMemset(t.data(), 0, t.nbytes()));
  return t;
}

// The NVFP4 output of one run: device buffers (poisoned) and the launcher block pointing at them.
struct Q {
  Tensor q, s, g, ws;
  Nvfp4Out out;
  Q(int64_t rows, int64_t cols, Src src, float g_given) {
    q = test::device_buffer(DType::u8, {rows, cols / 2});
    s = test::device_buffer(DType::u8, {nvfp4_scales_bytes(rows, cols)});
    g = test::upload(std::vector<float>{src == Src::kGiven ? g_given : NAN}, DType::f32, {1});
    ws = zeroed(DType::u8, {static_cast<int64_t>(nvfp4_quantize_workspace_bytes())});
    out.qdata = dptr<uint8_t>(q);
    out.scales = dptr<uint8_t>(s);
    out.global_scale = dptr<float>(g);
    out.source = src;
    out.rule = Nvfp4ScaleRule::kBf16Activation;
    out.workspace = ws.data();
  }
  // nvfp4_quantize of a bf16 tensor into these buffers (the unfused reference).
  void quantize(const Tensor& x, int64_t rows, int64_t cols) const {
    Nvfp4QuantizeParams p;
    p.x = x.data();
    p.rows = rows;
    p.cols = cols;
    p.ld = cols;
    p.qdata = out.qdata;
    p.scales = out.scales;
    p.global_scale = out.global_scale;
    p.source = out.source;
    p.rule = out.rule;
    p.workspace = out.workspace;
    H3RT_CUDA_CHECK(nvfp4_quantize(p, nullptr));
  }
};

float given_scale(const Tensor& y, int64_t rows, int64_t cols, uint64_t seed) {
  const Q probe(rows, cols, Src::kTwoPass, 0.0f);
  probe.quantize(y, rows, cols);
  return test::download<float>(probe.g)[0] * (0.6f + static_cast<float>(seed % 8) * 0.1f);
}

// Byte-for-byte comparison of two NVFP4 results (qdata, scales with padding, g bits).
void expect_identical(const Q& fused, const Q& ref, const char* what) {
  SCOPED_TRACE(what);
  const auto fq = test::download<uint8_t>(fused.q), rq = test::download<uint8_t>(ref.q);
  const auto fs = test::download<uint8_t>(fused.s), rs = test::download<uint8_t>(ref.s);
  const float fg = test::download<float>(fused.g)[0], rg = test::download<float>(ref.g)[0];
  uint32_t fgb, rgb;
  std::memcpy(&fgb, &fg, 4);
  std::memcpy(&rgb, &rg, 4);
  EXPECT_EQ(fgb, rgb) << "global scale " << fg << " vs " << rg;
  EXPECT_GT(rg, 0.0f);
  int64_t bad_q = 0, bad_s = 0, first_q = -1, first_s = -1;
  for (size_t i = 0; i < rq.size(); ++i)
    if (fq[i] != rq[i] && bad_q++ == 0) first_q = static_cast<int64_t>(i);
  for (size_t i = 0; i < rs.size(); ++i)
    if (fs[i] != rs[i] && bad_s++ == 0) first_s = static_cast<int64_t>(i);
  EXPECT_EQ(bad_q, 0) << "qdata bytes differ, first at " << first_q;
  EXPECT_EQ(bad_s, 0) << "scale bytes differ, first at " << first_s;
  // The data must exercise the encoder: some nonzero codes and several distinct scales.
  EXPECT_NE(std::count(rq.begin(), rq.end(), uint8_t{0}), static_cast<ptrdiff_t>(rq.size()));
}

void expect_same_bits(const Tensor& a, const Tensor& b, const char* what) {
  const auto x = test::download<uint16_t>(a), y = test::download<uint16_t>(b);
  ASSERT_EQ(x.size(), y.size());
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += x[i] != y[i];
  EXPECT_EQ(bad, 0) << what << ": bf16 elements differ";
}

// A static input_scale near the computed one (amax/2688 of the bf16 output y), off by a factor
// in [0.6, 1.3] that varies per run: below 1 the largest blocks saturate at scale 448.
float given_scale(const Tensor& y, int64_t rows, int64_t cols, uint64_t seed);

// ---- rmsnorm_modulate (optionally with the fused gated residual) ----

struct NormCase {
  int64_t rows;
  bool residual;
  Src src;
  int64_t dim = kHidden;
};

void run_norm_case(const NormCase& c) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << c.rows << " residual "
                                  << c.residual << " src " << static_cast<int>(c.src) << " dim "
                                  << c.dim);
  H3RT_REQUIRE_GPU();
  const int64_t rows = c.rows, dim = c.dim, tables = 3;
  const auto xh = random_bf16(rows, dim, seed, 4.0f);
  const auto rh = random_bf16(rows, dim, seed * 3 + 1, 2.0f);
  const auto th = random_bf16(3 * tables, dim, seed * 5 + 7, 0.5f);  // shift, scale, gate rows
  const auto wh = random_bf16(1, dim, seed * 7 + 3, 1.5f);
  std::vector<int64_t> idx(rows);
  for (int64_t r = 0; r < rows; ++r) idx[r] = (r * 7 + static_cast<int64_t>(seed % 5)) % tables;
  Tensor x_ref = test::upload(xh, DType::bf16, {rows, dim});
  Tensor x_fused = test::upload(xh, DType::bf16, {rows, dim});
  Tensor res = test::upload(rh, DType::bf16, {rows, dim});
  Tensor tab = test::upload(th, DType::bf16, {3 * tables, dim});
  Tensor w = test::upload(wh, DType::bf16, {dim});
  Tensor di = test::upload(idx, DType::i64, {rows});
  Tensor y_ref = test::device_buffer(DType::bf16, {rows, dim});
  Tensor y_fused = test::device_buffer(DType::bf16, {rows, dim});

  ops::RmsNormModulateCudaParams p =
      test::modulated_norm_params(w, tab, di, c.residual ? &res : nullptr, rows, dim, tables);
  ops::RmsNormModulateCudaParams pr = p;  // unfused: bf16 y, then quantize
  pr.x = dptr<__nv_bfloat16>(x_ref);
  pr.y = dptr<__nv_bfloat16>(y_ref);
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(pr, nullptr));
  const float g = c.src == Src::kGiven ? given_scale(y_ref, rows, dim, seed) : 0.0f;
  Q ref(rows, dim, c.src, g), fused(rows, dim, c.src, g);
  ref.quantize(y_ref, rows, dim);

  ops::RmsNormModulateCudaParams pf = p;  // fused; given g also writes bf16 y (both outputs)
  pf.x = dptr<__nv_bfloat16>(x_fused);
  pf.y = c.src == Src::kGiven ? dptr<__nv_bfloat16>(y_fused) : nullptr;
  pf.nvfp4 = fused.out;
  H3RT_CUDA_CHECK(ops::rmsnorm_modulate_cuda(pf, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());

  expect_identical(fused, ref, "rmsnorm_modulate");
  if (c.residual) expect_same_bits(x_fused, x_ref, "residual stream x");
  if (c.src == Src::kGiven) expect_same_bits(y_fused, y_ref, "bf16 y written alongside");
}

TEST(FusedNvfp4, RmsNormModulateGivenScale) {
  run_norm_case({1000, false, Src::kGiven});
}
// 8192 channels (4 vectors a thread).
TEST(FusedNvfp4, RmsNormModulateGivenScaleWide) {
  run_norm_case({333, false, Src::kGiven, 8192});
}
TEST(FusedNvfp4, RmsNormModulateComputedScale) {
  run_norm_case({1000, false, Src::kTwoPass});
}
TEST(FusedNvfp4, ResidualRmsNormModulateGivenScale) {
  run_norm_case({1000, true, Src::kGiven});
}
TEST(FusedNvfp4, ResidualRmsNormModulateComputedScaleSeedRows) {
  run_norm_case({37810, true, Src::kTwoPass});
}

// ---- swiglu ----

// table: both runs take the silu table path (the fused one with a given g; a computed g falls
// back to the row kernel).
void run_swiglu_case(int64_t rows, Src src, bool exact_exp, int64_t f = kFfn, bool table = false) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << rows << " src "
                                  << static_cast<int>(src) << " exact_exp " << exact_exp
                                  << " table " << table);
  H3RT_REQUIRE_GPU();
  Tensor in = test::upload(random_bf16(rows, 2 * f, seed, 6.0f), DType::bf16, {rows, 2 * f});
  Tensor y_ref = test::device_buffer(DType::bf16, {rows, f});
  Tensor y_fused = test::device_buffer(DType::bf16, {rows, f});
  const Tensor silu = test::silu_table_on_gpu();
  ops::SwigluCudaParams p;
  p.in = dptr<__nv_bfloat16>(in);
  p.rows = rows;
  p.ffn = f;
  p.exact_exp = exact_exp;
  if (table) p.silu_table = dptr<__nv_bfloat16>(silu);
  ops::SwigluCudaParams pr = p;
  pr.out = dptr<__nv_bfloat16>(y_ref);
  H3RT_CUDA_CHECK(ops::swiglu_cuda(pr, nullptr));
  const float g = src == Src::kGiven ? given_scale(y_ref, rows, f, seed) : 0.0f;
  Q ref(rows, f, src, g), fused(rows, f, src, g);
  ref.quantize(y_ref, rows, f);
  ops::SwigluCudaParams pf = p;
  pf.out = src == Src::kGiven ? dptr<__nv_bfloat16>(y_fused) : nullptr;
  pf.nvfp4 = fused.out;
  H3RT_CUDA_CHECK(ops::swiglu_cuda(pf, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  expect_identical(fused, ref, "swiglu");
  if (src == Src::kGiven) expect_same_bits(y_fused, y_ref, "bf16 out written alongside");
}

TEST(FusedNvfp4, SwigluGivenScale) {
  run_swiglu_case(1000, Src::kGiven, true);
}
TEST(FusedNvfp4, SwigluComputedScale) {
  run_swiglu_case(1000, Src::kTwoPass, true);
}
TEST(FusedNvfp4, SwigluFastExpComputedScale) {
  run_swiglu_case(333, Src::kTwoPass, false);
}
// 48 columns: 3 blocks per row, so the scale matrix has a padding column as well as padding rows.
TEST(FusedNvfp4, SwigluNarrowWidthScalePadding) {
  run_swiglu_case(200, Src::kGiven, true, 48);
  run_swiglu_case(200, Src::kTwoPass, true, 48);
}
// The persistent table kernel (the block's path): seed width, a row count whose vectors do not
// fill the last wave, the narrow width, and a computed g (row kernel fallback).
TEST(FusedNvfp4, SwigluTableGivenScale) {
  run_swiglu_case(1000, Src::kGiven, true, kFfn, true);
  run_swiglu_case(333, Src::kGiven, false, kFfn, true);
  run_swiglu_case(200, Src::kGiven, true, 48, true);
  run_swiglu_case(300, Src::kTwoPass, true, kFfn, true);
}

// ---- flash attention epilogue (given g only) ----

// An attention epilogue on fixed inputs, run(out, nvfp4) launching it with a bf16 output (may be
// null) and an NVFP4 one (null: none): bf16 only (then quantized: the reference), bf16 + NVFP4
// and NVFP4 only must give the same NVFP4 bytes and bf16 output. False if run reports
// cudaErrorNotSupported (the kernel cannot run here).
template <typename Run>
bool expect_epilogue_identical(int64_t rows, uint64_t seed, Run&& run) {
  const int64_t span = kHeads * 128;
  Tensor o_ref = test::device_buffer(DType::bf16, {rows, span});
  Tensor o_fused = test::device_buffer(DType::bf16, {rows, span});
  const cudaError_t e = run(dptr<__nv_bfloat16>(o_ref), nullptr);
  if (e == cudaErrorNotSupported) return false;
  H3RT_CUDA_CHECK(e);
  const float g = given_scale(o_ref, rows, span, seed);
  Q ref(rows, span, Src::kGiven, g), fused(rows, span, Src::kGiven, g);
  Q only(rows, span, Src::kGiven, g);
  ref.quantize(o_ref, rows, span);
  H3RT_CUDA_CHECK(run(dptr<__nv_bfloat16>(o_fused), &fused.out));
  H3RT_CUDA_CHECK(run(nullptr, &only.out));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  expect_identical(fused, ref, "epilogue, bf16 written too");
  expect_identical(only, ref, "epilogue, NVFP4 only");
  expect_same_bits(o_fused, o_ref, "bf16 output written alongside");
  return true;
}

void run_attention_case(int64_t rows) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << rows);
  H3RT_REQUIRE_GPU();
  const int64_t span = kHeads * 128;
  Tensor qkv = test::upload(random_bf16(rows, 3 * span, seed, 3.0f), DType::bf16, {rows, 3 * span});
  const ops::AttentionCudaParams base =
      ops::attention_params_from_qkv(dptr<__nv_bfloat16>(qkv), rows, kHeads, nullptr);
  expect_epilogue_identical(rows, seed, [&](__nv_bfloat16* out, const Nvfp4Out* nvfp4) {
    ops::AttentionCudaParams p = base;
    p.out = out;
    if (nvfp4) p.nvfp4 = *nvfp4;
    return ops::attention_flash_bf16_cuda(p, nullptr);
  });
}

TEST(FusedNvfp4, AttentionEpilogueGivenScale) {
  run_attention_case(1000);
}
TEST(FusedNvfp4, AttentionEpilogueGivenScaleFewRows) {
  run_attention_case(77);
}

// ---- Sage attention epilogues (given g only), each kernel variant ----

// Pre-pass once, then the kernel three times on the same buffers (expect_epilogue_identical).
// Returns false if the variant cannot run here.
bool run_sage_case(int64_t rows, attention_sage::SageVariant variant) {
  namespace as = attention_sage;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << rows << " variant "
                                  << as::sage_variant_name(variant));
  const int64_t span = kHeads * 128;
  Tensor qkv = test::upload(random_bf16(rows, 3 * span, seed, 3.0f), DType::bf16, {rows, 3 * span});
  Tensor buf = zeroed(DType::u8, {static_cast<int64_t>(as::sage_buffer_bytes(rows, kHeads))});
  as::SagePrepassParams pre;
  pre.qkv = qkv.data();
  pre.row_stride = 3 * span;
  pre.seq = rows;
  pre.heads = kHeads;
  pre.sm_scale = 1.0f / std::sqrt(128.0f);
  pre.buf = as::sage_buffers(buf.data(), rows, kHeads);
  H3RT_CUDA_CHECK(as::sage_prepass(pre, nullptr));  // once: the kernel only reads its buffers
  return expect_epilogue_identical(rows, seed, [&](__nv_bfloat16* out, const Nvfp4Out* nvfp4) {
    as::SageAttentionParams p{pre.buf, rows, kHeads, out, span, variant};
    if (nvfp4) p.nvfp4 = *nvfp4;
    return as::sage_attention(p, nullptr);
  });
}

TEST(FusedNvfp4, SageEpilogueGivenScaleEveryVariant) {
  H3RT_REQUIRE_GPU();
  using V = attention_sage::SageVariant;
  int ran = 0;
  for (V v : {V::w4, V::wgmma_pp3})
    for (int64_t rows : {1000, 77}) ran += run_sage_case(rows, v) ? 1 : 0;
  if (ran == 0) GTEST_SKIP() << "no Sage kernel runs on this device";
}

// The op-level path the block takes: attention_cuda(sage_8bit) with the NVFP4 output only.
TEST(FusedNvfp4, SageAttentionOpNvfp4Only) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const int64_t rows = 300, span = kHeads * 128;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Tensor qkv = test::upload(random_bf16(rows, 3 * span, seed, 3.0f), DType::bf16, {rows, 3 * span});
  Tensor o_ref = test::device_buffer(DType::bf16, {rows, span});
  ops::AttentionCudaParams p = ops::attention_params_from_qkv(dptr<__nv_bfloat16>(qkv), rows,
                                                              kHeads, dptr<__nv_bfloat16>(o_ref));
  const size_t ws = ops::attention_workspace_bytes(p, ops::AttentionKernel::sage_8bit);
  Tensor work = zeroed(DType::u8, {static_cast<int64_t>(ws)});
  p.workspace = work.data();
  p.workspace_bytes = ws;
  const cudaError_t e = ops::attention_cuda(p, ops::AttentionKernel::sage_8bit, nullptr);
  if (e == cudaErrorNotSupported) GTEST_SKIP() << "no Sage kernel runs on this device";
  H3RT_CUDA_CHECK(e);
  const float g = given_scale(o_ref, rows, span, seed);
  Q ref(rows, span, Src::kGiven, g), only(rows, span, Src::kGiven, g);
  ref.quantize(o_ref, rows, span);
  ops::AttentionCudaParams po = p;
  po.out = nullptr;
  po.nvfp4 = only.out;
  H3RT_CUDA_CHECK(ops::attention_cuda(po, ops::AttentionKernel::sage_8bit, nullptr));
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  expect_identical(only, ref, "attention_cuda (sage_8bit), NVFP4 only");
  // A computed g cannot be fused into the attention epilogue.
  Q computed(rows, span, Src::kTwoPass, 0.0f);
  po.nvfp4 = computed.out;
  EXPECT_THROW(ops::attention_cuda(po, ops::AttentionKernel::sage_8bit, nullptr), Error);
}

TEST(FusedNvfp4, AttentionRejectsComputedScale) {
  H3RT_REQUIRE_GPU();
  const int64_t rows = 64, span = kHeads * 128;
  Tensor qkv = zeroed(DType::bf16, {rows, 3 * span});
  Q q(rows, span, Src::kTwoPass, 0.0f);
  ops::AttentionCudaParams p =
      ops::attention_params_from_qkv(dptr<__nv_bfloat16>(qkv), rows, kHeads, nullptr);
  p.nvfp4 = q.out;
  EXPECT_THROW(ops::attention_flash_bf16_cuda(p, nullptr), Error);
}

TEST(FusedNvfp4, ProducersRejectBadNvfp4Params) {
  H3RT_REQUIRE_GPU();
  Tensor in = zeroed(DType::bf16, {4, 2 * 24});
  Q q(4, 24, Src::kGiven, 1.0f);
  ops::SwigluCudaParams p;
  p.in = dptr<__nv_bfloat16>(in);
  p.rows = 4;
  p.ffn = 24;  // not a multiple of 16
  p.nvfp4 = q.out;
  EXPECT_THROW(ops::swiglu_cuda(p, nullptr), Error);
  p.ffn = 16;
  p.nvfp4.source = Src::kSingleLaunch;
  EXPECT_THROW(ops::swiglu_cuda(p, nullptr), Error);
  p.nvfp4.source = Src::kTwoPass;
  p.nvfp4.workspace = nullptr;
  EXPECT_THROW(ops::swiglu_cuda(p, nullptr), Error);
}

}  // namespace
}  // namespace h3rt
