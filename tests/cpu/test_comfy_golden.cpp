// Every case of the h3_tiny_comfy golden set (ComfyUI's own model code on the tiny weights): the
// request is built from the case file alone (comfy_golden.h), then the layout, the timestep table,
// the condition rows after augmentation (exact) and the velocities of the CPU fp32 forward
// (within 1e-5 of max|ref|) are compared. Data-driven: any set of the same format passes through
// H3RT_COMFY_GOLDEN_DIR.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "comfy_golden.h"

namespace h3rt::test {
namespace {

const H3Config& comfy_config() {
  static const H3Config c = infer_config(SafetensorsFile::open(comfy_weights_path()));
  return c;
}

Denoiser& cpu_denoiser() {
  static std::unique_ptr<Denoiser> d = [] {
    ModelSource s;
    s.checkpoint = comfy_weights_path();
    return Denoiser::create(s, {});
  }();
  return *d;
}

template <typename A, typename B>
void expect_same_f64(const A& got, const B& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 8) != 0 && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

// Within tol * max|ref|, reporting the worst element.
void expect_close(const FloatVec& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double ref = 0, worst = 0;
  size_t at = 0;
  for (float w : want) ref = std::max(ref, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i]));
    if (e > worst) worst = e, at = i;
  }
  EXPECT_LE(worst, tol * ref) << what << ": max error " << worst << " at " << at << " (max|ref| "
                              << ref << ")";
}

class ComfyGolden : public ::testing::TestWithParam<std::string> {
 protected:
  ComfyCase c{GetParam(), comfy_config()};
  const SequenceLayout& L() const { return c.request.layout; }
  TimestepPlan plan() const {
    return make_conditioned_plan(L(), comfy_eval_times(c.sigma), c.request.conditioning.aug,
                                 row_masks(c.request.conditioning, L()));
  }
};

TEST_P(ComfyGolden, LayoutMatchesExactly) {
  expect_same_f64(L().position_ids, c.f64("layout/position_ids"), "position_ids");
  std::vector<int64_t> seg;
  for (const Segment& s : L().segments)
    seg.insert(seg.end(), {s.start, s.stop, static_cast<int64_t>(s.kind)});
  EXPECT_EQ(seg, c.ints("layout/segments"));
  EXPECT_EQ(L().text_indices, c.ints("layout/text_indices"));
  EXPECT_EQ(L().audio_indices, c.ints("layout/audio_indices"));
  EXPECT_EQ(L().video_indices, c.ints("layout/video_indices"));
  // img_pos / audio_pos list every video-type / audio-type row in packed order, 1 = target.
  auto pos = [](std::vector<int64_t> cond, const std::vector<int64_t>& target) {
    std::vector<int64_t> update(cond.size(), 0);
    cond.insert(cond.end(), target.begin(), target.end());
    update.resize(cond.size(), 1);
    return std::make_pair(cond, update);
  };
  const auto [img, img_up] = pos(L().cond_video_indices, L().video_indices);
  const auto [aud, aud_up] = pos(L().cond_audio_indices, L().audio_indices);
  EXPECT_EQ(img, c.ints("layout/img_pos"));
  EXPECT_EQ(img_up, c.ints("layout/img_update"));
  EXPECT_EQ(aud, c.ints("layout/audio_pos"));
  EXPECT_EQ(aud_up, c.ints("layout/audio_update"));
  EXPECT_EQ(L().seq_len(), c.meta["shapes"]["S"].get<int64_t>());
}

TEST_P(ComfyGolden, TimestepsAndModulationRowsMatchExactly) {
  const EvalTimes t = comfy_eval_times(c.sigma);
  expect_same_f64(std::vector<double>{t.sigma_video, t.t_video, t.t_audio},
                  std::vector<double>{c.f64("fwd/sigma_video")[0], c.f64("fwd/t_video")[0],
                                      c.f64("fwd/t_audio")[0]},
                  "sigma_video, t_video, t_audio");
  const TimestepPlan p = plan();
  expect_same_f64(p.values, c.f64("layout/timesteps_f64"), "timesteps_f64");
  expect_same_bits(p.timestep, c.f32("layout/timesteps"), "timesteps");
  EXPECT_EQ(p.timestep_indices, c.ints("layout/timestep_indices"));
  EXPECT_EQ(adaln_indices(L(), p), c.ints("layout/adaln_indices"));
  std::vector<int32_t> want_tags;
  for (int64_t g : c.ints("layout/token_tags")) want_tags.push_back(static_cast<int32_t>(g));
  EXPECT_EQ(L().token_tags, want_tags);
  std::vector<int64_t> mods;
  for (const ModSegment& m : mod_segments(L(), p))
    mods.insert(mods.end(), {m.start, m.stop, m.row});
  EXPECT_EQ(mods, c.ints("layout/mod_segments"));
}

TEST_P(ComfyGolden, ConditionRowsMatchExactly) {
  if (c.file.contains("fwd/cond_video_rows"))
    expect_same_bits(c.request.cond.video, c.f32("fwd/cond_video_rows"), "cond_video_rows");
  else
    EXPECT_TRUE(c.request.cond.video.empty());
  if (c.file.contains("fwd/cond_audio_rows"))
    expect_same_bits(c.request.cond.audio, c.f32("fwd/cond_audio_rows"), "cond_audio_rows");
  else
    EXPECT_TRUE(c.request.cond.audio.empty());
}

TEST_P(ComfyGolden, AudioCarryMatchesExactly) {
  if (!c.file.contains("fwd/audio_carry")) GTEST_SKIP() << "no audio carry in this case";
  const AudioCarry k = audio_carry(c.sigma, c.audio_scale);
  EXPECT_EQ(bits(k.carry), bits(c.f32("fwd/audio_carry")[0]));
  EXPECT_EQ(bits(k.sigma_audio), bits(c.f32("fwd/sigma_audio_f32")[0]));
  std::vector<float> x = c.f32("input/audio_rows");
  carry_audio_input(x.data(), static_cast<int64_t>(x.size()), k);
  expect_same_bits(x, c.f32("fwd/audio_rows_network"), "audio_rows_network");
  // The output conversion, from ComfyUI's own network output.
  std::vector<float> v = c.f32("audio_velocity_network");
  carry_audio_output(v.data(), x.data(), static_cast<int64_t>(v.size()), k);
  expect_same_bits(v, c.f32("audio_velocity"), "audio_velocity (carried)");
}

TEST_P(ComfyGolden, AudioMaskOutputMatchesExactly) {
  if (c.request.conditioning.audio_mask.empty()) GTEST_SKIP() << "no audio mask in this case";
  std::vector<float> v = c.f32("audio_velocity_network");
  apply_audio_mask(v.data(), c.request.conditioning.audio_mask.data(),
                   comfy_config().audio_channels, L().audio_len);
  expect_same_bits(v, c.f32("audio_velocity"), "masked audio_velocity");
}

TEST_P(ComfyGolden, CpuForwardMatchesVelocities) {
  EvalOptions o;
  o.audio_scale = c.audio_scale;
  const ForwardOutputs v = forward_request(cpu_denoiser(), c.request, c.sigma, o);
  expect_close(v.video_velocity, c.f32("video_velocity"), 1e-5, c.name + " video_velocity");
  expect_close(v.audio_velocity, c.f32("audio_velocity"), 1e-5, c.name + " audio_velocity");
}

INSTANTIATE_TEST_SUITE_P(Cases, ComfyGolden, ::testing::ValuesIn(comfy_case_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace h3rt::test
