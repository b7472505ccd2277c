// Conditioning of a request, with ComfyUI's semantics (comfy/ldm/minimax/model.py, MiniMaxH3Model):
// keyframe and reference latents (layout: h3rt/layout.h make_layout), their noise augmentation,
// per-row timesteps (condition rows pinned near 1, denoise masks), the masked outputs and the
// sampler's audio carry. ../shared/golden/h3_tiny_comfy/README.md states each rule; the CPU tests
// reproduce its 14 cases.
#pragma once

#include <cstdint>
#include <vector>

#include "h3rt/layout.h"
#include "h3rt/memory.h"

namespace h3rt {

// ComfyUI's VISUAL_COND_TIMESTEP and AUDIO_COND_TIMESTEP: the default condition noise
// augmentation, and the pins of masked rows.
constexpr double kVisualCondTimestep = 0.999;
constexpr double kAudioCondTimestep = 1.0;

// sigma' = t b / (1 + (t - 1) b) with b = sigma / (f + sigma (1 - f)): float64, ComfyUI's
// time_shift_sigma (from shift f to shift t).
double time_shift_sigma(double sigma, double from_shift, double to_shift);

// The timesteps of one evaluation: sigma_video scales video mask rows, t_* label the rows.
struct EvalTimes {
  double sigma_video = 1.0;
  double t_video = 0.0, t_audio = 0.0;
};
// As MiniMaxH3Model._forward derives them from the sampler's video sigma: the timestep argument
// float32(sigma) * 1000 (float32), sigma_v = float32(timestep / 1000) clamped at 1e-6, then in
// float64 t_v = 1 - sigma_v and t_a = 1 - time_shift_sigma(sigma_v, shift_video, shift_audio).
EvalTimes comfy_eval_times(float sigma, double shift_video = 12.0, double shift_audio = 3.0);

// Condition noise augmentation (payload visual_cond_noise_aug / audio_cond_noise_aug). Condition
// rows also run at timestep max(t, aug): video-type max(t_v, video), audio-type max(t_a, audio).
struct ConditionAug {
  double video = kVisualCondTimestep;
  double audio = kAudioCondTimestep;
};

// Denoise mask values per target row (1 = generate, 0 = keep as given): video [Nv] per patch
// row, audio [2N] per audio row (ch * N + j). Empty: no per-row timesteps for that stream.
struct RowMasks {
  std::vector<float> video, audio;
};
// ComfyUI's mask_row_values: the max of a video mask [T, Hl, Wl] over each 2x2 patch, in row
// order; empty when every value is >= 0.999.
std::vector<float> video_mask_rows(const float* mask, int64_t frames, int64_t height,
                                   int64_t width);
// An audio mask [2, N] in row order; empty when every value is >= 0.999.
std::vector<float> audio_mask_rows(const float* mask, int64_t len);

// Per-row timesteps of a make_layout layout (ComfyUI _forward): text and video rows t_v, audio
// t_a, cond/ref_img max(t_v, aug.video), cond_audio/ref_audio max(t_a, aug.audio). Masked rows
// (float32): video min(1 - m * float32(sigma_video), float32(max(t_v, 0.999))), audio
// min(1 - m * float32(1 - t_a), float32(max(t_a, 1))); rows sharing one value relabel the whole
// segment. The table holds the sorted distinct float64 values of {t_v, t_a}, every present
// kind's t and the mask rows (`values`), cast to float32.
TimestepPlan make_conditioned_plan(const SequenceLayout& layout, const EvalTimes& times,
                                   const ConditionAug& aug = {}, const RowMasks& masks = {});

// MiniMaxH3Model.forward's output masking: video velocity rows [Nv, C*4] times the element of a
// mask [T, Hl, Wl] each feature came from; audio rows [2N, C] times their row's mask value.
void apply_video_mask(float* video_velocity, const float* mask, int64_t channels, int64_t frames,
                      int64_t height, int64_t width);
void apply_audio_mask(float* audio_velocity, const float* mask, int64_t channels, int64_t len);

// r = float32(aug) * r + float32(1 - aug) * noise over n values, each op rounded separately
// (torch's arithmetic); nothing when aug >= 1.
void augment_condition_rows(float* rows, const float* noise, int64_t n, double aug);

// The sampler's audio carry (ComfyUI ModelSamplingAV; payload audio_scale s): the sampler holds
// the audio as (sigma_a / sigma_v) * x. float32 tensor ops: sigma_v = float32(timestep / 1000)
// clamped at 1e-6, sigma_a = time_shift_sigma(sigma_v) in float32, carry = sigma_a / sigma_v.
struct AudioCarry {
  float scale = 1.0f, sigma_video = 1.0f, sigma_audio = 1.0f, carry = 1.0f;
};
AudioCarry audio_carry(float sigma, float scale, float shift_video = 12.0f,
                       float shift_audio = 3.0f);
// The network input x * carry (n values, in place).
void carry_audio_input(float* audio_rows, int64_t n, const AudioCarry& c);
// The carried variable's data-ward velocity from the network's (v_net, over x_net = x * carry):
// -((1 - s) x_net + (1 + (s - 1) sigma_a) (-v_net)), in place in v.
void carry_audio_output(float* v, const float* x_net, int64_t n, const AudioCarry& c);

// ---- condition latents -------------------------------------------------------------------
// A video latent [C, frames, height, width] (the batch axis dropped) or an audio latent [2, C,
// len].
struct VideoLatent {
  FloatVec data;
  int64_t frames = 0, height = 0, width = 0;
  bool empty() const { return frames == 0; }
};
struct AudioLatent {
  FloatVec data;
  int64_t len = 0;
  bool empty() const { return len == 0; }
};

// Noise for the augmentation in row layout ([rows, C*4] video, [2*len, C] audio), as ComfyUI draws
// it (torch.randn of the row shape); empty: h3rt draws it (Philox, seed Conditioning::noise_seed,
// stream kCondVideoNoiseStream / kCondAudioNoiseStream, restarted for every condition as ComfyUI
// restarts its generator; not torch's bits).
struct ConditionNoise {
  FloatVec video, audio;
};

struct KeyframeCond {
  int64_t frame_index = 0;  // pixel frame of the target (0: first, frames - 1: last)
  VideoLatent video;        // on the target's latent height x width; frames 1 for an image
  AudioLatent audio;
  ConditionNoise noise;
};

struct ReferenceCond {
  ReferenceKind kind = ReferenceKind::image;
  VideoLatent video;  // image: frames 1; audio: empty
  AudioLatent audio;  // video: the optional soundtrack; audio: required
  ConditionNoise noise;
};

constexpr uint64_t kCondVideoNoiseStream = 3;
constexpr uint64_t kCondAudioNoiseStream = 4;

struct Conditioning {
  std::vector<KeyframeCond> keyframes;
  std::vector<ReferenceCond> refs;
  std::vector<int32_t> text_tags;  // [L]: 1 text, 0 vision-block token; empty: all 1
  ConditionAug aug;
  uint64_t noise_seed = 0;
  FloatVec video_mask;  // [T, Hl, Wl] of the target; empty: no mask
  FloatVec audio_mask;  // [2, N]; empty: no mask
  // The clean latents the masks keep (ComfyUI's latent_image; sample() only): video [C, T, Hl,
  // Wl], audio [2, Ca, N]; empty: zeros, as ComfyUI's empty latent.
  FloatVec video_latent_image, audio_latent_image;
  bool empty() const {
    return keyframes.empty() && refs.empty() && text_tags.empty() && video_mask.empty() &&
           audio_mask.empty() && video_latent_image.empty() && audio_latent_image.empty();
  }
};

// The layout signature of a conditioned request with these target sizes; checks the latents'
// shapes against it (keyframes on the target grid, references with even sizes).
LayoutSpec layout_spec(const Conditioning& c, int64_t text_len, int64_t audio_len, int64_t frames,
                       int64_t height, int64_t width);

// Condition rows after augmentation, in packed order (keyframes, then references; video rows
// [Ncv, C*4], audio rows [Nca, Ca]): what ForwardInputs::cond_video_rows / cond_audio_rows take.
// Computed once per request: they do not change between steps.
struct ConditionRows {
  FloatVec video, audio;
};
ConditionRows condition_rows(const Conditioning& c, int64_t video_channels, int64_t audio_channels);

// Per-row mask values of c's masks for a layout (video_mask_rows, audio_mask_rows).
RowMasks row_masks(const Conditioning& c, const SequenceLayout& layout);

}  // namespace h3rt
