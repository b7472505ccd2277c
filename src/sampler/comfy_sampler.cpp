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
#include "sampler/update_scalars.h"

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

// res_multistep's second-order step: x = exp(-h) x + h (b1 denoised + b2 old_denoised).
update::ComfyUpdate res_scalars(float sigma_prev, float sigma, float old_sigma_down,
                                float sigma_down) {
  const float t = -log_f32(sigma), t_old = -log_f32(old_sigma_down);
  const float t_next = -log_f32(sigma_down), t_prev = -log_f32(sigma_prev);
  const float h = fp::sub(t_next, t);
  const float c2 = fp::div(fp::sub(t_prev, t_old), h);
  const float mh = -h;
  const float phi1 = fp::div(expm1_f32(mh), mh);
  const float phi2 = fp::div(fp::sub(phi1, 1.0f), mh);
  update::ComfyUpdate u;
  u.kind = update::ComfyKind::res;
  u.decay = exp_f32(mh);
  u.h = h;
  u.b1 = nan_to_num(fp::sub(phi1, fp::div(phi2, c2)));
  u.b2 = nan_to_num(fp::div(phi2, c2));
  return u;
}

// sample_euler_ancestral_RF with eta = 1 and s_noise = 1.
update::ComfyUpdate ancestral_scalars(float sigma, float sigma_next) {
  const float eta = 1.0f;
  const float downstep = fp::add(1.0f, fp::mul(fp::sub(fp::div(sigma_next, sigma), 1.0f), eta));
  const float sigma_down = fp::mul(sigma_next, downstep);
  const float alpha_next = fp::sub(1.0f, sigma_next), alpha_down = fp::sub(1.0f, sigma_down);
  const float down_term =
      fp::div(fp::mul(fp::mul(sigma_down, sigma_down), fp::mul(alpha_next, alpha_next)),
              fp::mul(alpha_down, alpha_down));
  update::ComfyUpdate u;
  u.kind = update::ComfyKind::ancestral;
  u.ratio = fp::div(sigma_down, sigma);
  u.keep = fp::sub(1.0f, u.ratio);
  u.rescale = fp::div(alpha_next, alpha_down);
  u.renoise = fp::sqrt(fp::sub(fp::mul(sigma_next, sigma_next), down_term));
  return u;
}

void check_simple_step(const SamplerPlan& p, int step) {
  H3RT_CHECK(p.scheduler == Scheduler::simple, "comfy_sampler_step needs a simple-schedule plan");
  H3RT_CHECK(step >= 0 && step < static_cast<int>(p.steps.size()), "comfy_sampler_step: step ",
             step, " outside [0, ", p.steps.size(), ")");
}

// One stream's update on the host: den its denoised, old the previous one (res), noise the
// step's noise (ancestral).
void apply_update(float* x, const float* den, const float* old, const float* noise, int64_t n,
                  const update::ComfyUpdate& u) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = update::comfy_update(x[i], den[i], old ? old[i] : 0.0f, noise ? noise[i] : 0.0f, u);
}

void apply_denoised(const float* x, const float* v, const float* x_net, int64_t n,
                    const update::Denoised& d, float* den) {
  for (int64_t i = 0; i < n; ++i) den[i] = update::denoised(x[i], v[i], x_net ? x_net[i] : 0.f, d);
}

// CONST.noise_scaling of one element: sigma * noise + (1 - sigma) * clean, keep = f32(1 - sigma).
float noise_scaled(float sigma, float keep, float noise, float clean) {
  return fp::add(fp::mul(sigma, noise), fp::mul(keep, clean));
}

}  // namespace

update::Denoised update::video_denoised_scalars(const SamplerPlan& plan, int step) {
  Denoised d;
  d.sigma = plan.steps.at(step).sigma_video;
  return d;
}

update::Denoised update::audio_denoised_scalars(const SamplerPlan& plan, int step,
                                                bool bf16_model) {
  Denoised d = video_denoised_scalars(plan, step);
  const double scale = plan.audio_scale;
  if (scale == 1.0) return d;
  d.carried = true;
  d.bf16_model = bf16_model;
  d.keep = static_cast<float>(1.0 - scale);
  d.gain = fp::add(1.0f, fp::mul(static_cast<float>(scale - 1.0), plan.steps[step].sigma_audio));
  return d;
}

update::ComfyUpdate update::comfy_update_scalars(const SamplerPlan& p, int step,
                                                 const ComfyState& st) {
  check_simple_step(p, step);
  const SamplerStep& s = p.steps[step];
  const float sigma = s.sigma_video, sigma_down = s.sigma_video_next;  // eta 0: sigma_down = next
  ComfyUpdate u;
  if (p.sampler == SamplerKind::euler_ancestral) {
    if (sigma_down == 0.0f) {  // x = denoised
      u.kind = ComfyKind::to_denoised;
      return u;
    }
    return ancestral_scalars(sigma, sigma_down);
  }
  const bool second_order =
      p.sampler == SamplerKind::res_multistep && sigma_down != 0.0f && st.has_old;
  if (second_order) u = res_scalars(p.video_sigmas[step - 1], sigma, st.old_sigma_down, sigma_down);
  u.sigma = sigma;
  u.dt = fp::sub(sigma_down, sigma);
  // (res_multistep, eta 0: ComfyUI adds noise * 0, which changes no value)
  u.store_old = p.sampler == SamplerKind::res_multistep;
  return u;
}

void update::advance_comfy_state(const SamplerPlan& p, int step, ComfyState& st) {
  if (p.sampler != SamplerKind::res_multistep) return;
  st.has_old = true;
  st.old_sigma_down = p.steps.at(step).sigma_video_next;
}

void comfy_audio_model_input(const float* y, int64_t n, float carry, bool bf16_model,
                             float* x_net) {
  for (int64_t i = 0; i < n; ++i) x_net[i] = update::audio_model_input(y[i], carry, bf16_model);
}

void comfy_denoised(const float* x, const float* v, int64_t n, float sigma, float* denoised) {
  update::Denoised d;
  d.sigma = sigma;
  apply_denoised(x, v, nullptr, n, d, denoised);
}

void comfy_denoised_carried(const SamplerPlan& plan, int step, const float* y, const float* x_net,
                            const float* v_net, int64_t n, bool bf16_model, float* denoised) {
  apply_denoised(y, v_net, x_net, n, update::audio_denoised_scalars(plan, step, bf16_model),
                 denoised);
}

void comfy_sampler_step(const SamplerPlan& p, int step, ComfyState& st, float* video,
                        const float* vden, int64_t vn, float* audio, const float* aden, int64_t an,
                        uint64_t noise_seed) {
  const update::ComfyUpdate u = update::comfy_update_scalars(p, step, st);
  const bool res = u.kind == update::ComfyKind::res;
  const bool noisy = u.kind == update::ComfyKind::ancestral;
  FloatVec noise(noisy ? static_cast<size_t>(std::max(vn, an)) : 0);
  const float* n = noisy ? noise.data() : nullptr;
  if (noisy) ancestral_noise(noise_seed, step, false, noise.data(), vn);
  apply_update(video, vden, res ? st.old_video.data() : nullptr, n, vn, u);
  if (noisy) ancestral_noise(noise_seed, step, true, noise.data(), an);
  apply_update(audio, aden, res ? st.old_audio.data() : nullptr, n, an, u);
  if (u.store_old) {
    st.old_video.assign(vden, vden + vn);
    st.old_audio.assign(aden, aden + an);
  }
  update::advance_comfy_state(p, step, st);
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
