// Fused memory-bound kernels vs the CPU references in bf16 mode, at the release widths
// (H = 5376, 56 heads x 128, F = 14336) on a few thousand rows of fresh random data. The
// kernels keep the reference's bf16 rounding points and reduce the norms in double, so every
// comparison is bit-exact, except swiglu's fast-exp path (bounded by one bf16 ulp).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "ops/gated_residual/gated_residual.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/rope_table/rope_table.h"
#include "swiglu_test_util.h"

namespace h3rt {
namespace {

using test::Bf16Data;
using test::dptr;

constexpr int64_t kH = 5376, kHeads = 56, kHd = 128, kF = 14336, kTimesteps = 3;

// AdaLN table [3M, 6H] and per-row table indices a[r] = t*3 + tag.
struct Modulation {
  Bf16Data table;
  std::vector<int64_t> idx;
};

Modulation random_modulation(int64_t rows, std::mt19937_64& g) {
  Modulation m;
  m.table = test::random_bf16(3 * kTimesteps * 6 * kH, g, 0.0f, 0.7f);
  std::uniform_int_distribution<int64_t> t(0, kTimesteps - 1), tag(0, 2);
  m.idx.resize(rows);
  for (auto& v : m.idx) v = t(g) * 3 + tag(g);
  return m;
}

const __nv_bfloat16* bf(const Tensor& t, int64_t offset = 0) {
  return dptr<__nv_bfloat16>(t) + offset;
}

TEST(CudaFusedOps, RmsNormModulateBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 3001;
  Bf16Data x = test::random_rows_bf16(rows, kH, g);
  Bf16Data w = test::random_bf16(kH, g, 1.0f, 0.2f);
  Modulation mod = random_modulation(rows, g);

  std::vector<float> want(rows * kH);
  ops::RmsNormModulateParams c;
  c.x = x.f.data();
  c.y = want.data();
  c.weight = w.f.data();
  c.shift = mod.table.f.data();       // chunk 0: shift_msa
  c.scale = mod.table.f.data() + kH;  // chunk 1: scale_msa
  c.row_table_index = mod.idx.data();
  c.rows = rows;
  c.dim = kH;
  c.table_row_stride = 6 * kH;
  c.bf16 = true;
  ops::rmsnorm_modulate_cpu(c);

  Tensor dx = test::upload(x.bits, DType::bf16, {rows, kH});
  Tensor dw = test::upload(w.bits, DType::bf16, {kH});
  Tensor dt = test::upload(mod.table.bits, DType::bf16, {3 * kTimesteps, 6 * kH});
  Tensor di = test::upload(mod.idx, DType::i64, {rows});
  Tensor dy = test::device_buffer(DType::bf16, {rows, kH});
  ops::RmsNormModulateCudaParams p;
  p.x = dptr<__nv_bfloat16>(dx);
  p.y = dptr<__nv_bfloat16>(dy);
  p.weight = bf(dw);
  p.shift = bf(dt);
  p.scale = bf(dt, kH);
  p.row_table_index = dptr<int64_t>(di);
  p.rows = rows;
  p.dim = kH;
  p.table_row_stride = 6 * kH;
  ASSERT_EQ(ops::rmsnorm_modulate_cuda(p, nullptr), cudaSuccess);
  auto cmp = test::compare_bf16(test::download<uint16_t>(dy), want.data(), want.size());
  EXPECT_EQ(cmp.mismatches, 0) << "max " << cmp.max_ulp << " ulp, first at " << cmp.first_bad;
  // x is only read without a fused residual.
  EXPECT_EQ(test::download<uint16_t>(dx), x.bits);
}

TEST(CudaFusedOps, PlainRmsNormSmallWidthBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 77, dim = 192;  // the tiny golden width: 24 vectors, one warp
  Bf16Data x = test::random_rows_bf16(rows, dim, g);
  std::vector<float> want(rows * dim);
  ops::RmsNormModulateParams c;
  c.x = x.f.data();
  c.y = want.data();
  c.rows = rows;
  c.dim = dim;
  c.bf16 = true;
  ops::rmsnorm_modulate_cpu(c);
  Tensor dx = test::upload(x.bits, DType::bf16, {rows, dim});
  Tensor dy = test::device_buffer(DType::bf16, {rows, dim});
  ops::RmsNormModulateCudaParams p;
  p.x = dptr<__nv_bfloat16>(dx);
  p.y = dptr<__nv_bfloat16>(dy);
  p.rows = rows;
  p.dim = dim;
  ASSERT_EQ(ops::rmsnorm_modulate_cuda(p, nullptr), cudaSuccess);
  auto cmp = test::compare_bf16(test::download<uint16_t>(dy), want.data(), want.size());
  EXPECT_EQ(cmp.mismatches, 0) << "max " << cmp.max_ulp << " ulp";
}

TEST(CudaFusedOps, GatedResidualBitExact) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 2500;
  Bf16Data x = test::random_rows_bf16(rows, kH, g);
  Bf16Data y = test::random_rows_bf16(rows, kH, g);
  Modulation mod = random_modulation(rows, g);

  std::vector<float> want = x.f;
  ops::GatedResidualParams c;
  c.x = want.data();
  c.y = y.f.data();
  c.gate = mod.table.f.data() + 2 * kH;  // chunk 2: gate_msa
  c.row_table_index = mod.idx.data();
  c.rows = rows;
  c.dim = kH;
  c.table_row_stride = 6 * kH;
  c.bf16 = true;
  ops::gated_residual_cpu(c);

  Tensor dx = test::upload(x.bits, DType::bf16, {rows, kH});
  Tensor dy = test::upload(y.bits, DType::bf16, {rows, kH});
  Tensor dt = test::upload(mod.table.bits, DType::bf16, {3 * kTimesteps, 6 * kH});
  Tensor di = test::upload(mod.idx, DType::i64, {rows});
  ops::GatedResidualCudaParams p;
  p.x = dptr<__nv_bfloat16>(dx);
  p.y = bf(dy);
  p.gate = bf(dt, 2 * kH);
  p.row_table_index = dptr<int64_t>(di);
  p.rows = rows;
  p.dim = kH;
  p.table_row_stride = 6 * kH;
  ASSERT_EQ(ops::gated_residual_cuda(p, nullptr), cudaSuccess);
  auto cmp = test::compare_bf16(test::download<uint16_t>(dx), want.data(), want.size());
  EXPECT_EQ(cmp.mismatches, 0) << "max " << cmp.max_ulp << " ulp, first at " << cmp.first_bad;
}

// x += gate_msa * attn; n = RMSNorm2(x) * (1 + scale_mlp) + shift_mlp: one fused kernel vs
// gated_residual_cuda followed by rmsnorm_modulate_cuda, and both vs the CPU chain.
TEST(CudaFusedOps, FusedResidualNormMatchesUnfusedAndCpu) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 2049;
  Bf16Data x = test::random_rows_bf16(rows, kH, g);
  Bf16Data y = test::random_rows_bf16(rows, kH, g);
  Bf16Data w = test::random_bf16(kH, g, 1.0f, 0.2f);
  Modulation mod = random_modulation(rows, g);

  std::vector<float> want_x = x.f, want_n(rows * kH);
  ops::GatedResidualParams cg;
  cg.x = want_x.data();
  cg.y = y.f.data();
  cg.gate = mod.table.f.data() + 2 * kH;
  cg.row_table_index = mod.idx.data();
  cg.rows = rows;
  cg.dim = kH;
  cg.table_row_stride = 6 * kH;
  cg.bf16 = true;
  ops::gated_residual_cpu(cg);
  ops::RmsNormModulateParams cn;
  cn.x = want_x.data();
  cn.y = want_n.data();
  cn.weight = w.f.data();
  cn.shift = mod.table.f.data() + 3 * kH;
  cn.scale = mod.table.f.data() + 4 * kH;
  cn.row_table_index = mod.idx.data();
  cn.rows = rows;
  cn.dim = kH;
  cn.table_row_stride = 6 * kH;
  cn.bf16 = true;
  ops::rmsnorm_modulate_cpu(cn);

  Tensor dy = test::upload(y.bits, DType::bf16, {rows, kH});
  Tensor dw = test::upload(w.bits, DType::bf16, {kH});
  Tensor dt = test::upload(mod.table.bits, DType::bf16, {3 * kTimesteps, 6 * kH});
  Tensor di = test::upload(mod.idx, DType::i64, {rows});
  ops::RmsNormModulateCudaParams p;
  p.weight = bf(dw);
  p.shift = bf(dt, 3 * kH);
  p.scale = bf(dt, 4 * kH);
  p.row_table_index = dptr<int64_t>(di);
  p.rows = rows;
  p.dim = kH;
  p.table_row_stride = 6 * kH;

  // Unfused: two kernels.
  Tensor ux = test::upload(x.bits, DType::bf16, {rows, kH});
  Tensor un = test::device_buffer(DType::bf16, {rows, kH});
  ops::GatedResidualCudaParams gp;
  gp.x = dptr<__nv_bfloat16>(ux);
  gp.y = bf(dy);
  gp.gate = bf(dt, 2 * kH);
  gp.row_table_index = dptr<int64_t>(di);
  gp.rows = rows;
  gp.dim = kH;
  gp.table_row_stride = 6 * kH;
  ASSERT_EQ(ops::gated_residual_cuda(gp, nullptr), cudaSuccess);
  ops::RmsNormModulateCudaParams up = p;
  up.x = dptr<__nv_bfloat16>(ux);
  up.y = dptr<__nv_bfloat16>(un);
  ASSERT_EQ(ops::rmsnorm_modulate_cuda(up, nullptr), cudaSuccess);

  // Fused: one kernel.
  Tensor fx = test::upload(x.bits, DType::bf16, {rows, kH});
  Tensor fn = test::device_buffer(DType::bf16, {rows, kH});
  ops::RmsNormModulateCudaParams fp = p;
  fp.x = dptr<__nv_bfloat16>(fx);
  fp.y = dptr<__nv_bfloat16>(fn);
  fp.residual = bf(dy);
  fp.residual_gate = bf(dt, 2 * kH);
  ASSERT_EQ(ops::rmsnorm_modulate_cuda(fp, nullptr), cudaSuccess);

  const auto ux_h = test::download<uint16_t>(ux), fx_h = test::download<uint16_t>(fx);
  const auto un_h = test::download<uint16_t>(un), fn_h = test::download<uint16_t>(fn);
  EXPECT_EQ(fx_h, ux_h) << "fused residual differs from gated_residual_cuda";
  EXPECT_EQ(fn_h, un_h) << "fused norm output differs from the unfused chain";
  auto cx = test::compare_bf16(fx_h, want_x.data(), want_x.size());
  auto cn2 = test::compare_bf16(fn_h, want_n.data(), want_n.size());
  EXPECT_EQ(cx.mismatches, 0) << "residual vs CPU: max " << cx.max_ulp << " ulp";
  EXPECT_EQ(cn2.mismatches, 0) << "norm vs CPU: max " << cn2.max_ulp << " ulp";
}

struct QkvCase {
  bool norm, rope;
  int slots = 0;
  bool ring = false;  // the per-(row, head group) kernel unless asked
  int64_t rows = 1999, heads = kHeads;
  bool swap_qk = false;  // k before q in the row
};

void run_qk_norm_rope(const QkvCase& qc) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + (qc.ring ? ", ring" : ", per row") + ", rows " +
               std::to_string(qc.rows) + ", heads " + std::to_string(qc.heads));
  std::mt19937_64 g(seed);
  const int64_t rows = qc.rows, heads = qc.heads, span = heads * kHd, stride = 3 * span;
  const int64_t q_off = qc.swap_qk ? span : 0, k_off = qc.swap_qk ? 0 : span;
  Bf16Data qkv = test::random_rows_bf16(rows, stride, g);
  Bf16Data qw = test::random_bf16(kHd, g, 1.0f, 0.3f), kw = test::random_bf16(kHd, g, 1.0f, 0.3f);
  // Realistic positions: t up to the seed's ~37,900, h/w on the latent grid (may be negative).
  std::vector<double> pos(rows * 3);
  std::uniform_real_distribution<double> pt(0.0, 37900.0), phw(-4.0, 60.0);
  for (int64_t r = 0; r < rows; ++r) {
    pos[r * 3] = std::round(pt(g) * 3.0) / 3.0;
    pos[r * 3 + 1] = phw(g);
    pos[r * 3 + 2] = phw(g);
  }
  const std::vector<float> inv = ops::rope_inv_freq(16);
  std::vector<float> cosv(rows * 96), sinv(rows * 96);
  ops::RopeTableParams rt;
  rt.positions = pos.data();
  rt.inv_freq = inv.data();
  rt.cos = cosv.data();
  rt.sin = sinv.data();
  rt.rows = rows;
  rt.freqs = 16;
  ops::rope_table_cpu(rt);

  std::vector<float> want = qkv.f;
  ops::QkNormRopeParams c;
  c.qkv = want.data();
  c.row_stride = stride;
  c.q_offset = q_off;
  c.k_offset = k_off;
  c.rows = rows;
  c.heads = heads;
  c.q_weight = qw.f.data();
  c.k_weight = kw.f.data();
  c.cos = cosv.data();
  c.sin = sinv.data();
  c.norm = qc.norm;
  c.rope = qc.rope;
  c.bf16 = true;
  ops::qk_norm_rope_cpu(c);

  Tensor dq = test::upload(qkv.bits, DType::bf16, {rows, stride});
  Tensor dqw = test::upload(qw.bits, DType::bf16, {kHd});
  Tensor dkw = test::upload(kw.bits, DType::bf16, {kHd});
  Tensor dc = test::upload(cosv, DType::f32, {rows, 96});
  Tensor ds = test::upload(sinv, DType::f32, {rows, 96});
  ops::QkNormRopeCudaParams p;
  p.qkv = dptr<__nv_bfloat16>(dq);
  p.row_stride = stride;
  p.q_offset = q_off;
  p.k_offset = k_off;
  p.rows = rows;
  p.heads = heads;
  p.q_weight = bf(dqw);
  p.k_weight = bf(dkw);
  p.cos = dptr<float>(dc);
  p.sin = dptr<float>(ds);
  p.norm = qc.norm;
  p.rope = qc.rope;
  p.slots = qc.slots;
  p.ring = qc.ring;
  ASSERT_EQ(ops::qk_norm_rope_cuda(p, nullptr), cudaSuccess);
  const auto got = test::download<uint16_t>(dq);
  auto cmp = test::compare_bf16(got, want.data(), want.size());  // q, k, and v untouched
  EXPECT_EQ(cmp.mismatches, 0) << "max " << cmp.max_ulp << " ulp, first at " << cmp.first_bad;
}

TEST(CudaFusedOps, QkNormRopeInPlaceBitExact) {
  H3RT_REQUIRE_GPU();
  run_qk_norm_rope({true, true});
}

TEST(CudaFusedOps, QkNormRopeEverySlotCountBitExact) {
  H3RT_REQUIRE_GPU();
  for (int slots : {2, 4, 7}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    run_qk_norm_rope({true, true, slots});
  }
}

TEST(CudaFusedOps, QkNormOnlyAndRopeOnlyBitExact) {
  H3RT_REQUIRE_GPU();
  run_qk_norm_rope({true, false});
  run_qk_norm_rope({false, true});
}

// The ring kernel (qk_norm_rope.h) against the CPU reference: both stage selections, ragged
// row counts (fewer rows than resident CTAs, rows not a multiple of the grid), head counts that
// leave slots empty, and k before q in the row.
TEST(CudaFusedOps, QkNormRopeRingBitExact) {
  H3RT_REQUIRE_GPU();
  run_qk_norm_rope({true, true, 0, true});
  run_qk_norm_rope({true, false, 0, true, 397});
  run_qk_norm_rope({false, true, 0, true, 397});
  run_qk_norm_rope({true, true, 0, true, 1});
  run_qk_norm_rope({true, true, 0, true, 5, 20});
  run_qk_norm_rope({true, true, 0, true, 263, 3, true});
}

struct RmsCase {
  int64_t rows, dim;
  bool modulate = true, weight = true;
  int64_t x_pad = 0;      // extra elements per x row (row stride dim + x_pad)
  bool segments = false;  // table rows in long runs (as text/audio/video) instead of per row
};

// rmsnorm_modulate bit-exact with the CPU reference on fresh data (output poisoned first).
void run_rms(const RmsCase& rc) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", rows " + std::to_string(rc.rows) + ", dim " +
               std::to_string(rc.dim));
  std::mt19937_64 g(seed);
  const int64_t rows = rc.rows, dim = rc.dim, xs = dim + rc.x_pad;
  Bf16Data x = test::random_rows_bf16(rows, xs, g);
  Bf16Data w = test::random_bf16(dim, g, 1.0f, 0.2f);
  Bf16Data table = test::random_bf16(9 * 2 * dim, g, 0.0f, 0.7f);  // 9 rows of [shift | scale]
  std::vector<int64_t> idx(rows);
  std::uniform_int_distribution<int64_t> ti(0, 8);
  for (auto& v : idx) v = ti(g);
  if (rc.segments) {  // three runs with random table rows and random boundaries
    std::uniform_int_distribution<int64_t> cut(0, rows);
    int64_t a = cut(g), b = cut(g);
    if (a > b) std::swap(a, b);
    const int64_t t0 = ti(g), t1 = ti(g), t2 = ti(g);
    for (int64_t r = 0; r < rows; ++r) idx[r] = r < a ? t0 : r < b ? t1 : t2;
  }

  std::vector<float> want(rows * dim);
  ops::RmsNormModulateParams c;
  c.x = x.f.data();
  c.y = want.data();
  c.weight = rc.weight ? w.f.data() : nullptr;
  c.shift = rc.modulate ? table.f.data() : nullptr;
  c.scale = rc.modulate ? table.f.data() + dim : nullptr;
  c.row_table_index = idx.data();
  c.rows = rows;
  c.dim = dim;
  c.x_row_stride = xs;
  c.table_row_stride = 2 * dim;
  c.bf16 = true;
  ops::rmsnorm_modulate_cpu(c);

  Tensor dx = test::upload(x.bits, DType::bf16, {rows, xs});
  Tensor dw = test::upload(w.bits, DType::bf16, {dim});
  Tensor dt = test::upload(table.bits, DType::bf16, {9, 2 * dim});
  Tensor di = test::upload(idx, DType::i64, {rows});
  Tensor dy = test::device_buffer(DType::bf16, {rows, dim});
  ops::RmsNormModulateCudaParams p;
  p.x = dptr<__nv_bfloat16>(dx);
  p.y = dptr<__nv_bfloat16>(dy);
  p.weight = rc.weight ? bf(dw) : nullptr;
  p.shift = rc.modulate ? bf(dt) : nullptr;
  p.scale = rc.modulate ? bf(dt, dim) : nullptr;
  p.row_table_index = dptr<int64_t>(di);
  p.rows = rows;
  p.dim = dim;
  p.x_row_stride = xs;
  p.table_row_stride = 2 * dim;
  ASSERT_EQ(ops::rmsnorm_modulate_cuda(p, nullptr), cudaSuccess);
  const auto got = test::download<uint16_t>(dy);
  auto cmp = test::compare_bf16(got, want.data(), want.size());
  EXPECT_EQ(cmp.mismatches, 0) << "max " << cmp.max_ulp << " ulp, first at " << cmp.first_bad;
  EXPECT_EQ(test::download<uint16_t>(dx), x.bits) << "x must only be read";
}

TEST(CudaFusedOps, RmsNormModulateShapesBitExact) {
  H3RT_REQUIRE_GPU();
  run_rms({3001, kH});                   // release width, 3 vectors per thread
  run_rms({1, kH});                      // fewer rows than resident CTAs
  run_rms({517, kH, false, false});      // plain RMSNorm without weight
  run_rms({263, kH, true, true, 24});    // strided x rows
  run_rms({77, 192});                    // one warp, partly idle lanes
  run_rms({129, 8192});                  // 4 vectors per thread, 256 threads
  run_rms({64, 4096 + 8, true, false});  // ragged width, no weight
  for (int k = 0; k < 3; ++k) {          // table rows in segments (as text/audio/video rows)
    RmsCase rc{5000, kH};
    rc.segments = true;
    run_rms(rc);
  }
}

void run_swiglu(bool exact, bool table = false, int64_t rows = 1500, int64_t ffn = kF) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " rows " + std::to_string(rows) + " ffn " +
               std::to_string(ffn) + (table ? " (table)" : ""));
  std::mt19937_64 g(seed);
  Bf16Data h = test::random_bf16(rows * 2 * ffn, g, 0.0f, 3.0f);
  std::vector<float> want(rows * ffn);
  ops::SwigluParams c;
  c.in = h.f.data();
  c.out = want.data();
  c.rows = rows;
  c.ffn = ffn;
  c.bf16 = true;
  ops::swiglu_cpu(c);
  Tensor dh = test::upload(h.bits, DType::bf16, {rows, 2 * ffn});
  Tensor dout = test::device_buffer(DType::bf16, {rows, ffn});
  ops::SwigluCudaParams p;
  p.in = bf(dh);
  p.out = dptr<__nv_bfloat16>(dout);
  p.rows = rows;
  p.ffn = ffn;
  p.exact_exp = exact;
  Tensor dtable;
  if (table) {
    dtable = test::silu_table_on_gpu();
    p.silu_table = dptr<__nv_bfloat16>(dtable);
  }
  ASSERT_EQ(ops::swiglu_cuda(p, nullptr), cudaSuccess);
  auto cmp = test::compare_bf16(test::download<uint16_t>(dout), want.data(), want.size());
  if (exact || table) {
    EXPECT_EQ(cmp.mismatches, 0) << "max " << cmp.max_ulp << " ulp, first at " << cmp.first_bad;
  } else {
    EXPECT_LE(cmp.max_ulp, 1);
    EXPECT_LE(cmp.mismatches, static_cast<int64_t>(want.size() / 1000))
        << "fast exp: " << cmp.mismatches << " of " << want.size() << " differ";
    std::printf("swiglu fast exp: %lld of %zu elements one bf16 ulp from the reference\n",
                static_cast<long long>(cmp.mismatches), want.size());
  }
}

TEST(CudaFusedOps, SwigluExactExpBitExact) {
  H3RT_REQUIRE_GPU();
  run_swiglu(true);
}

TEST(CudaFusedOps, SwigluFastExpWithinOneUlp) {
  H3RT_REQUIRE_GPU();
  run_swiglu(false);
}

// Every one of the 65,536 table entries against the CPU reference's silu rounded to bf16.
TEST(CudaFusedOps, SwigluSiluTableExhaustive) {
  H3RT_REQUIRE_GPU();
  const std::vector<uint16_t> got = test::download<uint16_t>(test::silu_table_on_gpu());
  int64_t bad = 0, first = -1;
  for (uint32_t i = 0; i < ops::kSiluTableEntries; ++i) {
    const float gate = bf16_to_f32(static_cast<uint16_t>(i));
    const uint16_t want = f32_to_bf16(ops::silu(gate));
    // silu(NaN) and silu(-inf) (= -inf / inf) are NaN: any NaN pattern will do.
    const bool both_nan = std::isnan(bf16_to_f32(want)) && std::isnan(bf16_to_f32(got[i]));
    if (got[i] != want && !both_nan) bad += 1, first = first < 0 ? i : first;
  }
  EXPECT_EQ(bad, 0) << "first differing gate bits 0x" << std::hex << first;
}

// The table kernel on all 65,536 gates (value 1: out = round(silu(g))) against swiglu_cpu, with
// the whole table and with the compact one (its lookup and rules, as sm_120 / sm_121 run them);
// any NaN for a NaN.
void run_every_gate(bool compact) {
  SCOPED_TRACE(compact ? "compact table" : "whole table");
  const int64_t rows = 16, ffn = 4096;
  std::vector<uint16_t> in(rows * 2 * ffn, 0x3f80);  // values 1.0
  std::vector<float> fin(in.size(), 1.0f), want(rows * ffn);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < ffn; ++j) {
      in[r * 2 * ffn + j] = static_cast<uint16_t>(r * ffn + j);
      fin[r * 2 * ffn + j] = bf16_to_f32(in[r * 2 * ffn + j]);
    }
  ops::swiglu_cpu({.in = fin.data(), .out = want.data(), .rows = rows, .ffn = ffn, .bf16 = true});
  Tensor dh = test::upload(in, DType::bf16, {rows, 2 * ffn});
  Tensor dout = test::device_buffer(DType::bf16, {rows, ffn});
  Tensor table = test::silu_table_on_gpu();
  ops::SwigluCudaParams p;
  p.in = bf(dh);
  p.out = dptr<__nv_bfloat16>(dout);
  p.rows = rows;
  p.ffn = ffn;
  p.silu_table = dptr<__nv_bfloat16>(table);
  std::optional<test::ForcedCompactSiluTable> forced;
  if (compact) forced.emplace();
  ASSERT_EQ(ops::swiglu_cuda(p, nullptr), cudaSuccess);
  const std::vector<uint16_t> got = test::download<uint16_t>(dout);
  int64_t bad = 0;
  for (int64_t i = 0; i < rows * ffn; ++i) {
    const bool both_nan = std::isnan(want[i]) && std::isnan(bf16_to_f32(got[i]));
    if (got[i] != f32_to_bf16(want[i]) && !both_nan && bad++ < 5)
      ADD_FAILURE() << "gate bits 0x" << std::hex << i;
  }
  EXPECT_EQ(bad, 0);
}

TEST(CudaFusedOps, SwigluTablePathEveryGate) {
  H3RT_REQUIRE_GPU();
  run_every_gate(false);
  run_every_gate(true);
}

// The table kernel (persistent, grid-strided vectors): the seed width and awkward shapes (one
// vector per row, one row, a ragged last stride).
TEST(CudaFusedOps, SwigluTablePathBitExact) {
  H3RT_REQUIRE_GPU();
  run_swiglu(true, true);
  run_swiglu(false, true, 777, 24);
  run_swiglu(true, true, 1, 8);
  run_swiglu(true, true, 3001, 1000);
}

}  // namespace
}  // namespace h3rt
