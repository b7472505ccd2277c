// CPU checks of block-sparse attention: the router's decisions on inputs with known scores
// (forced prefix and band blocks, tau, max_blocks and its ties, dense prefix tiles), the sparse
// Sage reference and the fp32 model attention against their dense forms with every block listed
// and against each other on random lists, and the tiny model's forward with sparse attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "h3rt/formats.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "ops/attention/attention.h"
#include "ops/attention_sage/attention_sage.h"
#include "ops/attention_sparse/router.h"
#include "sparse_test_util.h"

namespace h3rt::attention_sparse {
namespace {

// q of every row = e0; the keys of block j = c[j] * e0, so score_j = c[j] exactly (D = 4).
struct KnownScores {
  int64_t seq;
  std::vector<float> q, k;
  RouterInput input() const { return {q.data(), k.data(), 4, 4}; }
};
KnownScores known_scores(const std::vector<float>& c) {
  KnownScores x{static_cast<int64_t>(c.size()) * kKeyBlock, {}, {}};
  x.q.assign(x.seq * 4, 0.0f);
  x.k.assign(x.seq * 4, 0.0f);
  for (int64_t r = 0; r < x.seq; ++r) {
    x.q[r * 4] = 1.0f;
    x.k[r * 4] = c[r / kKeyBlock];
  }
  return x;
}

std::vector<int32_t> list_of(const HostBlockLists& l, int64_t h, int64_t tile) {
  const int64_t t = h * l.shape.n_qtiles() + tile, nk = l.shape.n_kblocks();
  return {l.index.begin() + t * nk, l.index.begin() + t * nk + l.count[t]};
}

SparseAttention cfg(float tau, int band, int64_t max_blocks = 0, bool video_rows_only = true) {
  return test::sparse_config(tau, band, max_blocks, video_rows_only);
}

RouterShape shape_of(const KnownScores& x, int64_t q_tile, int64_t prefix = 0) {
  return {x.seq, 1, 4, q_tile, prefix};
}

TEST(SparseRouter, ScoresArePooledDotProducts) {
  const KnownScores x = known_scores({0, 1, -2, 3.5f});
  const std::vector<float> s = pooled_scores_cpu(x.input(), shape_of(x, 128));
  ASSERT_EQ(s.size(), 16u);
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(std::vector<float>(s.begin() + 4 * i, s.begin() + 4 * i + 4),
              (std::vector<float>{0, 1, -2, 3.5f}));
}

TEST(SparseRouter, BandAndHighScoreBlocks) {
  // mean 1.25, sd 3.31: z(10) = 2.64, every other z < 0.
  const KnownScores x = known_scores({0, 0, 0, 0, 0, 0, 0, 10});
  const HostBlockLists l = route_cpu(x.input(), shape_of(x, 128), cfg(1.0f, 1));
  EXPECT_EQ(list_of(l, 0, 0), (std::vector<int32_t>{0, 1, 7}));
  EXPECT_EQ(list_of(l, 0, 3), (std::vector<int32_t>{2, 3, 4, 7}));
  EXPECT_EQ(list_of(l, 0, 7), (std::vector<int32_t>{6, 7}));
  // A 192-row tile overlaps two key blocks: tile 1 = rows 192..383 = blocks 1, 2, +-1 band.
  const HostBlockLists w = route_cpu(x.input(), shape_of(x, 192), cfg(1.0f, 1));
  EXPECT_EQ(list_of(w, 0, 1), (std::vector<int32_t>{0, 1, 2, 3, 7}));
  EXPECT_EQ(w.stats.key_blocks_total, 6 * 8);
}

TEST(SparseRouter, TauIsAZScoreThreshold) {
  // Scores 0..7: mean 3.5, sd sqrt(5.25) = 2.2913; z_j = (j - 3.5) / 2.2913.
  const KnownScores x = known_scores({0, 1, 2, 3, 4, 5, 6, 7});
  const double sd = std::sqrt(5.25);
  for (int j = 4; j < 8; ++j) {
    const float z = static_cast<float>((j - 3.5) / sd);
    SCOPED_TRACE(j);
    std::vector<int32_t> want = {0};
    for (int i = j; i < 8; ++i) want.push_back(i);
    // Just below z_j keeps block j; just above drops it.
    EXPECT_EQ(list_of(route_cpu(x.input(), shape_of(x, 128), cfg(z * 0.999f, 0)), 0, 0), want);
    want.erase(want.begin() + 1);
    EXPECT_EQ(list_of(route_cpu(x.input(), shape_of(x, 128), cfg(z * 1.001f, 0)), 0, 0), want);
  }
}

TEST(SparseRouter, MaxBlocksKeepsTheHighestScoresAndLowerIndexOnTies) {
  const KnownScores x = known_scores({1, 2, 3, 4, 5, 6, 7, 8});
  // Optional: 5..8 (z > 0); max 2 keeps 7, 8; tile 0 forces block 0.
  EXPECT_EQ(list_of(route_cpu(x.input(), shape_of(x, 128), cfg(1e-6f, 0, 2)), 0, 0),
            (std::vector<int32_t>{0, 6, 7}));
  // Forced blocks do not count against the cap: tile 6 forces 5..7, optional 4 (z > 0).
  EXPECT_EQ(list_of(route_cpu(x.input(), shape_of(x, 128), cfg(1e-6f, 1, 1)), 0, 6),
            (std::vector<int32_t>{4, 5, 6, 7}));
  const KnownScores t = known_scores({0, 5, 5, 0, 0, 0, 0, 0});
  EXPECT_EQ(list_of(route_cpu(t.input(), shape_of(t, 128), cfg(0.5f, 0, 1)), 0, 7),
            (std::vector<int32_t>{1, 7}));
}

TEST(SparseRouter, PrefixKeysForcedAndPrefixTilesDense) {
  const KnownScores x = known_scores({0, 0, 0, 0, 0, 0, 0, 10});
  // 130 prefix rows: keys 128, 129 sit in block 1, so blocks 0 and 1 are forced everywhere;
  // tiles 0 and 1 hold prefix rows and are dense with video_rows_only.
  const HostBlockLists l = route_cpu(x.input(), shape_of(x, 128, 130), cfg(1.0f, 0));
  EXPECT_EQ(l.count[0], 8);
  EXPECT_EQ(l.count[1], 8);
  EXPECT_EQ(list_of(l, 0, 4), (std::vector<int32_t>{0, 1, 4, 7}));
  const HostBlockLists a = route_cpu(x.input(), shape_of(x, 128, 130), cfg(1.0f, 0, 0, false));
  EXPECT_EQ(list_of(a, 0, 0), (std::vector<int32_t>{0, 1, 7}));
  EXPECT_EQ(l.stats.key_blocks_computed, 8 + 8 + 4 * 5 + 3);
}

TEST(SparseRouter, FlatScoresKeepOnlyForcedBlocks) {
  const KnownScores x = known_scores({2, 2, 2, 2});  // sd = 0: every z is 0 < tau
  const HostBlockLists l = route_cpu(x.input(), shape_of(x, 128), cfg(0.1f, 0));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(list_of(l, 0, i), (std::vector<int32_t>{int32_t(i)}));
}

TEST(SparseRouter, RejectsBadOptions) {
  const KnownScores x = known_scores({0, 1});
  EXPECT_THROW(route_cpu(x.input(), shape_of(x, 128), cfg(0.0f, 1)), Error);
  EXPECT_THROW(route_cpu(x.input(), shape_of(x, 128), cfg(1.0f, -1)), Error);
  EXPECT_THROW(route_cpu(x.input(), shape_of(x, 128), cfg(1.0f, 1, -2)), Error);
  EXPECT_THROW(route_cpu(x.input(), shape_of(x, 128, 1000), cfg(1.0f, 1)), Error);
}

TEST(SparseRouter, PrefixRowsAreThoseBeforeTheTargetVideo) {
  EXPECT_EQ(prefix_rows_of(make_t2va_layout(8, 4, 9, 16, 16)), 8 + 2 * 4);
  LayoutSpec spec;
  spec.text_len = 5;
  spec.audio_len = 3;
  spec.frames = 2;
  spec.height = 8;
  spec.width = 8;
  spec.keyframes = {KeyframeSlot{0, 1, 0}};
  const SequenceLayout l = make_layout(spec);
  ASSERT_FALSE(l.cond_video_indices.empty());
  EXPECT_EQ(prefix_rows_of(l), l.video_indices.front());
  EXPECT_GT(prefix_rows_of(l), l.cond_video_indices.back());  // conditioning rows are prefix
  SequenceLayout text_only;  // no target video: every row is prefix
  text_only.text_len = 5;
  EXPECT_EQ(prefix_rows_of(text_only), 5);
}

struct Qkv {
  int64_t seq, heads, stride;
  std::vector<uint16_t> bits;
  std::vector<float> values;  // the same values as float
  attention_sage::QkvView view() const { return {bits.data(), seq, heads, stride}; }
};
Qkv random_qkv(int64_t seq, int64_t heads, uint32_t seed) {
  Qkv x{seq, heads, 3 * heads * 128, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (int64_t i = 0; i < seq * x.stride; ++i) {
    x.bits.push_back(f32_to_bf16(n01(rng)));
    x.values.push_back(bf16_to_f32(x.bits.back()));
  }
  return x;
}

std::vector<float> model_attention(const Qkv& x, const BlockList* blocks) {
  const int64_t I = x.heads * 128;
  std::vector<float> out(x.seq * I);
  ops::attention_cpu({.q = x.values.data(),
                      .k = x.values.data() + I,
                      .v = x.values.data() + 2 * I,
                      .q_row_stride = x.stride,
                      .k_row_stride = x.stride,
                      .v_row_stride = x.stride,
                      .out = out.data(),
                      .rows = x.seq,
                      .heads = x.heads,
                      .blocks = blocks});
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(SparseAttentionCpu, FullListsEqualDenseBitForBit) {
  const Qkv x = random_qkv(300, 2, 11);
  const attention_sage::Quantized z = attention_sage::quantize_reference(x.view(), 0.0883883f);
  for (int64_t tile : {64, 192}) {
    const HostBlockLists full = full_block_lists({x.seq, x.heads, 128, tile, 0});
    const BlockList v = full.view();
    for (auto rs : {attention_sage::RowSum::fp32_p, attention_sage::RowSum::p8}) {
      const std::vector<float> dense = attention_sage::attention_reference(z, rs);
      const std::vector<float> sparse = attention_sage::attention_reference(z, rs, &v);
      EXPECT_EQ(std::memcmp(dense.data(), sparse.data(), dense.size() * 4), 0);
    }
    const std::vector<float> dense = model_attention(x, nullptr), sparse = model_attention(x, &v);
    EXPECT_EQ(std::memcmp(dense.data(), sparse.data(), dense.size() * 4), 0);
  }
}

// The sparse Sage reference against exact attention restricted to the same lists (the model's
// attention): the 8-bit numerics' usual error (dense: rel L2 ~0.03), and far from the dense
// output (the lists drop about 2/3 of the keys).
TEST(SparseAttentionCpu, SparseSageReferenceMatchesRestrictedExactAttention) {
  const Qkv x = random_qkv(520, 2, 12);
  std::mt19937 rng(13);
  const HostBlockLists l = test::random_block_lists({x.seq, x.heads, 128, 64, 0}, rng);
  const BlockList v = l.view();
  const attention_sage::Quantized z = attention_sage::quantize_reference(x.view(), 0.0883883f);
  const std::vector<float> sage =
      attention_sage::attention_reference(z, attention_sage::RowSum::fp32_p, &v);
  const std::vector<float> exact = model_attention(x, &v), dense = model_attention(x, nullptr);
  const double e = rel_l2(sage, exact), d = rel_l2(exact, dense);
  std::printf(
      "[ measured ] sparse Sage ref vs restricted exact: rel L2 %.4f (restricted vs "
      "dense: %.3f)\n",
      e, d);
  EXPECT_LE(e, 0.05);
  EXPECT_GE(d, 0.3);
}

// ---- the tiny model's forward ----

struct TinyRun {
  H3Model model = make_synthetic_model(H3Config::tiny(), 5);
  SequenceLayout layout = make_t2va_layout(8, 4, 9, 16, 16);  // S = 8 + 8 + 576 = 592
  TimestepPlan plan = make_timestep_plan(layout, 0.6f, 0.6f);
  std::vector<float> video, audio, text;
  TinyRun() {
    std::mt19937 rng(7);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, int64_t n) {
      for (int64_t i = 0; i < n; ++i) v.push_back(n01(rng));
    };
    const H3Config& c = model.config;
    fill(video, layout.video_rows() * c.video_features());
    fill(audio, layout.audio_rows() * 32);
    fill(text, layout.text_len * c.text_dim);
    for (float& t : text) t = bf16_to_f32(f32_to_bf16(t));
  }
  ForwardOutputs run(const SparseAttention* s, SparseStats* st,
                     std::map<std::string, FloatVec>* seen = nullptr) const {
    ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
    in.sparse = s;
    in.sparse_stats = st;
    const Probe probe = [&](const std::string& name, const float* d, const Shape& shape) {
      if (name.size() > 4 && name.substr(name.size() - 4) == "_out" &&
          name.rfind("block", 0) == 0 && name.find('/') == std::string::npos)
        (*seen)[name] = FloatVec(d, d + shape_numel(shape));
    };
    return forward_cpu(model, in, Precision::fp32, seen ? &probe : nullptr);
  }
};

TEST(SparseForwardCpu, DenseBlocksCoverAllGivesTheDenseOutput) {
  const TinyRun r;
  SparseAttention s = cfg(1.0f, 0);
  s.dense_blocks = static_cast<int>(r.model.config.layers);
  SparseStats st;
  const ForwardOutputs dense = r.run(nullptr, nullptr), got = r.run(&s, &st);
  EXPECT_EQ(got.video_velocity, dense.video_velocity);
  EXPECT_EQ(got.audio_velocity, dense.audio_velocity);
  EXPECT_EQ(st.key_blocks_total, 0);
}

TEST(SparseForwardCpu, SparseBlocksDifferOnlyFromTheirIndexOn) {
  const TinyRun r;
  SparseAttention s = cfg(0.5f, 0);
  s.dense_blocks = 1;
  SparseStats st;
  std::map<std::string, FloatVec> dense, sparse;
  const ForwardOutputs d = r.run(nullptr, nullptr, &dense), g = r.run(&s, &st, &sparse);
  ASSERT_TRUE(dense.count("block0_out") && dense.count("block1_out"));
  EXPECT_EQ(sparse.at("block0_out"), dense.at("block0_out"));
  EXPECT_NE(sparse.at("block1_out"), dense.at("block1_out"));
  // One sparse block: 2 heads x 10 tiles of 64 rows x 5 key blocks.
  EXPECT_EQ(st.key_blocks_total, 2 * 10 * 5);
  EXPECT_LT(st.key_blocks_computed, st.key_blocks_total);
  std::printf("[ measured ] tiny forward, tau 0.5, band 0: %.1f%% of key blocks computed\n",
              100.0 * st.fraction());
  for (float v : g.video_velocity) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(g.video_velocity, d.video_velocity);
}

}  // namespace
}  // namespace h3rt::attention_sparse
