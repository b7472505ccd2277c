// ComfyUI's k-diffusion samplers (sample_euler, res_multistep with eta 0,
// sample_euler_ancestral_RF) on the packed latent, and the model-output conversions around
// them (CONST.calculate_denoised, MiniMaxH3Model.forward's audio carry). Float32 with torch's
// op order and one rounding per op; the per-step scalars are shared by both streams.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF  // GCC ignores it; fp:: helpers guard there
#endif

#include <cfloat>
#include <cmath>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "h3rt/sampler.h"
#include "sampler/fp_exact.h"

namespace h3rt {
namespace {

// Correctly rounded float32 transcendentals (see comfy_sampler_step in sampler.h).
float log_f32(float x) {
  return static_cast<float>(std::log(static_cast<double>(x)));
}
float exp_f32(float x) {
  return static_cast<float>(std::exp(static_cast<double>(x)));
}
float expm1_f32(float x) {
  return static_cast<float>(std::expm1(static_cast<double>(x)));
}

// torch.nan_to_num(x, nan=0.0): infinities become the largest finite floats.
float nan_to_num(float x) {
  if (std::isnan(x)) return 0.0f;
  if (std::isinf(x)) return x > 0 ? FLT_MAX : -FLT_MAX;
  return x;
}

// x = x + ((x - denoised) / sigma) * dt: the Euler branch of sample_euler and res_multistep.
void euler_update(float* x, const float* den, int64_t n, float sigma, float dt) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = fp::add(x[i], fp::mul(fp::div(fp::sub(x[i], den[i]), sigma), dt));
}

// res_multistep's second-order step: x = exp(-h) x + h (b1 denoised + b2 old_denoised).
struct ResCoefficients {
  float decay, h, b1, b2;
};

ResCoefficients res_coefficients(float sigma_prev, float sigma, float old_sigma_down,
                                 float sigma_down) {
  const float t = -log_f32(sigma), t_old = -log_f32(old_sigma_down);
  const float t_next = -log_f32(sigma_down), t_prev = -log_f32(sigma_prev);
  const float h = fp::sub(t_next, t);
  const float c2 = fp::div(fp::sub(t_prev, t_old), h);
  const float mh = -h;
  const float phi1 = fp::div(expm1_f32(mh), mh);
  const float phi2 = fp::div(fp::sub(phi1, 1.0f), mh);
  return {exp_f32(mh), h, nan_to_num(fp::sub(phi1, fp::div(phi2, c2))),
          nan_to_num(fp::div(phi2, c2))};
}

void res_update(float* x, const float* den, const float* old, int64_t n, const ResCoefficients& c) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = fp::add(fp::mul(c.decay, x[i]),
                   fp::mul(c.h, fp::add(fp::mul(c.b1, den[i]), fp::mul(c.b2, old[i]))));
}

// sample_euler_ancestral_RF with eta = 1 and s_noise = 1.
struct AncestralCoefficients {
  float ratio, rescale, renoise;
};

AncestralCoefficients ancestral_coefficients(float sigma, float sigma_next) {
  const float eta = 1.0f;
  const float downstep = fp::add(1.0f, fp::mul(fp::sub(fp::div(sigma_next, sigma), 1.0f), eta));
  const float sigma_down = fp::mul(sigma_next, downstep);
  const float alpha_next = fp::sub(1.0f, sigma_next), alpha_down = fp::sub(1.0f, sigma_down);
  const float down_term =
      fp::div(fp::mul(fp::mul(sigma_down, sigma_down), fp::mul(alpha_next, alpha_next)),
              fp::mul(alpha_down, alpha_down));
  return {fp::div(sigma_down, sigma), fp::div(alpha_next, alpha_down),
          fp::sqrt(fp::sub(fp::mul(sigma_next, sigma_next), down_term))};
}

void ancestral_update(float* x, const float* den, const float* noise, int64_t n,
                      const AncestralCoefficients& c) {
  const float keep = fp::sub(1.0f, c.ratio), s_noise = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float mixed = fp::add(fp::mul(c.ratio, x[i]), fp::mul(keep, den[i]));
    x[i] = fp::add(fp::mul(c.rescale, mixed), fp::mul(fp::mul(noise[i], s_noise), c.renoise));
  }
}

void copy_into(FloatVec& dst, const float* src, int64_t n) {
  dst.assign(src, src + n);
}

void step_ancestral(const SamplerPlan& p, int step, float* video, const float* vden, int64_t vn,
                    float* audio, const float* aden, int64_t an, uint64_t seed) {
  const SamplerStep& s = p.steps[step];
  if (s.sigma_video_next == 0.0f) {  // x = denoised
    std::copy(vden, vden + vn, video);
    std::copy(aden, aden + an, audio);
    return;
  }
  const AncestralCoefficients c = ancestral_coefficients(s.sigma_video, s.sigma_video_next);
  FloatVec noise(static_cast<size_t>(std::max(vn, an)));
  ancestral_noise(seed, step, false, noise.data(), vn);
  ancestral_update(video, vden, noise.data(), vn, c);
  ancestral_noise(seed, step, true, noise.data(), an);
  ancestral_update(audio, aden, noise.data(), an, c);
}

// CONST.noise_scaling of one element: sigma * noise + (1 - sigma) * clean, keep = f32(1 - sigma).
float noise_scaled(float sigma, float keep, float noise, float clean) {
  return fp::add(fp::mul(sigma, noise), fp::mul(keep, clean));
}

}  // namespace

void comfy_audio_model_input(const float* y, int64_t n, float carry, bool bf16_model,
                             float* x_net) {
  if (!bf16_model) {
    for (int64_t i = 0; i < n; ++i) x_net[i] = fp::mul(y[i], carry);
    return;
  }
  const float c = round_bf16(carry);
  for (int64_t i = 0; i < n; ++i) x_net[i] = round_bf16(fp::mul(round_bf16(y[i]), c));
}

void comfy_denoised(const float* x, const float* v, int64_t n, float sigma, float* denoised) {
  for (int64_t i = 0; i < n; ++i) denoised[i] = fp::sub(x[i], fp::mul(-v[i], sigma));
}

void comfy_denoised_carried(const SamplerPlan& plan, int step, const float* y, const float* x_net,
                            const float* v_net, int64_t n, bool bf16_model, float* denoised) {
  const SamplerStep& s = plan.steps.at(step);
  const double scale = plan.audio_scale;
  if (scale == 1.0) return comfy_denoised(y, v_net, n, s.sigma_video, denoised);
  const float keep = static_cast<float>(1.0 - scale);
  const float gain = fp::add(1.0f, fp::mul(static_cast<float>(scale - 1.0), s.sigma_audio));
  for (int64_t i = 0; i < n; ++i) {
    float a = fp::mul(keep, x_net[i]);
    if (bf16_model) a = round_bf16(a);
    const float out = fp::add(a, fp::mul(gain, -v_net[i]));
    denoised[i] = fp::sub(y[i], fp::mul(out, s.sigma_video));
  }
}

void comfy_sampler_step(const SamplerPlan& p, int step, ComfyState& st, float* video,
                        const float* vden, int64_t vn, float* audio, const float* aden, int64_t an,
                        uint64_t noise_seed) {
  H3RT_CHECK(p.scheduler == Scheduler::simple, "comfy_sampler_step needs a simple-schedule plan");
  H3RT_CHECK(step >= 0 && step < static_cast<int>(p.steps.size()), "comfy_sampler_step: step ",
             step, " outside [0, ", p.steps.size(), ")");
  const SamplerStep& s = p.steps[step];
  const float sigma = s.sigma_video, sigma_down = s.sigma_video_next;  // eta 0: sigma_down = next
  switch (p.sampler) {
    case SamplerKind::euler_ancestral:
      return step_ancestral(p, step, video, vden, vn, audio, aden, an, noise_seed);
    case SamplerKind::euler:
      euler_update(video, vden, vn, sigma, fp::sub(sigma_down, sigma));
      euler_update(audio, aden, an, sigma, fp::sub(sigma_down, sigma));
      return;
    case SamplerKind::res_multistep:
      if (sigma_down == 0.0f || !st.has_old) {
        euler_update(video, vden, vn, sigma, fp::sub(sigma_down, sigma));
        euler_update(audio, aden, an, sigma, fp::sub(sigma_down, sigma));
      } else {
        const ResCoefficients c =
            res_coefficients(p.video_sigmas[step - 1], sigma, st.old_sigma_down, sigma_down);
        res_update(video, vden, st.old_video.data(), vn, c);
        res_update(audio, aden, st.old_audio.data(), an, c);
      }
      // (eta 0: ComfyUI adds noise * 0, which changes no value)
      copy_into(st.old_video, vden, vn);
      copy_into(st.old_audio, aden, an);
      st.has_old = true;
      st.old_sigma_down = sigma_down;
      return;
  }
}

void ancestral_noise(uint64_t seed, int step, bool audio, float* out, int64_t n) {
  gaussian_noise(seed, audio ? 4 : 3, static_cast<int64_t>(step) * n, out, n);
}

void comfy_initial_latent(float sigma0, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = fp::mul(sigma0, x[i]);
}

void comfy_noise_scaling(float sigma, const float* noise, const float* clean, int64_t n,
                         float* out) {
  const float keep = fp::sub(1.0f, sigma);
  for (int64_t i = 0; i < n; ++i) out[i] = noise_scaled(sigma, keep, noise[i], clean[i]);
}

void comfy_inpaint_input(const float* x, const float* mask, const float* noise, const float* clean,
                         int64_t n, float sigma, float* x_in) {
  const float keep = fp::sub(1.0f, sigma);
  for (int64_t i = 0; i < n; ++i) {
    const float noised = noise_scaled(sigma, keep, noise[i], clean[i]);
    x_in[i] = fp::add(fp::mul(x[i], mask[i]), fp::mul(noised, fp::sub(1.0f, mask[i])));
  }
}

void comfy_inpaint_denoised(float* den, const float* mask, const float* clean, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    den[i] = fp::add(fp::mul(den[i], mask[i]), fp::mul(clean[i], fp::sub(1.0f, mask[i])));
}

void comfy_uncarry_audio(double audio_scale, float* y, int64_t n) {
  const float inv = static_cast<float>(1.0 / audio_scale);
  for (int64_t i = 0; i < n; ++i) y[i] = fp::mul(y[i], inv);
}

}  // namespace h3rt
