// ComfyUI's conditioning payload from Python (keyframes, references, text tags, denoise masks,
// noise augmentation) as h3rt::Conditioning, with errors naming the argument and the item.
#pragma once

#include <optional>

#include "arrays.h"
#include "h3rt/conditioning.h"
#include "h3rt/model.h"

namespace h3rt::py {

struct ConditioningArgs {
  nb::list keyframes, refs;  // dicts, see __init__.pyi (Model.forward_conditioned)
  std::optional<AnyArray> text_tags, video_mask, audio_mask;
  double visual_cond_noise_aug = kVisualCondTimestep, audio_cond_noise_aug = kAudioCondTimestep;
  uint64_t noise_seed = 0;
};

// text_len: the request's text tokens (text_tags must have as many). `cuda_model` only selects
// the error for device arrays (host_f32).
Conditioning conditioning_of(const H3Config& c, const ConditioningArgs& a, int64_t text_len,
                             bool cuda_model);

// [d0][d1][n] -> [d1][d0][n]: ComfyUI's audio latent [1, C, 2, N] <-> h3rt's [2, C, N].
FloatVec swap_leading_axes(const FloatVec& a, int64_t d0, int64_t d1, int64_t n);
// ComfyUI's audio latent [1, C, 2, N] <-> h3rt's rows [2N, C] (row ch*N + j).
FloatVec comfy_audio_to_rows(const FloatVec& a, int64_t C, int64_t N);
FloatVec rows_to_comfy_audio(const FloatVec& rows, int64_t C, int64_t N);

}  // namespace h3rt::py
