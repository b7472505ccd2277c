// Each CPU op against a naive double-precision computation on fresh random data.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "h3rt/formats.h"
#include "ops/attention/attention.h"
#include "ops/gated_residual/gated_residual.h"
#include "ops/linear/linear.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"
#include "ops/rope_table/rope_table.h"
#include "ops/swiglu/silu_table.h"
#include "ops/swiglu/swiglu.h"
#include "ops/time_embedding/time_embedding.h"

namespace h3rt {
namespace {

std::vector<float> rand_vec(size_t n, std::mt19937& g, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

// Relative error bound for float32 results computed from float inputs: a few ulps of the
// largest magnitude involved.
void expect_close(const std::vector<double>& ref, const float* got, int64_t n, double tol) {
  double mx = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, std::abs(ref[i]));
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], tol * std::max(mx, 1e-30)) << i;
}

double rms_inv(const float* x, int64_t d, double eps) {
  double ss = 0;
  for (int64_t j = 0; j < d; ++j) ss += double(x[j]) * x[j];
  return 1.0 / std::sqrt(ss / d + eps);
}

TEST(Ops, LinearStridedWithBiasAndBf16) {
  std::mt19937 g(1);
  const int64_t rows = 7, in = 33, out = 19, xs = 40, ys = 25;
  auto x = rand_vec(rows * xs, g), w = rand_vec(out * in, g), b = rand_vec(out, g);
  std::vector<float> y(rows * ys, -7.f), yb(rows * ys, -7.f);
  ops::LinearParams p{.x = x.data(),
                      .w = w.data(),
                      .bias = b.data(),
                      .y = y.data(),
                      .rows = rows,
                      .in = in,
                      .out = out,
                      .x_row_stride = xs,
                      .y_row_stride = ys};
  ops::linear_cpu(p);
  p.y = yb.data();
  p.round_bf16 = true;
  ops::linear_cpu(p);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < in; ++i) acc += double(x[r * xs + i]) * w[o * in + i];
      EXPECT_NEAR(y[r * ys + o], acc, 1e-6 * std::abs(acc) + 1e-7);
      EXPECT_EQ(yb[r * ys + o], round_bf16(static_cast<float>(acc)));
    }
    for (int64_t o = out; o < ys; ++o) EXPECT_EQ(y[r * ys + o], -7.f) << "wrote past the row";
  }
}

// The contract, bit for bit: each output is the in-order double sum of its products, plus the
// bias, rounded once to float. Shapes cover partial output groups and the threaded path.
TEST(Ops, LinearIsTheInOrderDoubleSum) {
  std::mt19937 g(2);
  struct Shape {
    int64_t rows, in, out, ys;
    bool bias;
  };
  for (const Shape& sh :
       {Shape{1, 5, 1, 1, true}, Shape{3, 17, 7, 9, false}, Shape{2, 64, 8, 8, true},
        Shape{4, 129, 23, 30, true}, Shape{2, 2048, 1030, 1030, true}}) {
    SCOPED_TRACE(testing::Message() << sh.rows << " x " << sh.in << " -> " << sh.out);
    auto x = rand_vec(sh.rows * sh.in, g), w = rand_vec(sh.out * sh.in, g, -2.f, 2.f);
    auto b = rand_vec(sh.out, g);
    std::vector<float> y(sh.rows * sh.ys, -7.f);
    ops::linear_cpu({.x = x.data(),
                     .w = w.data(),
                     .bias = sh.bias ? b.data() : nullptr,
                     .y = y.data(),
                     .rows = sh.rows,
                     .in = sh.in,
                     .out = sh.out,
                     .y_row_stride = sh.ys});
    int64_t diffs = 0;
    for (int64_t r = 0; r < sh.rows; ++r) {
      for (int64_t o = 0; o < sh.out; ++o) {
        double acc = 0.0;
        for (int64_t i = 0; i < sh.in; ++i) acc += double(x[r * sh.in + i]) * w[o * sh.in + i];
        if (sh.bias) acc += b[o];
        diffs += y[r * sh.ys + o] != static_cast<float>(acc);
      }
      for (int64_t o = sh.out; o < sh.ys; ++o) EXPECT_EQ(y[r * sh.ys + o], -7.f);
    }
    EXPECT_EQ(diffs, 0);
  }
  // In order, 2^60 + w1 loses w1 (< half an ulp of 2^60) and the sum ends at 0; any other order
  // keeps w1.
  const float big = std::ldexp(1.0f, 30);
  std::vector<float> x = {big, 1.0f, -big}, w(9 * 3), y(9, -7.f);
  for (int64_t o = 0; o < 9; ++o) w[o * 3] = big, w[o * 3 + 1] = float(o + 1), w[o * 3 + 2] = big;
  ops::linear_cpu({.x = x.data(), .w = w.data(), .y = y.data(), .rows = 1, .in = 3, .out = 9});
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Ops, RmsNormModulateTableRows) {
  std::mt19937 g(2);
  const int64_t rows = 9, dim = 48, trs = 6 * dim;
  auto x = rand_vec(rows * dim, g, -3, 3), w = rand_vec(dim, g, 0.5, 1.5);
  auto table = rand_vec(4 * trs, g);
  const float* shift = table.data() + 2 * dim;  // chunks at different offsets of one table row
  const float* scale = table.data() + 4 * dim;
  std::vector<int64_t> idx(rows);
  for (int64_t r = 0; r < rows; ++r) idx[r] = (r * 3) % 4;
  std::vector<float> y(rows * dim), n(rows * dim), plain(rows * dim);
  ops::rmsnorm_modulate_cpu({.x = x.data(),
                             .y = y.data(),
                             .norm_out = n.data(),
                             .weight = w.data(),
                             .shift = shift,
                             .scale = scale,
                             .row_table_index = idx.data(),
                             .rows = rows,
                             .dim = dim,
                             .table_row_stride = trs,
                             .eps = 1e-5f});
  ops::rmsnorm_modulate_cpu({.x = x.data(),
                             .y = plain.data(),
                             .weight = w.data(),
                             .rows = rows,
                             .dim = dim,
                             .eps = 1e-5f});
  std::vector<double> ry(rows * dim), rn(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    const double inv = rms_inv(&x[r * dim], dim, 1e-5);
    for (int64_t j = 0; j < dim; ++j) {
      rn[r * dim + j] = x[r * dim + j] * inv * w[j];
      ry[r * dim + j] = rn[r * dim + j] * (1.0 + scale[idx[r] * trs + j]) + shift[idx[r] * trs + j];
    }
  }
  expect_close(ry, y.data(), rows * dim, 2e-7);
  expect_close(rn, n.data(), rows * dim, 2e-7);
  expect_close(rn, plain.data(), rows * dim, 2e-7);
}

TEST(Ops, RmsNormBf16SingleRounding) {
  std::mt19937 g(3);
  const int64_t dim = 64;
  auto x = rand_vec(dim, g, -2, 2), w = rand_vec(dim, g, 0.5, 1.5);
  for (float& v : x) v = round_bf16(v);
  for (float& v : w) v = round_bf16(v);
  std::vector<float> y(dim);
  ops::rmsnorm_modulate_cpu(
      {.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 1, .dim = dim, .bf16 = true});
  const double inv = rms_inv(x.data(), dim, 1e-5);
  for (int64_t j = 0; j < dim; ++j) {
    EXPECT_EQ(y[j], round_bf16(y[j]));
    EXPECT_NEAR(y[j], x[j] * inv * w[j], std::abs(x[j] * inv * w[j]) * 0.004 + 1e-30);
  }
}

// RoPE applied in place on the q and k column blocks of a strided [S, 3I(+pad)] buffer; the v
// block and the padding stay untouched.
TEST(Ops, QkNormRopeInPlaceStrided) {
  std::mt19937 g(4);
  const int64_t rows = 5, heads = 3, hd = 128, R = 96, I = heads * hd, stride = 3 * I + 8;
  auto qkv = rand_vec(rows * stride, g, -2, 2);
  const auto orig = qkv;
  auto qw = rand_vec(hd, g, 0.5, 1.5), kw = rand_vec(hd, g, 0.5, 1.5);
  auto ang = rand_vec(rows * R / 2, g, -20, 20);
  std::vector<float> cs(rows * R), sn(rows * R);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < R / 2; ++j) {
      cs[r * R + j] = cs[r * R + j + R / 2] = std::cos(ang[r * R / 2 + j]);
      sn[r * R + j] = sn[r * R + j + R / 2] = std::sin(ang[r * R / 2 + j]);
    }
  ops::qk_norm_rope_cpu({.qkv = qkv.data(),
                         .row_stride = stride,
                         .q_offset = 0,
                         .k_offset = I,
                         .rows = rows,
                         .heads = heads,
                         .head_dim = hd,
                         .rope_dim = R,
                         .q_weight = qw.data(),
                         .k_weight = kw.data(),
                         .cos = cs.data(),
                         .sin = sn.data()});
  for (int64_t r = 0; r < rows; ++r) {
    for (int which = 0; which < 2; ++which) {
      const float* w = which ? kw.data() : qw.data();
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = r * stride + which * I + h * hd;
        const double inv = rms_inv(&orig[base], hd, 1e-5);
        std::vector<double> n(hd);
        for (int64_t c = 0; c < hd; ++c) n[c] = orig[base + c] * inv * w[c];
        for (int64_t c = 0; c < hd; ++c) {
          double ref = n[c];
          if (c < R / 2)
            ref = n[c] * cs[r * R + c] - n[c + R / 2] * sn[r * R + c];
          else if (c < R)
            ref = n[c] * cs[r * R + c] + n[c - R / 2] * sn[r * R + c];
          EXPECT_NEAR(qkv[base + c], ref, 2e-6) << r << " " << which << " " << h << " " << c;
        }
      }
    }
    for (int64_t c = 2 * I; c < stride; ++c) EXPECT_EQ(qkv[r * stride + c], orig[r * stride + c]);
  }
}

TEST(Ops, RopeTableFloat32Angles) {
  const auto inv = ops::rope_inv_freq(16);
  for (int i = 0; i < 16; ++i)
    EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 32.0),
                1e-7 * std::pow(10000.0, -2.0 * i / 32));
  std::vector<double> pos = {0, 0, 0, 11.666666666666666, 2.936, -3.59, 400.25, 22.5, 29.06};
  std::vector<float> c(3 * 96), s(3 * 96);
  ops::rope_table_cpu({pos.data(), inv.data(), c.data(), s.data(), 3, 16});
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 96; ++j) {
      const int axis = (j % 48) / 16, i = j % 16;
      // The angle is the float32 product of the float32 position and inv_freq, exactly.
      const float a = static_cast<float>(pos[r * 3 + axis]) * inv[i];
      EXPECT_NEAR(c[r * 96 + j], std::cos(double(a)), 1.2e-7);
      EXPECT_NEAR(s[r * 96 + j], std::sin(double(a)), 1.2e-7);
    }
}

TEST(Ops, AttentionStridedHeads) {
  std::mt19937 g(5);
  const int64_t rows = 11, heads = 2, hd = 16, I = heads * hd, qs = 3 * I, os = I + 4;
  auto qkv = rand_vec(rows * qs, g, -2, 2);
  std::vector<float> out(rows * os, -5.f);
  ops::attention_cpu({.q = qkv.data(),
                      .k = qkv.data() + I,
                      .v = qkv.data() + 2 * I,
                      .q_row_stride = qs,
                      .k_row_stride = qs,
                      .v_row_stride = qs,
                      .out = out.data(),
                      .out_row_stride = os,
                      .rows = rows,
                      .heads = heads,
                      .head_dim = hd});
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < rows; ++i) {
      std::vector<double> p(rows);
      double sum = 0;
      for (int64_t j = 0; j < rows; ++j) {
        double d = 0;
        for (int64_t c = 0; c < hd; ++c)
          d += double(qkv[i * qs + h * hd + c]) * qkv[j * qs + I + h * hd + c];
        sum += p[j] = std::exp(d / std::sqrt(double(hd)));
      }
      for (int64_t c = 0; c < hd; ++c) {
        double o = 0;
        for (int64_t j = 0; j < rows; ++j) o += p[j] / sum * qkv[j * qs + 2 * I + h * hd + c];
        EXPECT_NEAR(out[i * os + h * hd + c], o, 1e-6);
      }
      for (int64_t c = I; c < os; ++c) EXPECT_EQ(out[i * os + c], -5.f);
    }
}

// The reference's operation order, bit for bit (one key at a time, then the max, the exp sum and
// the value sum in key order), on shapes with partial key groups and on one large enough to be
// split over threads.
TEST(Ops, AttentionKeepsItsOperationOrder) {
  std::mt19937 g(7);
  struct Shape {
    int64_t rows, heads, hd;
  };
  for (const Shape& sh : {Shape{1, 1, 8}, Shape{7, 3, 16}, Shape{300, 4, 64}}) {
    SCOPED_TRACE(testing::Message() << sh.rows << " rows, " << sh.heads << " heads");
    const int64_t I = sh.heads * sh.hd;
    auto q = rand_vec(sh.rows * I, g, -2, 2), k = rand_vec(sh.rows * I, g, -2, 2);
    auto v = rand_vec(sh.rows * I, g);
    std::vector<float> out(sh.rows * I);
    ops::attention_cpu({.q = q.data(),
                        .k = k.data(),
                        .v = v.data(),
                        .out = out.data(),
                        .rows = sh.rows,
                        .heads = sh.heads,
                        .head_dim = sh.hd});
    const double scale = 1.0 / std::sqrt(static_cast<double>(sh.hd));
    int64_t diffs = 0;
    std::vector<double> score(sh.rows), acc(sh.hd);
    for (int64_t h = 0; h < sh.heads; ++h)
      for (int64_t i = 0; i < sh.rows; ++i) {
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < sh.rows; ++j) {
          double d = 0.0;
          for (int64_t c = 0; c < sh.hd; ++c)
            d += static_cast<double>(q[i * I + h * sh.hd + c]) * k[j * I + h * sh.hd + c];
          mx = std::max(mx, score[j] = d * scale);
        }
        for (int64_t j = 0; j < sh.rows; ++j) sum += (score[j] = std::exp(score[j] - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < sh.rows; ++j)
          for (int64_t c = 0; c < sh.hd; ++c) acc[c] += score[j] * v[j * I + h * sh.hd + c];
        for (int64_t c = 0; c < sh.hd; ++c)
          diffs += out[i * I + h * sh.hd + c] != static_cast<float>(acc[c] / sum);
      }
    EXPECT_EQ(diffs, 0);
  }
  // In channel order every score is 2^60 + (j + 1) - 2^60 = 0 (the middle term is lost), so the
  // attention is uniform; any other order would give scores j + 1.
  const float big = std::ldexp(1.0f, 30);
  const int64_t rows = 5;
  std::vector<float> q, k, v, out(rows * 3);
  double mean = 0.0;
  for (int64_t j = 0; j < rows; ++j) {
    q.insert(q.end(), {big, 1.0f, -big});
    k.insert(k.end(), {big, float(j + 1), big});
    v.insert(v.end(), {float(j) - 1.5f, 0.0f, 0.0f});
    mean += float(j) - 1.5f;
  }
  ops::attention_cpu({.q = q.data(),
                      .k = k.data(),
                      .v = v.data(),
                      .out = out.data(),
                      .rows = rows,
                      .heads = 1,
                      .head_dim = 3});
  for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(out[i * 3], static_cast<float>(mean / rows)) << i;
}

TEST(Ops, SwigluGateFirst) {
  std::mt19937 g(6);
  const int64_t rows = 4, F = 10;
  auto in = rand_vec(rows * 2 * F, g, -4, 4);
  std::vector<float> out(rows * F), outb(rows * F);
  ops::swiglu_cpu({in.data(), out.data(), rows, F});
  ops::swiglu_cpu({.in = in.data(), .out = outb.data(), .rows = rows, .ffn = F, .bf16 = true});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < F; ++j) {
      const double gt = in[r * 2 * F + j], v = in[r * 2 * F + F + j];
      const double ref = gt / (1 + std::exp(-gt)) * v;
      EXPECT_NEAR(out[r * F + j], ref, 1e-6 * std::abs(ref) + 1e-7);
      EXPECT_EQ(outb[r * F + j], round_bf16(outb[r * F + j]));
      EXPECT_NEAR(outb[r * F + j], ref, 0.01 * std::abs(ref) + 1e-6);
    }
}

// The compact silu table (silu_table.h) filled from swiglu_cpu's silu: its lookup and rules give
// round_bf16(silu(g)) for every one of the 65,536 bf16 gates (any NaN for a NaN).
TEST(Ops, SiluCompactTableCoversEveryGate) {
  std::vector<uint16_t> compact(ops::kSiluCompactEntries);
  for (uint32_t i = 0; i < compact.size(); ++i) {
    const uint32_t gate = ops::silu_compact_gate(i);
    EXPECT_TRUE(ops::silu_compact_kept(gate));
    EXPECT_EQ(ops::silu_compact_index(gate), i);
    compact[i] = f32_to_bf16(ops::silu(bf16_to_f32(static_cast<uint16_t>(gate))));
  }
  int64_t bad = 0, ruled = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t want = f32_to_bf16(ops::silu(bf16_to_f32(static_cast<uint16_t>(b))));
    const uint16_t got = f32_to_bf16(ops::silu_compact_lookup(compact.data(), b));
    const bool both_nan = std::isnan(bf16_to_f32(want)) && std::isnan(bf16_to_f32(got));
    ruled += !ops::silu_compact_kept(b);
    if (got != want && !both_nan && bad++ < 5) ADD_FAILURE() << "gate bits 0x" << std::hex << b;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(ruled, 65536 - int64_t{ops::kSiluCompactEntries});
}

TEST(Ops, GatedResidual) {
  std::mt19937 g(7);
  const int64_t rows = 6, dim = 8, trs = 3 * dim;
  auto x = rand_vec(rows * dim, g), y = rand_vec(rows * dim, g), table = rand_vec(3 * trs, g);
  const auto x0 = x;
  std::vector<int64_t> idx = {2, 0, 1, 1, 0, 2};
  ops::gated_residual_cpu({.x = x.data(),
                           .y = y.data(),
                           .gate = table.data() + dim,
                           .row_table_index = idx.data(),
                           .rows = rows,
                           .dim = dim,
                           .table_row_stride = trs});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j)
      EXPECT_NEAR(x[r * dim + j],
                  x0[r * dim + j] + double(table[idx[r] * trs + dim + j]) * y[r * dim + j], 3e-7);
}

TEST(Ops, TimeEmbeddingCosFirst) {
  std::mt19937 g(8);
  const int64_t M = 2, D = 256, Hd = 12, E = 5;
  std::vector<float> t = {0.3f, 0.631579f};
  auto w1 = rand_vec(Hd * D, g), b1 = rand_vec(Hd, g), w2 = rand_vec(E * Hd, g),
       b2 = rand_vec(E, g);
  std::vector<float> sinus(M * D), temb(M * E);
  ops::time_embedding_cpu({t.data(), w1.data(), b1.data(), w2.data(), b2.data(), sinus.data(),
                           temb.data(), M, D, Hd, E});
  for (int64_t m = 0; m < M; ++m) {
    std::vector<double> emb(D);
    for (int64_t i = 0; i < D / 2; ++i) {
      const double arg = t[m] * std::exp(-std::log(10000.0) * i / (D / 2));
      emb[i] = std::cos(arg);
      emb[D / 2 + i] = std::sin(arg);
      EXPECT_NEAR(sinus[m * D + i], emb[i], 3e-7);
      EXPECT_NEAR(sinus[m * D + D / 2 + i], emb[D / 2 + i], 3e-7);
    }
    std::vector<double> h(Hd);
    for (int64_t o = 0; o < Hd; ++o) {
      double a = b1[o];
      for (int64_t i = 0; i < D; ++i) a += w1[o * D + i] * emb[i];
      h[o] = a / (1 + std::exp(-a));
    }
    for (int64_t o = 0; o < E; ++o) {
      double a = b2[o];
      for (int64_t i = 0; i < Hd; ++i) a += w2[o * Hd + i] * h[i];
      EXPECT_NEAR(temb[m * E + o], a, 1e-5);
    }
  }
}

}  // namespace
}  // namespace h3rt
