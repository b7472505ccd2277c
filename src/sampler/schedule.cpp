// Sigma grids, timesteps and the per-step plan of the MiniMax H3 scheduler, in float32 with
// the reference's exact sequence of roundings (golden README sections 7-8).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF  // GCC ignores it; fp:: helpers guard there
#endif

#include <cmath>

#include "h3rt/check.h"
#include "h3rt/sampler.h"
#include "sampler/fp_exact.h"

namespace h3rt {

std::vector<float> base_grid(int num_points) {
  H3RT_CHECK(num_points >= 2, "base_grid: need at least 2 grid points, got ", num_points);
  const int n = num_points;
  const float step = fp::div(-1.0f, static_cast<float>(n - 1));
  std::vector<float> b(n);
  // torch fills the two halves from their ends, each value with a single rounding.
  for (int i = 0; i < n; ++i)
    b[i] = i < n / 2 ? std::fma(step, static_cast<float>(i), 1.0f)
                     : std::fma(-step, static_cast<float>(n - 1 - i), 0.0f);
  return b;
}

static float shift_sigma(float b, float shift) {
  const float num = fp::mul(shift, b);
  const float den = fp::add(1.0f, fp::mul(fp::sub(shift, 1.0f), b));
  return fp::div(num, den);
}

std::vector<float> sigma_grid(int num_points, float shift) {
  std::vector<float> sigmas;
  for (float b : base_grid(num_points)) {
    const float s = shift_sigma(b, shift);
    if (sigmas.empty() || sigmas.back() != s) sigmas.push_back(s);
  }
  return sigmas;
}

std::vector<float> timesteps_from_sigmas(const std::vector<float>& sigmas) {
  std::vector<float> t;
  for (size_t i = 0; i + 1 < sigmas.size(); ++i) t.push_back(fp::sub(1.0f, sigmas[i]));
  return t;
}

float audio_sigma_from_video(float sigma_video, double video_shift, double audio_shift) {
  const double sv = sigma_video, svs = video_shift, sas = audio_shift;
  const double b = sv / (svs - (svs - 1.0) * sv);
  return static_cast<float>(sas * b / (1.0 + (sas - 1.0) * b));
}

SamplerPlan make_sampler_plan(const SequenceLayout& layout, int num_points, float video_shift,
                              float audio_shift) {
  H3RT_CHECK(std::isfinite(video_shift) && video_shift > 0,
             "video sigma shift must be a finite number > 0, got ", video_shift);
  H3RT_CHECK(std::isfinite(audio_shift) && audio_shift > 0,
             "audio sigma shift must be a finite number > 0, got ", audio_shift);
  SamplerPlan p;
  p.video_shift = video_shift;
  p.audio_shift = audio_shift;
  p.video_sigmas = sigma_grid(num_points, video_shift);
  p.audio_sigmas = sigma_grid(num_points, audio_shift);
  H3RT_CHECK(p.video_sigmas.size() == p.audio_sigmas.size(),
             "make_sampler_plan: video and audio grids differ in length after dropping "
             "duplicates (",
             p.video_sigmas.size(), " vs ", p.audio_sigmas.size(), ") for ", num_points, " points");
  p.video_timesteps = timesteps_from_sigmas(p.video_sigmas);
  p.audio_timesteps = timesteps_from_sigmas(p.audio_sigmas);
  for (size_t i = 0; i < p.video_timesteps.size(); ++i) {
    SamplerStep s;
    s.t_video = p.video_timesteps[i];
    s.t_audio = p.audio_timesteps[i];
    s.sigma_video = p.video_sigmas[i];
    s.sigma_video_next = p.video_sigmas[i + 1];
    s.sigma_audio = p.audio_sigmas[i];
    s.sigma_audio_next = p.audio_sigmas[i + 1];
    s.plan = make_timestep_plan(layout, s.t_video, s.t_audio);
    p.steps.push_back(std::move(s));
  }
  return p;
}

SigmaSchedule sigma_schedule(const SamplerPlan& plan, int step) {
  H3RT_CHECK(step >= 0 && step < static_cast<int>(plan.steps.size()), "sigma_schedule: step ", step,
             " outside [0, ", plan.steps.size(), ")");
  return {plan.steps[step].sigma_video, plan.video_sigmas, plan.video_shift, plan.audio_shift};
}

}  // namespace h3rt
