// The online check of the sparse attention (h3rt/hybrid.h SparseCheck, `--sparse-check K`): its
// policy (check steps, the statistic's edge cases, the seeded tile sample, option errors), the
// router's dense heads, the statistic against a direct computation, and the CPU sampling loop
// (K = 0 and a bound no head reaches change no bit; bound 0 turns every head dense and the run
// then equals the dense run's forward bit for bit; the records are deterministic).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dense_twin.h"
#include "h3rt/hybrid.h"
#include "h3rt/pipeline.h"
#include "h3rt/quality.h"
#include "model/forward_internal.h"
#include "ops/attention/attention.h"
#include "ops/attention_sparse/router.h"
#include "pipeline/resume.h"
#include "sparse_test_util.h"
#include "test_util.h"

namespace h3rt {
namespace {

TEST(SparseCheckPolicy, FirstSparseStepThenEveryKth) {
  HybridOptions h;
  h.sparse.tau = 1.0f;
  h.dense_steps = 3;
  for (int i = 0; i < 12; ++i) EXPECT_FALSE(sparse_check_step(h, i)) << "K = 0 is off, " << i;
  h.check.every = 4;
  std::string s;
  for (int i = 0; i < 12; ++i) s += sparse_check_step(h, i) ? 'C' : '-';
  EXPECT_EQ(s, "---C---C---C");
  h.sparse.tau = 0;  // no sparse step: nothing to check
  for (int i = 0; i < 12; ++i) EXPECT_FALSE(sparse_check_step(h, i)) << i;
}

TEST(SparseCheckPolicy, RelativeL1AndTheBound) {
  EXPECT_DOUBLE_EQ(sparse_check_rel_l1(1.0, 4.0), 0.25);
  EXPECT_EQ(sparse_check_rel_l1(0.0, 0.0), 0.0);
  EXPECT_EQ(sparse_check_rel_l1(1.0, 0.0), INFINITY);
  EXPECT_TRUE(sparse_check_keeps(0.049, 0.05));
  EXPECT_FALSE(sparse_check_keeps(0.05, 0.05)) << "at the bound: dense";
  EXPECT_FALSE(sparse_check_keeps(0.0, 0.0)) << "bound 0: every checked head dense";
  EXPECT_FALSE(sparse_check_keeps(NAN, 0.05));
  EXPECT_EQ(SparseCheckOptions{}.bound, 0.05);
  EXPECT_FALSE(SparseCheckOptions{}.enabled());
}

TEST(SparseCheckPolicy, TilesAreSeededDistinctAscendingInRange) {
  const std::vector<int64_t> a = sparse_check_tiles(7, 12, 3, 5, 40, 4);
  EXPECT_EQ(a, sparse_check_tiles(7, 12, 3, 5, 40, 4)) << "a pure function";
  ASSERT_EQ(a.size(), 4u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::adjacent_find(a.begin(), a.end()), a.end()) << "distinct";
  for (int64_t t : a) EXPECT_TRUE(t >= 5 && t < 40) << t;
  // Seed, step and block each move the sample (over a few draws: equal by chance is rare).
  int seed_moves = 0, step_moves = 0, block_moves = 0;
  for (int k = 0; k < 8; ++k) {
    const std::vector<int64_t> base = sparse_check_tiles(k, 10, 2, 0, 1000, 4);
    seed_moves += base != sparse_check_tiles(k + 100, 10, 2, 0, 1000, 4);
    step_moves += base != sparse_check_tiles(k, 11, 2, 0, 1000, 4);
    block_moves += base != sparse_check_tiles(k, 10, 3, 0, 1000, 4);
  }
  EXPECT_EQ(seed_moves, 8);
  EXPECT_EQ(step_moves, 8);
  EXPECT_EQ(block_moves, 8);
  EXPECT_EQ(sparse_check_tiles(1, 0, 0, 2, 5, 4), (std::vector<int64_t>{2, 3, 4})) << "all 3";
  EXPECT_TRUE(sparse_check_tiles(1, 0, 0, 5, 5, 4).empty()) << "no routed tile";
  // Every tile of the range is drawn about equally often.
  std::vector<int> hits(10, 0);
  for (int s = 0; s < 2000; ++s)
    for (int64_t t : sparse_check_tiles(3, s, 1, 0, 10, 2)) ++hits[t];
  for (int t = 0; t < 10; ++t) EXPECT_NEAR(hits[t], 400, 80) << t;
}

TEST(SparseCheckPolicy, OptionErrorsNameTheOption) {
  const auto msg = [](const HybridSettings& s, const HybridNames& n) {
    return test::error_of([&] { hybrid_policy(s, n); });
  };
  HybridSettings s;
  s.sparse_attention = 1.0;
  s.sparse_check = -1;
  EXPECT_NE(msg(s, kHybridFlagNames).find("--sparse-check must be in [0, 1000] (0: off), got -1"),
            std::string::npos)
      << msg(s, kHybridFlagNames);
  s.sparse_check = 1001;
  EXPECT_NE(msg(s, kHybridFieldNames).find("sparse_check must be in [0, 1000]"), std::string::npos);
  s.sparse_check = 5;
  s.sparse_check_bound = -0.1;
  EXPECT_NE(msg(s, kHybridFlagNames).find("--sparse-check-bound must be in [0, 100], got -0.1"),
            std::string::npos);
  s.sparse_check_bound = NAN;
  EXPECT_NE(msg(s, kHybridFieldNames).find("sparse_check_bound must be in [0, 100]"),
            std::string::npos);
  s = {};
  s.sparse_check = 5;  // without sparse attention
  EXPECT_NE(msg(s, kHybridFlagNames)
                .find("--sparse-check checks the sparse attention: give "
                      "--sparse-attention too"),
            std::string::npos);
  s.sparse_attention = 1.0;
  s.sparse_check_bound = 0.1;
  const HybridPolicy p = hybrid_policy(s);
  EXPECT_EQ(p.hybrid.check.every, 5);
  EXPECT_EQ(p.hybrid.check.bound, 0.1);
  EXPECT_EQ(p.hybrid.check.tiles, 4);
  HybridOptions h = p.hybrid;
  h.check.tiles = 0;
  EXPECT_NE(test::error_of([&] {
              check_hybrid_options(h, {});
            }).find("sparse check tiles must be in [1, 64], got 0"),
            std::string::npos);
  h.check.tiles = 4;
  h.check.bound = INFINITY;
  EXPECT_NE(test::error_of([&] { check_hybrid_options(h, {}); }).find("sparse check bound"),
            std::string::npos);
}

// ---- the router's dense heads and the statistic ----

struct Qkv {
  int64_t seq, heads, stride;
  std::vector<float> v;  // [seq, 3, heads, 128]
  const float* q() const { return v.data(); }
  const float* k() const { return v.data() + heads * 128; }
};
Qkv random_qkv(int64_t seq, int64_t heads, uint32_t seed) {
  Qkv x{seq, heads, 3 * heads * 128, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  x.v.resize(seq * x.stride);
  for (float& f : x.v) f = n01(rng);
  return x;
}

ops::AttentionParams attention_of(const Qkv& x, float* out,
                                  const attention_sparse::BlockList* blocks) {
  return {.q = x.q(),
          .k = x.k(),
          .v = x.v.data() + 2 * x.heads * 128,
          .q_row_stride = x.stride,
          .k_row_stride = x.stride,
          .v_row_stride = x.stride,
          .out = out,
          .rows = x.seq,
          .heads = x.heads,
          .blocks = blocks};
}

TEST(SparseCheckRouter, DenseHeadsTakeEveryBlockOthersUnchanged) {
  const Qkv x = random_qkv(700, 3, 21);
  const attention_sparse::RouterShape shape{x.seq, x.heads, 128, 64, 100};
  const SparseAttention cfg = test::sparse_config(1.0f, 0);
  const attention_sparse::RouterInput in{x.q(), x.k(), x.stride, x.stride};
  const attention_sparse::HostBlockLists plain = attention_sparse::route_cpu(in, shape, cfg);
  const uint8_t dense[3] = {0, 1, 0};
  attention_sparse::RouterInput with = in;
  with.dense_heads = dense;
  const attention_sparse::HostBlockLists l = attention_sparse::route_cpu(with, shape, cfg);
  const int64_t nq = shape.n_qtiles(), nk = shape.n_kblocks();
  int64_t plain_head1 = 0;
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t t = h * nq + i;
      if (h == 1) {
        plain_head1 += plain.count[t];
        ASSERT_EQ(l.count[t], nk);
        for (int64_t j = 0; j < nk; ++j) EXPECT_EQ(l.index[t * nk + j], j);
      } else {
        ASSERT_EQ(l.count[t], plain.count[t]);
        EXPECT_TRUE(std::equal(l.index.begin() + t * nk, l.index.begin() + t * nk + l.count[t],
                               plain.index.begin() + t * nk));
      }
    }
  EXPECT_LT(plain_head1, nq * nk) << "head 1 was sparse without the flag";
  EXPECT_EQ(l.stats.key_blocks_computed, plain.stats.key_blocks_computed - plain_head1 + nq * nk);
  // The attention of the dense head equals the dense attention bit for bit; others as before.
  const int64_t I = x.heads * 128;
  std::vector<float> dense_out(x.seq * I), sparse_out(x.seq * I), plain_out(x.seq * I);
  const attention_sparse::BlockList lv = l.view(), pv = plain.view();
  ops::attention_cpu(attention_of(x, dense_out.data(), nullptr));
  ops::attention_cpu(attention_of(x, sparse_out.data(), &lv));
  ops::attention_cpu(attention_of(x, plain_out.data(), &pv));
  for (int64_t r = 0; r < x.seq; ++r) {
    const int64_t o = r * I;
    EXPECT_EQ(std::memcmp(&sparse_out[o + 128], &dense_out[o + 128], 128 * 4), 0) << r;
    EXPECT_EQ(std::memcmp(&sparse_out[o], &plain_out[o], 128 * 4), 0) << r;
    EXPECT_EQ(std::memcmp(&sparse_out[o + 256], &plain_out[o + 256], 128 * 4), 0) << r;
  }
}

TEST(SparseCheckAttention, OutputRowRangeHasTheWholeCallsBits) {
  const Qkv x = random_qkv(300, 2, 22);
  const int64_t I = x.heads * 128;
  std::vector<float> all(x.seq * I), part(x.seq * I, -7.0f);
  ops::attention_cpu(attention_of(x, all.data(), nullptr));
  ops::AttentionParams p = attention_of(x, part.data(), nullptr);
  p.row_begin = 64;
  p.row_end = 128;
  ops::attention_cpu(p);
  for (int64_t r = 0; r < x.seq; ++r) {
    if (r >= 64 && r < 128)
      EXPECT_EQ(std::memcmp(&part[r * I], &all[r * I], I * 4), 0) << r;
    else
      EXPECT_EQ(part[r * I], -7.0f) << "row " << r << " outside the range was written";
  }
  p.row_end = 301;
  EXPECT_NE(test::error_of([&] { ops::attention_cpu(p); }).find("output rows [64, 301)"),
            std::string::npos);
}

// The statistic against a direct computation: both whole calls, then the sums by hand.
TEST(SparseCheckAttention, StatisticIsTheRelativeL1OfTheSampledRows) {
  const Qkv x = random_qkv(650, 2, 23);
  const int64_t I = x.heads * 128, tile = 64;
  std::mt19937 rng(24);
  const attention_sparse::HostBlockLists l =
      test::random_block_lists({x.seq, x.heads, 128, tile, 0}, rng);
  const attention_sparse::BlockList lv = l.view();
  std::vector<float> sparse(x.seq * I), dense(x.seq * I);
  ops::attention_cpu(attention_of(x, sparse.data(), &lv));
  ops::attention_cpu(attention_of(x, dense.data(), nullptr));
  const std::vector<int64_t> tiles = {1, 4, 10};  // tile 10: rows 640..649 (a short tile)
  double diff[2], ref[2];
  model::sparse_check_sums(attention_of(x, sparse.data(), &lv), tiles, tile, diff, ref);
  for (int64_t h = 0; h < 2; ++h) {
    double d = 0, r = 0;
    for (int64_t t : tiles)
      for (int64_t row = t * tile; row < std::min(x.seq, (t + 1) * tile); ++row)
        for (int64_t c = 0; c < 128; ++c) {
          const int64_t e = row * I + h * 128 + c;
          d += std::fabs(double(sparse[e]) - dense[e]);
          r += std::fabs(double(dense[e]));
        }
    EXPECT_EQ(diff[h], d) << h;  // the same sums in the same order
    EXPECT_EQ(ref[h], r) << h;
    EXPECT_GT(sparse_check_rel_l1(diff[h], ref[h]), 0.05) << "random lists drop 2/3 of the keys";
  }
}

TEST(SparseCheckState, RecordTurnsHeadsAtOrAboveTheBoundDense) {
  SparseCheckOptions o;
  o.every = 1;
  o.bound = 0.1;
  SparseCheck c(o, 5);
  c.shape(3, 4);
  EXPECT_EQ(c.dense(), std::vector<uint8_t>(12, 0));
  c.begin(7, true);
  const double diff[4] = {0.5, 1.0, 2.0, 0.0}, ref[4] = {10, 10, 10, 0};  // 0.05 0.1 0.2 0
  c.record(2, 4, diff, ref);
  const SparseCheckRecord& r = c.last();
  EXPECT_TRUE(r.checked);
  EXPECT_EQ(r.blocks, std::vector<int64_t>{2});
  EXPECT_EQ(r.rel_l1, (std::vector<double>{0.05, 0.1, 0.2, 0.0}));
  EXPECT_EQ(r.turned_dense, (std::vector<int64_t>{2 * 4 + 1, 2 * 4 + 2}));
  EXPECT_EQ(r.dense_heads, 2);
  EXPECT_EQ(c.dense_heads(2)[1], 1);
  EXPECT_EQ(c.dense_heads(2)[0], 0);
  EXPECT_EQ(c.dense_heads(1)[1], 0) << "per block";
  c.begin(8, true);  // a dense head stays dense and is not "turned" again
  const double low[4] = {0, 0, 0, 0};
  c.record(2, 4, low, ref);
  EXPECT_TRUE(c.last().turned_dense.empty());
  EXPECT_EQ(c.last().dense_heads, 2);
  EXPECT_NE(test::error_of([&] { c.shape(3, 5); }).find("3 x 4"), std::string::npos);
  c.begin(9, false);
  EXPECT_FALSE(c.last().checked);
  EXPECT_NE(test::error_of([&] { c.record(2, 4, low, ref); }).find("outside a checking forward"),
            std::string::npos);
}

// ---- the sampling loop on the CPU (tiny preset) ----

void expect_same(const SampleResult& a, const SampleResult& b, const std::string& what) {
  test::expect_same_bits(a.video_latents, b.video_latents, what + " video");
  test::expect_same_bits(a.audio_latents, b.audio_latents, what + " audio");
}

std::string checks(const SampleResult& r) {
  std::string s;
  for (const HybridStep& h : r.hybrid_steps) s += h.check.checked ? 'C' : h.sparse ? 's' : 'd';
  return s;
}

TEST(SparseCheckSample, OffAndUnreachedBoundChangeNoBit) {
  auto d = Denoiser::create(ModelSource{});
  const Request req = test::check_request(d->config(), 256);
  const SampleResult plain = sample(*d, req, test::check_options(0, 0.05));
  EXPECT_EQ(checks(plain), "dsss");
  for (int i = 1; i < 4; ++i) EXPECT_LT(plain.hybrid_steps[i].sparse_fraction, 1.0) << i;
  const SampleResult measured = sample(*d, req, test::check_options(2, 100));
  EXPECT_EQ(checks(measured), "dCsC");
  expect_same(measured, plain, "bound 100");
  const SparseCheckRecord& r = measured.hybrid_steps[1].check;
  EXPECT_EQ(r.tiles, 4);
  EXPECT_EQ(r.heads, d->config().heads);
  EXPECT_EQ(r.blocks, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(r.rel_l1.size(), 4u);
  for (double e : r.rel_l1) EXPECT_TRUE(e > 0 && e < 100) << e;
  EXPECT_TRUE(r.turned_dense.empty());
  EXPECT_EQ(r.dense_heads, 0);
  // Seeded: the same run records the same errors; another seed samples other tiles.
  const SampleResult again = sample(*d, req, test::check_options(2, 100));
  EXPECT_EQ(again.hybrid_steps[1].check.rel_l1, r.rel_l1);
  EXPECT_EQ(again.hybrid_steps[3].check.rel_l1, measured.hybrid_steps[3].check.rel_l1);
  SampleOptions other = test::check_options(2, 100);
  other.noise_seed += 1;
  EXPECT_NE(sample(*d, req, other).hybrid_steps[1].check.rel_l1, r.rel_l1);
}

TEST(SparseCheckSample, BoundZeroTurnsEveryHeadDenseThenTheForwardIsDense) {
  test::DenseTwin d;
  const Request req = test::check_request(d.config(), 256);
  const SampleResult r = sample(d, req, test::check_options(10, 0.0));
  EXPECT_EQ(checks(r), "dCss");
  const SparseCheckRecord& k = r.hybrid_steps[1].check;
  const int64_t pairs = d.config().layers * d.config().heads;
  EXPECT_EQ(k.dense_heads, pairs);
  EXPECT_EQ(static_cast<int64_t>(k.turned_dense.size()), pairs);
  // The check step itself ran sparse; from the next forward on every list is full.
  EXPECT_EQ(d.same, (std::vector<bool>{true, false, true, true}));
  EXPECT_LT(r.hybrid_steps[1].sparse_fraction, 1.0);
  EXPECT_EQ(r.hybrid_steps[2].sparse_fraction, 1.0);
  EXPECT_EQ(r.hybrid_steps[3].sparse_fraction, 1.0);
  // The report's per-step entry.
  SampleOptions o = test::check_options(10, 0.0);
  const nlohmann::json j = hybrid_report(o, r);
  EXPECT_EQ(j["sparse_attention"]["check"]["every"], 10);
  EXPECT_EQ(j["sparse_attention"]["check"]["check_steps"], 1);
  EXPECT_EQ(j["sparse_attention"]["check"]["dense_heads"], pairs);
  EXPECT_TRUE(j["steps"][0]["sparse_check"].is_null());
  const nlohmann::json& c = j["steps"][1]["sparse_check"];
  EXPECT_EQ(c["tiles_per_block"], 4);
  EXPECT_EQ(c["blocks_checked"], 2);
  EXPECT_EQ(c["turned_dense"].size(), static_cast<size_t>(pairs));
  EXPECT_EQ(c["head_rel_l1_max"].size(), static_cast<size_t>(d.config().heads));
  EXPECT_DOUBLE_EQ(c["rel_l1_max"].get<double>(),
                   *std::max_element(k.rel_l1.begin(), k.rel_l1.end()));
}

// A bound between the measured errors: exactly the heads at or above it turn dense.
TEST(SparseCheckSample, HeadsAboveTheBoundTurnDenseOthersStaySparse) {
  auto d = Denoiser::create(ModelSource{});
  const Request req = test::check_request(d->config(), 256);
  const SampleResult probe = sample(*d, req, test::check_options(10, 100));
  std::vector<double> e = probe.hybrid_steps[1].check.rel_l1;
  std::sort(e.begin(), e.end());
  ASSERT_LT(e.front(), e.back());
  const double bound = e[e.size() / 2];  // the upper half turns dense
  const SampleResult r = sample(*d, req, test::check_options(10, bound));
  const SparseCheckRecord& k = r.hybrid_steps[1].check;
  EXPECT_EQ(k.rel_l1, probe.hybrid_steps[1].check.rel_l1) << "the same measurement";
  std::vector<int64_t> want;
  for (size_t i = 0; i < k.rel_l1.size(); ++i)
    if (k.rel_l1[i] >= bound) want.push_back(static_cast<int64_t>(i));  // block * heads + head
  EXPECT_EQ(k.turned_dense, want);
  EXPECT_GT(r.hybrid_steps[2].sparse_fraction, probe.hybrid_steps[2].sparse_fraction);
  EXPECT_LT(r.hybrid_steps[2].sparse_fraction, 1.0);
}

// A resume file names the check (a resumed run must not mix settings); off adds nothing, so
// files written before the check still match runs without it.
TEST(SparseCheckSample, ResumeKeyNamesTheCheckOnlyWhenOn) {
  auto d = Denoiser::create(ModelSource{});
  const Request req = test::check_request(d->config(), 256);
  const auto key = [&](const SampleOptions& o) {
    for (const auto& [k, v] : resume::run_keys(*d, req, o))
      if (k == "sparse_attention") return v;
    return std::string("absent");
  };
  const std::string off = key(test::check_options(0, 0.05));
  EXPECT_EQ(off.find("check"), std::string::npos) << off;
  const std::string on = key(test::check_options(5, 0.25));
  EXPECT_EQ(on, off + ", check every 5 bound 0.25 tiles 4");
}

}  // namespace
}  // namespace h3rt
