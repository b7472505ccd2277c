// The eta = 0 Euler step of the rectified-flow scheduler, float32 with one rounding per
// operation (golden README section 8). fp:: keeps products out of FMA contraction.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF  // GCC ignores it; fp:: helpers guard there
#endif

#include "h3rt/check.h"
#include "h3rt/sampler.h"
#include "sampler/fp_exact.h"
#include "sampler/update_scalars.h"

namespace h3rt {

update::EulerRf update::euler_rf_scalars(float t, float sigma, float sigma_next) {
  H3RT_CHECK(sigma > 0.0f, "euler_step: sigma must be positive, got ", sigma);
  EulerRf c;
  c.one_minus_t = fp::sub(1.0f, t);
  c.last = sigma_next == 0.0f;  // last step: the model's clean estimate
  c.r = fp::div(sigma_next, sigma);
  c.one_minus_r = fp::sub(1.0f, c.r);
  return c;
}

void euler_step(float* x, const float* v, int64_t n, float t, float sigma, float sigma_next) {
  const update::EulerRf c = update::euler_rf_scalars(t, sigma, sigma_next);
  for (int64_t i = 0; i < n; ++i) x[i] = update::euler_rf(x[i], v[i], c);
}

void sampler_step(const SamplerPlan& plan, int step, float* video_rows, const float* video_v,
                  int64_t video_n, float* audio_rows, const float* audio_v, int64_t audio_n) {
  H3RT_CHECK(step >= 0 && step < static_cast<int>(plan.steps.size()), "sampler_step: step ", step,
             " outside [0, ", plan.steps.size(), ")");
  const SamplerStep& s = plan.steps[step];
  euler_step(video_rows, video_v, video_n, s.t_video, s.sigma_video, s.sigma_video_next);
  euler_step(audio_rows, audio_v, audio_n, s.t_audio, s.sigma_audio, s.sigma_audio_next);
}

}  // namespace h3rt
