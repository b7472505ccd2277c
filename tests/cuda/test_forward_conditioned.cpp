// The conditioned forward on the GPU (the general layout: keyframe and reference rows, text tags,
// masks, the audio carry) through the library's request path, against the CPU: the GPU's bf16
// error must stay within twice the CPU bf16 forward's, as for the t2va forward tests.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../cpu/comfy_golden.h"
#include "cuda_test_util.h"
#include "h3rt/pipeline.h"

namespace h3rt {
namespace {

using test::Err;
using test::error;

std::unique_ptr<Denoiser> denoiser(Device device, Precision precision, bool graphs = true) {
  ModelSource s;
  s.checkpoint = test::comfy_weights_path();
  DenoiserOptions o;
  o.device = device;
  o.precision = precision;
  o.cuda_graphs = graphs;
  return Denoiser::create(s, o);
}

// GPU and CPU bf16 velocities against a float32 reference `ref`: the GPU within 2x the CPU's
// max and mean error.
void expect_within_bf16_bound(const ForwardOutputs& gpu, const ForwardOutputs& cpu,
                              const std::vector<float>& ref_v, const std::vector<float>& ref_a,
                              const std::string& what) {
  const std::vector<double> rv(ref_v.begin(), ref_v.end()), ra(ref_a.begin(), ref_a.end());
  const Err gv = error(gpu.video_velocity, rv), ga = error(gpu.audio_velocity, ra);
  const Err cv = error(cpu.video_velocity, rv), ca = error(cpu.audio_velocity, ra);
  std::printf(
      "%s: video max/mean gpu %.4g/%.4g cpu-bf16 %.4g/%.4g; audio gpu %.4g/%.4g "
      "cpu-bf16 %.4g/%.4g\n",
      what.c_str(), gv.max_abs, gv.mean_abs, cv.max_abs, cv.mean_abs, ga.max_abs, ga.mean_abs,
      ca.max_abs, ca.mean_abs);
  EXPECT_GT(cv.max_abs, 0.0) << what;
  EXPECT_LE(gv.max_abs, 2.0 * cv.max_abs) << what;
  EXPECT_LE(gv.mean_abs, 2.0 * cv.mean_abs) << what;
  EXPECT_LE(ga.max_abs, 2.0 * ca.max_abs) << what;
  EXPECT_LE(ga.mean_abs, 2.0 * ca.mean_abs) << what;
}

// Golden cases computed by ComfyUI (fp32): the GPU bf16 forward of each against them.
TEST(ForwardConditionedCuda, GoldenCasesWithinTwiceCpuBf16Error) {
  H3RT_REQUIRE_GPU();
  std::unique_ptr<Denoiser> gpu = denoiser(Device::cuda, Precision::bf16);
  std::unique_ptr<Denoiser> cpu = denoiser(Device::cpu, Precision::bf16);
  for (const std::string name :
       {"fl2va_first", "fl2va_first_last", "fl2va_av_aug", "ref2va_mixed", "ref2va_video_audio",
        "text_tags", "audio_mask", "t2va_audio_carry"}) {
    SCOPED_TRACE(name);
    const test::ComfyCase c(name, cpu->config());
    EvalOptions o;
    o.audio_scale = c.audio_scale;
    const ForwardOutputs g = forward_request(*gpu, c.request, c.sigma, o);
    const ForwardOutputs h = forward_request(*cpu, c.request, c.sigma, o);
    expect_within_bf16_bound(g, h, c.f32("video_velocity"), c.f32("audio_velocity"), name);
  }
}

// The tiny model's fl2va forward (a first-frame keyframe with augmentation noise drawn by h3rt),
// CPU fp32 as the reference; repeated on one session (eager, then graph-replayed steps) the GPU
// gives the same bits each time: the cached condition rows do not drift.
TEST(ForwardConditionedCuda, TinyFl2vaCpuAndGpuAgree) {
  H3RT_REQUIRE_GPU();
  std::unique_ptr<Denoiser> gpu = denoiser(Device::cuda, Precision::bf16);
  std::unique_ptr<Denoiser> cpu = denoiser(Device::cpu, Precision::bf16);
  std::unique_ptr<Denoiser> ref = denoiser(Device::cpu, Precision::fp32);
  const H3Config& c = cpu->config();
  RequestOptions ro;
  ro.frames = 17;
  ro.width = 192;
  ro.height = 128;
  Request r = make_request(c, ro);
  Conditioning k;
  KeyframeCond kf;
  kf.frame_index = 0;
  kf.video = {FloatVec(c.in_channels * 1 * 8 * 12), 1, 8, 12};
  gaussian_noise(7, 9, 0, kf.video.data.data(), static_cast<int64_t>(kf.video.data.size()));
  k.keyframes.push_back(std::move(kf));
  k.text_tags.assign(r.layout.text_len, 1);
  k.text_tags[1] = k.text_tags[2] = 0;
  k.noise_seed = 11;
  condition_request(r, c, std::move(k));
  ASSERT_EQ(r.layout.cond_video_indices.size(), 24u);

  const ForwardOutputs want = forward_request(*ref, r, 0.6f);
  const ForwardOutputs h = forward_request(*cpu, r, 0.6f);
  const ForwardOutputs g = forward_request(*gpu, r, 0.6f);
  std::vector<float> wv(want.video_velocity.begin(), want.video_velocity.end()),
      wa(want.audio_velocity.begin(), want.audio_velocity.end());
  expect_within_bf16_bound(g, h, wv, wa, "tiny fl2va");
  for (int i = 0; i < 3; ++i) {
    const ForwardOutputs again = forward_request(*gpu, r, 0.6f);
    test::expect_same_bits(again.video_velocity, g.video_velocity,
                           "video, call " + std::to_string(i));
    test::expect_same_bits(again.audio_velocity, g.audio_velocity,
                           "audio, call " + std::to_string(i));
  }
}

}  // namespace
}  // namespace h3rt
