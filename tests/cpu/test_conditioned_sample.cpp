// sample() on a conditioned request: each step runs the conditioned plan at the sampler's
// timesteps (condition rows pinned at max(t, 0.999) / max(t, 1)) with the request's fixed
// condition rows, and only the target rows are stepped.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "h3rt/pipeline.h"
#include "test_util.h"

namespace h3rt {
namespace {

struct Requests {
  std::unique_ptr<Denoiser> d = Denoiser::create(ModelSource{}, {});  // tiny preset, CPU fp32
  Request plain, cond;
  Requests() {
    const H3Config& c = d->config();
    RequestOptions o;
    o.frames = 5;
    o.width = o.height = 64;
    plain = make_request(c, o);
    cond = plain;
    Conditioning k;
    KeyframeCond kf;
    kf.video = {FloatVec(c.in_channels * 4 * 4, 0.0f), 1, 4, 4};
    gaussian_noise(3, 0, 0, kf.video.data.data(), static_cast<int64_t>(kf.video.data.size()));
    k.keyframes.push_back(kf);
    kf.frame_index = video_frames_for(plain.layout.frames) - 1;  // and the last frame
    k.keyframes.push_back(kf);
    condition_request(cond, c, std::move(k));
  }
};

TEST(ConditionedSample, StepsRunTheConditionedPlanWithFixedConditionRows) {
  Requests s;
  SampleOptions so;
  so.steps = 2;
  const SampleResult got = sample(*s.d, s.cond, so);

  // The same loop written out: the condition rows are passed as given, never stepped.
  const H3Config& c = s.d->config();
  Request r = s.cond;
  const FloatVec cond_before = r.cond.video;
  const SamplerPlan plan = make_sampler_plan(r.layout, so.steps + 1);
  for (int i = 0; i < 2; ++i) {
    const SamplerStep& st = plan.steps[i];
    const TimestepPlan tp =
        make_conditioned_plan(r.layout, {st.sigma_video, st.t_video, st.t_audio});
    EXPECT_EQ(tp.timestep[tp.timestep_indices[r.layout.cond_video_indices[0]]],
              static_cast<float>(std::max<double>(st.t_video, 0.999)));
    const SigmaSchedule sch = sigma_schedule(plan, i);
    const ForwardInputs in{r.layout,      tp,   r.video_rows.data(), r.audio_rows.data(),
                           r.text.data(), &sch, r.cond.video.data(), nullptr};
    const ForwardOutputs v = s.d->forward(in);
    sampler_step(plan, i, r.video_rows.data(), v.video_velocity.data(),
                 static_cast<int64_t>(r.video_rows.size()), r.audio_rows.data(),
                 v.audio_velocity.data(), static_cast<int64_t>(r.audio_rows.size()));
  }
  EXPECT_EQ(r.cond.video, cond_before);
  const FloatVec want = unpatchify_video(r.video_rows.data(), c.in_channels, r.layout.frames,
                                         r.layout.height, r.layout.width);
  test::expect_same_bits(got.video_latents, want, "video latents");

  // The keyframes change the result (the condition rows take part in attention).
  const SampleResult t2va = sample(*s.d, s.plain, so);
  EXPECT_NE(t2va.video_latents, got.video_latents);
}

}  // namespace
}  // namespace h3rt
