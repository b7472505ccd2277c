// ComfyUI's "simple" schedule over ModelSamplingAV's table, and what ComfyUI's MiniMaxH3 model
// derives from a sampler sigma (timestep, t_video / t_audio, the audio carry). Float32 with one
// rounding per op as torch computes them on the CPU; the float64 parts as Python computes them.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF  // GCC ignores it; fp:: helpers guard there
#endif

#include <algorithm>
#include <cmath>

#include "h3rt/check.h"
#include "h3rt/sampler.h"
#include "sampler/fp_exact.h"

namespace h3rt {
namespace {

constexpr int kTableSize = 1000;  // ModelSamplingDiscreteFlow: timesteps = multiplier = 1000

// Python float arithmetic, kept out of FMA contraction.
double mul64(double a, double b) {
  volatile double p = a * b;
  return p;
}

// comfy.ldm.minimax.model.time_shift_sigma on a Python float.
double time_shift_f64(double sigma, double from, double to) {
  const double base = sigma / (from + mul64(sigma, 1.0 - from));
  return mul64(to, base) / (1.0 + mul64(to - 1.0, base));
}

// The same on a float32 tensor: each Python scalar rounds to float32 at its op.
float time_shift_f32(float sigma, double from, double to) {
  const float den =
      fp::add(static_cast<float>(from), fp::mul(sigma, static_cast<float>(1.0 - from)));
  const float base = fp::div(sigma, den);
  return fp::div(fp::mul(static_cast<float>(to), base),
                 fp::add(1.0f, fp::mul(static_cast<float>(to - 1.0), base)));
}

}  // namespace

SamplerKind parse_sampler(const std::string& s, const char* what) {
  if (s == "euler") return SamplerKind::euler;
  if (s == "res_multistep") return SamplerKind::res_multistep;
  H3RT_CHECK(s == "euler_ancestral", what,
             " must be euler, res_multistep or euler_ancestral, got '", s, "'");
  return SamplerKind::euler_ancestral;
}

Scheduler parse_scheduler(const std::string& s, const char* what) {
  if (s == "diffusers") return Scheduler::diffusers;
  H3RT_CHECK(s == "simple", what, " must be diffusers or simple, got '", s, "'");
  return Scheduler::simple;
}

const char* sampler_name(SamplerKind k) {
  switch (k) {
    case SamplerKind::euler:
      return "euler";
    case SamplerKind::res_multistep:
      return "res_multistep";
    case SamplerKind::euler_ancestral:
      return "euler_ancestral";
  }
  return "?";
}

const char* scheduler_name(Scheduler s) {
  return s == Scheduler::simple ? "simple" : "diffusers";
}

std::vector<float> flow_sigma_table(double shift) {
  H3RT_CHECK(std::isfinite(shift) && shift > 0, "sigma shift must be a finite number > 0, got ",
             shift);
  std::vector<float> table(kTableSize);
  const float n = static_cast<float>(kTableSize);
  for (int k = 1; k <= kTableSize; ++k) {
    // (arange(1, 1001) / 1000) * 1000, then sigma(): timestep / 1000
    const float t = fp::div(fp::mul(fp::div(static_cast<float>(k), n), n), n);
    table[k - 1] = shift == 1.0
                       ? t
                       : fp::div(fp::mul(static_cast<float>(shift), t),
                                 fp::add(1.0f, fp::mul(static_cast<float>(shift - 1.0), t)));
  }
  return table;
}

std::vector<float> simple_sigmas(int steps, double shift) {
  H3RT_CHECK(steps >= 1 && steps <= kTableSize, "steps must be in [1, ", kTableSize, "], got ",
             steps);
  const std::vector<float> table = flow_sigma_table(shift);
  const double ss = static_cast<double>(kTableSize) / steps;  // len(sigmas) / steps
  std::vector<float> sigmas;
  for (int x = 0; x < steps; ++x)
    sigmas.push_back(table[kTableSize - 1 - static_cast<int>(mul64(x, ss))]);
  sigmas.push_back(0.0f);
  return sigmas;
}

ComfyModelTimes comfy_model_times(float sigma, double shift_video, double shift_audio) {
  ComfyModelTimes m;
  m.timestep = fp::mul(sigma, 1000.0f);
  m.sigma_model = std::max(fp::div(m.timestep, 1000.0f), static_cast<float>(1e-6));
  m.t_video = fp::sub(1.0f, m.sigma_model);
  m.t_audio = static_cast<float>(1.0 - time_shift_f64(m.sigma_model, shift_video, shift_audio));
  m.sigma_audio = time_shift_f32(m.sigma_model, shift_video, shift_audio);
  m.carry = fp::div(m.sigma_audio, m.sigma_model);
  return m;
}

SamplerPlan make_comfy_plan(const SequenceLayout& layout, SamplerKind sampler, int steps,
                            double shift_video, double shift_audio) {
  H3RT_CHECK(std::isfinite(shift_audio) && shift_audio > 0,
             "audio sigma shift must be a finite number > 0, got ", shift_audio);
  SamplerPlan p;
  p.sampler = sampler;
  p.scheduler = Scheduler::simple;
  p.shift_video_f64 = shift_video;
  p.shift_audio_f64 = shift_audio;
  p.video_shift = static_cast<float>(shift_video);
  p.audio_shift = static_cast<float>(shift_audio);
  p.audio_scale = shift_video / shift_audio;  // ModelSamplingAV.audio_scale
  p.video_sigmas = simple_sigmas(steps, shift_video);
  for (int i = 0; i < steps; ++i) {
    const ComfyModelTimes m = comfy_model_times(p.video_sigmas[i], shift_video, shift_audio);
    SamplerStep s;
    s.t_video = m.t_video;
    s.t_audio = m.t_audio;
    s.sigma_video = p.video_sigmas[i];
    s.sigma_video_next = p.video_sigmas[i + 1];
    s.sigma_audio = m.sigma_audio;
    s.plan = make_timestep_plan(layout, m.t_video, m.t_audio);
    p.video_timesteps.push_back(m.t_video);
    p.audio_timesteps.push_back(m.t_audio);
    p.audio_sigmas.push_back(m.sigma_audio);
    p.audio_carry.push_back(p.audio_scale != 1.0 ? m.carry : 1.0f);
    p.steps.push_back(std::move(s));
  }
  p.audio_sigmas.push_back(0.0f);
  for (int i = 0; i + 1 < steps; ++i) p.steps[i].sigma_audio_next = p.steps[i + 1].sigma_audio;
  return p;
}

}  // namespace h3rt
