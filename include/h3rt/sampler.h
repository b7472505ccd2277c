// The rectified-flow sampler of MiniMax H3 (eta = 0 Euler), its sigma grids and per-step
// timestep plans, and the seeded starting noise. Everything here is float32 with one rounding
// per operation, reproducing the reference scheduler bit for bit (golden README section 8).
#pragma once

#include <cstdint>
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
// rounded to float32 at the end.
float audio_sigma_from_video(float sigma_video, float video_shift = kVideoShift,
                             float audio_shift = kAudioShift);

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

// The whole trajectory for `num_points` grid points (num_points - 1 steps). The video and audio
// grids must have the same length after duplicate removal; make_sampler_plan throws otherwise.
struct SamplerPlan {
  std::vector<float> video_sigmas, audio_sigmas;        // [steps + 1], ending in 0
  std::vector<float> video_timesteps, audio_timesteps;  // [steps]
  std::vector<SamplerStep> steps;
  float video_shift = kVideoShift, audio_shift = kAudioShift;
};
SamplerPlan make_sampler_plan(const SequenceLayout& layout, int num_points,
                              float video_shift = kVideoShift, float audio_shift = kAudioShift);

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
