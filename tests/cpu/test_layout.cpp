// The packed layout, positions, per-row timesteps and (un)patchify against the golden set,
// bit for bit, plus internal consistency on a release-sized request.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "h3rt/layout.h"
#include "h3rt/safetensors.h"
#include "h3rt/sampler.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::bits;
using test::expect_same_bits;

// Golden set a: L = 10, N = 9, latent 24 x 7 x 8 x 12.
constexpr int64_t kL = 10, kN = 9, kT = 7, kH = 8, kW = 12;

SafetensorsFile golden() {
  return SafetensorsFile::open(test::golden_dir() + "/golden.safetensors");
}

std::vector<int64_t> as_i64(const Tensor& t) {
  H3RT_CHECK(t.dtype() == DType::i64 && t.is_contiguous(), "expected a contiguous int64 tensor");
  return std::vector<int64_t>(t.ptr<int64_t>(), t.ptr<int64_t>() + t.numel());
}

TEST(Layout, GoldenIndicesTagsAndPositionsBitExact) {
  const SafetensorsFile g = golden();
  const SequenceLayout lay = make_t2va_layout(kL, kN, kT, kH, kW);
  ASSERT_EQ(lay.seq_len(), 196);
  EXPECT_EQ(lay.text_indices, as_i64(g.get("layout/text_indices", DType::i64, {kL})));
  EXPECT_EQ(lay.audio_indices, as_i64(g.get("layout/audio_indices", DType::i64, {2 * kN})));
  EXPECT_EQ(lay.video_indices, as_i64(g.get("layout/video_indices", DType::i64, {168})));
  const std::vector<int64_t> tags = as_i64(g.get("layout/token_tags", DType::i64, {196}));
  EXPECT_EQ(std::vector<int64_t>(lay.token_tags.begin(), lay.token_tags.end()), tags);

  const Tensor pos = g.get("layout/position_ids", DType::f64, {196, 3});
  const double* want = pos.ptr<double>();
  ASSERT_EQ(lay.position_ids.size(), 196u * 3);
  int64_t bad = 0;
  for (size_t i = 0; i < lay.position_ids.size(); ++i)
    if (!(lay.position_ids[i] == want[i]) && bad++ < 5)
      ADD_FAILURE() << "position_ids[" << i / 3 << "][" << i % 3 << "]: got " << lay.position_ids[i]
                    << ", want " << want[i];
  EXPECT_EQ(bad, 0);
}

TEST(Layout, GoldenTimestepPlanAndAdalnIndices) {
  const SafetensorsFile g = golden();
  const SequenceLayout lay = make_t2va_layout(kL, kN, kT, kH, kW);
  const float sv = g.get("fwd/sigma_video", DType::f32, {1}).ptr<float>()[0];
  ASSERT_EQ(sv, 0.7f);
  const float t_video = 1.0f - sv;
  const float t_audio = 1.0f - audio_sigma_from_video(sv);
  const TimestepPlan plan = make_timestep_plan(lay, t_video, t_audio);

  expect_same_bits(plan.timestep, g.get("fwd/timestep", DType::f32, {2}).to_f32(), "fwd/timestep");
  EXPECT_EQ(plan.timestep_indices, as_i64(g.get("fwd/timestep_indices", DType::i64, {196})));
  EXPECT_EQ(adaln_indices(lay, plan), as_i64(g.get("fwd/adaln_indices", DType::i64, {196})));
  // README section 7: text rows read AdaLN row 1, video 0, audio 5.
  const std::vector<int64_t> a = adaln_indices(lay, plan);
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(a[lay.audio_indices[0]], 5);
  EXPECT_EQ(a[lay.video_indices[0]], 0);
}

TEST(Layout, EqualTimestepsGiveOneTimestep) {
  const SequenceLayout lay = make_t2va_layout(kL, kN, kT, kH, kW);
  const TimestepPlan plan = make_timestep_plan(lay, 0.0f, 0.0f);
  ASSERT_EQ(plan.timestep.size(), 1u);
  const std::vector<int64_t> a = adaln_indices(lay, plan);
  EXPECT_EQ(a[lay.audio_indices[0]], 2);
  EXPECT_EQ(a[0], 1);
  // Audio earlier than video in t: audio gets index 0.
  const TimestepPlan p2 = make_timestep_plan(lay, 0.5f, 0.25f);
  EXPECT_EQ(p2.timestep, (std::vector<float>{0.25f, 0.5f}));
  EXPECT_EQ(p2.timestep_indices[lay.audio_indices[0]], 0);
  EXPECT_EQ(p2.timestep_indices[lay.video_indices[0]], 1);
  EXPECT_EQ(p2.timestep_indices[0], 1);
}

TEST(Layout, PatchifyMatchesGoldenAndInverts) {
  const SafetensorsFile g = golden();
  const std::vector<float> lat =
      g.get("input/video_latents", DType::f32, {1, 24, kT, kH, kW}).to_f32();
  const std::vector<float> rows = g.get("input/video_rows", DType::f32, {168, 96}).to_f32();
  const FloatVec got = patchify_video(lat.data(), 24, kT, kH, kW);
  expect_same_bits(got, rows, "patchify(input/video_latents)");
  const FloatVec back = unpatchify_video(rows.data(), 24, kT, kH, kW);
  expect_same_bits(back, lat, "unpatchify(input/video_rows)");
}

TEST(Layout, AudioRowsMatchGoldenAndInvert) {
  const SafetensorsFile g = golden();
  const std::vector<float> lat = g.get("input/audio_latents", DType::f32, {2, 32, kN}).to_f32();
  const std::vector<float> rows = g.get("input/audio_rows", DType::f32, {2 * kN, 32}).to_f32();
  expect_same_bits(audio_latents_to_rows(lat.data(), 32, kN), rows, "audio rows");
  expect_same_bits(audio_rows_to_latents(rows.data(), 32, kN), lat, "audio latents");
}

TEST(Layout, SquareLatentHasIntegerSpatialCoordinates) {
  const SequenceLayout lay = make_t2va_layout(3, 2, 1, 8, 8);
  const int64_t r0 = lay.video_indices[0];
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 4; ++x) {
      const int64_t r = r0 + y * 4 + x;
      EXPECT_EQ(lay.position_ids[3 * r + 1], 8.0 * y);
      EXPECT_EQ(lay.position_ids[3 * r + 2], 8.0 * x);
      EXPECT_EQ(lay.position_ids[3 * r + 0], 3.0);
    }
}

TEST(Layout, ReleaseLikeRequestIsConsistent) {
  // 32 latent frames at 48 x 84, 37 text tokens, 500 audio latents (README section 4).
  const int64_t L = 37, N = 500, T = 32, H = 48, W = 84;
  const SequenceLayout lay = make_t2va_layout(L, N, T, H, W);
  const int64_t hp = H / 2, wp = W / 2, S = L + 2 * N + T * hp * wp;
  ASSERT_EQ(lay.seq_len(), S);
  ASSERT_EQ(static_cast<int64_t>(lay.position_ids.size()), 3 * S);
  ASSERT_EQ(static_cast<int64_t>(lay.video_indices.size()), T * hp * wp);
  EXPECT_EQ(lay.video_indices.back(), S - 1);
  EXPECT_EQ(lay.audio_indices.front(), L);
  const double* p = lay.position_ids.data();
  auto at = [&](int64_t r, int c) { return p[3 * r + c]; };
  const int64_t v0 = L + 2 * N;

  // Time: starts at L, strictly increasing per frame, spans (5/3)*P[f mod 5].
  const double P[5] = {1, 4, 4, 4, 4};
  EXPECT_EQ(at(v0, 0), static_cast<double>(L));
  for (int64_t f = 1; f < T; ++f) {
    const double prev = at(v0 + (f - 1) * hp * wp, 0), cur = at(v0 + f * hp * wp, 0);
    EXPECT_GT(cur, prev);
    EXPECT_NEAR(cur - prev, 5.0 / 3.0 * P[(f - 1) % 5], 1e-12) << "frame " << f;
    for (int64_t k = 0; k < hp * wp; ++k) ASSERT_EQ(at(v0 + f * hp * wp + k, 0), cur);
  }
  // Spatial axes: evenly spaced by 64/sqrt(H*W) and symmetric about 16 - step/2.
  const double step = 64.0 / std::sqrt(static_cast<double>(H * W));
  std::vector<double> hy(hp), wx(wp);
  for (int64_t y = 0; y < hp; ++y) hy[y] = at(v0 + y * wp, 1);
  for (int64_t x = 0; x < wp; ++x) wx[x] = at(v0 + x, 2);
  for (const std::vector<double>* axis : {&hy, &wx}) {
    const size_t n = axis->size();
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) {
        EXPECT_NEAR((*axis)[i] - (*axis)[i - 1], step, 1e-12);
      }
      EXPECT_NEAR((*axis)[i] + (*axis)[n - 1 - i], 32.0 - step, 1e-12);
    }
  }
  EXPECT_LT(wx.front(), hy.front());  // the wider axis extends further
  // Audio: t = L + j on both channels, w at the first / last video column, h = 0.
  for (int64_t j = 0; j < N; ++j) {
    EXPECT_EQ(at(L + j, 0), static_cast<double>(L + j));
    EXPECT_EQ(at(L + N + j, 0), static_cast<double>(L + j));
    EXPECT_EQ(at(L + j, 2), wx.front());
    EXPECT_EQ(at(L + N + j, 2), wx.back());
    EXPECT_EQ(at(L + j, 1), 0.0);
  }
  // Tags: text, then audio, then video.
  EXPECT_EQ(lay.token_tags[L - 1], kTagText);
  EXPECT_EQ(lay.token_tags[L], kTagAudio);
  EXPECT_EQ(lay.token_tags[v0 - 1], kTagAudio);
  EXPECT_EQ(lay.token_tags[v0], kTagVideo);
}

TEST(Layout, RejectsOddLatentSizes) {
  EXPECT_THROW(make_t2va_layout(1, 1, 1, 7, 8), Error);
  EXPECT_THROW(make_t2va_layout(1, 1, 0, 8, 8), Error);
}

}  // namespace
}  // namespace h3rt
