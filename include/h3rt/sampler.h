// The rectified-flow sampler of MiniMax H3 (eta = 0 Euler), its sigma grids and per-step
// timestep plans, and the seeded starting noise. Everything here is float32 with one rounding
// per operation, reproducing the reference scheduler bit for bit (golden README section 8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "h3rt/layout.h"
#include "h3rt/memory.h"
#include "h3rt/model.h"

namespace h3rt {

constexpr float kVideoShift = 12.0f;
constexpr float kAudioShift = 3.0f;

// torch's float32 linspace(1, 0, n): step = float32(-1/(n-1)); b_i = fma(step, i, 1) for
// i < n/2 and fma(-step, n-1-i, 0) otherwise. n >= 2.
std::vector<float> base_grid(int num_points);

// The shifted sigma grid for `num_points` grid points including the terminal 0 (diffusers'
// num_inference_steps; num_points - 1 model evaluations): sigma = (s*b) / (1 + (s-1)*b) in
// float32, consecutive duplicates dropped.
std::vector<float> sigma_grid(int num_points, float shift);

// t_i = 1 - sigma_i (float32) for every grid point but the terminal one.
std::vector<float> timesteps_from_sigmas(const std::vector<float>& sigmas);

// Audio sigma paired with a video sigma for a single forward: the video shift is inverted in
// float64, b = sv / (s_v - (s_v - 1) sv), and the audio shift applied, s_a b / (1 + (s_a - 1) b),
// rounded to float32 at the end. The shifts are taken as given (float64: ComfyUI's Python floats).
float audio_sigma_from_video(float sigma_video, double video_shift = kVideoShift,
                             double audio_shift = kAudioShift);

// One Euler step of n values in place, with t the step's timestep and sigma, sigma_next the
// grid values around it: x0 = x + (1 - t) v, where (1 - t) is recomputed in float32 from t;
// r = sigma_next / sigma; x = r x + (1 - r) x0; each op rounded separately, no FMA. When
// sigma_next == 0 (the last step) x = x0.
void euler_step(float* x, const float* v, int64_t n, float t, float sigma, float sigma_next);

// What one model evaluation needs: the modalities' timesteps and sigmas and the per-row plan
// (text rows follow video).
struct SamplerStep {
  float t_video = 0, t_audio = 0;
  float sigma_video = 0, sigma_video_next = 0;
  float sigma_audio = 0, sigma_audio_next = 0;
  TimestepPlan plan;
};

// Which update runs over which sigma grid. `diffusers` is the reference stack's scheduler
// (MiniMaxH3Scheduler: each stream Euler on its own shifted linspace grid, sigma_grid); its only
// sampler is euler. `simple` is ComfyUI's "simple" scheduler over ModelSamplingAV's table at
// the video shift, with ComfyUI's loop: one video schedule for the packed latent, the audio
// carried on it (comfy_model_times), ComfyUI's sampler formulas (comfy_sampler.cpp).
enum class SamplerKind { euler, res_multistep, euler_ancestral };
enum class Scheduler { diffusers, simple };
SamplerKind parse_sampler(const std::string& s, const char* what = "sampler");
Scheduler parse_scheduler(const std::string& s, const char* what = "scheduler");
const char* sampler_name(SamplerKind k);
const char* scheduler_name(Scheduler s);

// The whole trajectory for `num_points` grid points (num_points - 1 steps). The video and audio
// grids must have the same length after duplicate removal; make_sampler_plan throws otherwise.
struct SamplerPlan {
  std::vector<float> video_sigmas, audio_sigmas;        // [steps + 1], ending in 0
  std::vector<float> video_timesteps, audio_timesteps;  // [steps]
  std::vector<SamplerStep> steps;
  float video_shift = kVideoShift, audio_shift = kAudioShift;
  SamplerKind sampler = SamplerKind::euler;
  Scheduler scheduler = Scheduler::diffusers;
  // simple: ComfyUI's carried-audio scale shift_video / shift_audio (ModelSamplingAV), the
  // per-step carry factors and the shifts as ComfyUI holds them (Python floats).
  double audio_scale = 1.0, shift_video_f64 = kVideoShift, shift_audio_f64 = kAudioShift;
  std::vector<float> audio_carry;  // [steps]: sigma_audio / sigma_model of each evaluation
};
SamplerPlan make_sampler_plan(const SequenceLayout& layout, int num_points,
                              float video_shift = kVideoShift, float audio_shift = kAudioShift);

// ---- ComfyUI's schedule and model-side times (comfy_schedule.cpp) ----------------------
// ModelSamplingDiscreteFlow's table as torch computes it on the CPU, float32 ops on Python
// scalars: t_k = f32(f32(f32(k / 1000) * 1000) / 1000) for k = 1..1000, sigma_k =
// f32(f32(s) t_k) / f32(1 + f32(f32(s - 1) t_k)) (t_k itself when s == 1; s - 1 in float64).
std::vector<float> flow_sigma_table(double shift);
// ComfyUI's "simple" scheduler: table[999 - int(x * (1000 / steps))] for x < steps (float64
// index arithmetic), then 0. steps in [1, 1000].
std::vector<float> simple_sigmas(int steps, double shift);

// What ComfyUI's MiniMaxH3 model derives from the sampler's sigma for one evaluation:
// timestep = f32(sigma * 1000) (model_sampling.timestep); sigma_model = max(f32(timestep /
// 1000), f32(1e-6)); t_video = f32(1 - sigma_model); t_audio = f32(1 - time_shift_sigma) with
// time_shift_sigma in float64 (_forward); sigma_audio = time_shift_sigma in float32 tensor ops
// and carry = f32(sigma_audio / sigma_model) (forward()'s audio carry). The CPU rule: ComfyUI on
// CUDA divides the timestep by 1000 as a multiply by f32(1/1000), which can move sigma_model by
// one ulp.
struct ComfyModelTimes {
  float timestep = 0, sigma_model = 0, t_video = 0, t_audio = 0, sigma_audio = 0, carry = 1;
};
ComfyModelTimes comfy_model_times(float sigma, double shift_video, double shift_audio);

// ComfyUI's trajectory: simple_sigmas at the video shift, per-step times from comfy_model_times
// (the plans use t_video / t_audio), the carry when shift_video != shift_audio.
SamplerPlan make_comfy_plan(const SequenceLayout& layout, SamplerKind sampler, int steps,
                            double shift_video = kVideoShift, double shift_audio = kAudioShift);

// ---- ComfyUI's sampler updates (comfy_sampler.cpp) -------------------------------------
// What a multistep sampler carries between steps (res_multistep's previous denoised), per stream.
struct ComfyState {
  bool has_old = false;
  float old_sigma_down = 0;
  FloatVec old_video, old_audio;
};

// The model input of the carried audio: x_net = f32(y * carry); with bf16_model (ComfyUI casts
// the latent to the model dtype) y and carry are rounded to bf16 first and x_net to bf16 after.
void comfy_audio_model_input(const float* y, int64_t n, float carry, bool bf16_model, float* x_net);

// denoised = f32(x - f32(out * sigma)) with ComfyUI's model output out = -v (h3rt's velocities
// are data-ward). For the carried audio out is forward()'s conversion first: out = f32(f32(
// f32(1 - s) x_net) + f32(f32(1 + f32(f32(s - 1) sigma_audio)) * out_net)) (s = audio_scale;
// with bf16_model the first product is rounded to bf16, as ComfyUI's bf16 tensor gives it).
void comfy_denoised(const float* x, const float* v, int64_t n, float sigma, float* denoised);
void comfy_denoised_carried(const SamplerPlan& plan, int step, const float* y, const float* x_net,
                            const float* v_net, int64_t n, bool bf16_model, float* denoised);

// Applies step i of a simple plan to both streams (video rows and carried audio rows) in place
// given their denoised values: sample_euler, res_multistep (eta 0) or sample_euler_ancestral_RF
// (eta 1; its noise is h3rt's seeded noise, ancestral_noise) with torch's float32 op order.
// res_multistep's log/exp/expm1 scalars are correctly rounded float32 (computed in float64);
// torch uses SLEEF (CPU) or CUDA libm (<= 1 ulp), so a coefficient can differ by one ulp there.
void comfy_sampler_step(const SamplerPlan& plan, int step, ComfyState& state, float* video,
                        const float* video_denoised, int64_t video_n, float* audio,
                        const float* audio_denoised, int64_t audio_n, uint64_t noise_seed);

// euler_ancestral's noise of step i: streams 3 (video rows) and 4 (audio rows) of the seeded
// generator at offset i * n.
void ancestral_noise(uint64_t seed, int step, bool audio, float* out, int64_t n);

// The first latent: f32(sigma_0 * noise) (ComfyUI's noise_scaling on an empty latent; exact
// when sigma_0 = 1, which the simple schedule starts at for integer shifts).
void comfy_initial_latent(float sigma0, float* x, int64_t n);
// ComfyUI's noise_scaling (CONST, noise_scale 1) with a latent image: f32(f32(sigma * noise) +
// f32(f32(1 - sigma) * clean)), the first latent of a run with a clean latent to keep.
void comfy_noise_scaling(float sigma, const float* noise, const float* clean, int64_t n,
                         float* out);
// KSamplerX0Inpaint around one model call, per element with the denoise mask m (1 = generate,
// 0 = keep the clean latent): the model sees x_in = f32(f32(x * m) + f32(noise_scaling(sigma,
// noise, clean) * f32(1 - m))) in place of the sampler's x (comfy_inpaint_input), and its denoised
// becomes f32(f32(denoised * m) + f32(clean * f32(1 - m))) (comfy_inpaint_denoised, in place).
// `clean` is in the sampler's space (the carried audio: the clean audio times audio_scale).
void comfy_inpaint_input(const float* x, const float* mask, const float* noise, const float* clean,
                         int64_t n, float sigma, float* x_in);
void comfy_inpaint_denoised(float* denoised, const float* mask, const float* clean, int64_t n);
// The sampler's carried audio at the end back to the stream's latent: f32(y * f32(1 / s)).
void comfy_uncarry_audio(double audio_scale, float* y, int64_t n);

// The schedule around step i as ComfyUI hands it to the model (sigma = the step's video sigma,
// sample_sigmas = the whole video grid): what a PDD head bank picks its heads from.
SigmaSchedule sigma_schedule(const SamplerPlan& plan, int step);

// Applies step i of `plan` to the video rows [Nv, 96] and audio rows [2N, 32] in place.
void sampler_step(const SamplerPlan& plan, int step, float* video_rows, const float* video_v,
                  int64_t video_n, float* audio_rows, const float* audio_v, int64_t audio_n);

// Seeded standard normal values: out[k] = value (offset + k) of the (seed, stream) sequence.
// The generator (Philox4x32-10 + Box-Muller with fixed float32 log/sin/cos) is a documented,
// platform-independent contract: see src/sampler/noise.h. CPU and CUDA give identical bits.
void gaussian_noise(uint64_t seed, uint64_t stream, int64_t offset, float* out, int64_t n);

constexpr uint64_t kVideoNoiseStream = 0;
constexpr uint64_t kAudioNoiseStream = 1;

// Starting latents of a request: video noise drawn as the [1, 24, T, Hl, Wl] latent (stream 0)
// and patchified to rows [Nv, 96]; audio noise drawn directly as rows [2N, 32] (stream 1).
struct InitialNoise {
  FloatVec video_rows, audio_rows;
};
InitialNoise initial_noise(uint64_t seed, const SequenceLayout& layout, int64_t video_channels = 24,
                           int64_t audio_channels = 32);

}  // namespace h3rt
