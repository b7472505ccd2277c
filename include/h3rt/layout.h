// The packed t2va sequence [text | audio | video] of one request (batch 1): row indices,
// modality tags, rotary positions, per-row timesteps, and video patchify/unpatchify.
#pragma once

#include <cstdint>
#include <vector>

#include "h3rt/memory.h"

namespace h3rt {

enum ModalityTag : int32_t { kTagVideo = 0, kTagText = 1, kTagAudio = 2 };

struct SequenceLayout {
  int64_t text_len = 0;   // L
  int64_t audio_len = 0;  // N latents per stereo channel (2N audio rows)
  int64_t frames = 0;     // latent T
  int64_t height = 0;     // latent Hl (even)
  int64_t width = 0;      // latent Wl (even)

  std::vector<int64_t> text_indices, audio_indices, video_indices;
  std::vector<int32_t> token_tags;   // [S]
  std::vector<double> position_ids;  // [S, 3] row-major (t, h, w), float64 as the reference

  int64_t audio_rows() const { return 2 * audio_len; }
  int64_t video_rows() const { return frames * (height / 2) * (width / 2); }
  int64_t seq_len() const { return text_len + audio_rows() + video_rows(); }
};

// Builds indices, tags and positions exactly as the reference pipeline (README section 3-4).
SequenceLayout make_t2va_layout(int64_t text_len, int64_t audio_len, int64_t frames, int64_t height,
                                int64_t width);

// Per-row timesteps: `timestep` holds the distinct values sorted ascending, and
// `timestep_indices[r]` each row's index into it (text and video rows: t_video, audio: t_audio).
struct TimestepPlan {
  std::vector<float> timestep;
  std::vector<int64_t> timestep_indices;  // [S]
};
TimestepPlan make_timestep_plan(const SequenceLayout& layout, float t_video, float t_audio);

// AdaLN table row per packed row: timestep_indices[r] * 3 + token_tags[r].
std::vector<int64_t> adaln_indices(const SequenceLayout& layout, const TimestepPlan& plan);

// Video latent [24, T, Hl, Wl] <-> rows [T*(Hl/2)*(Wl/2), 96] (patch (1,2,2), channel-major).
FloatVec patchify_video(const float* latents, int64_t channels, int64_t frames, int64_t height,
                        int64_t width);
FloatVec unpatchify_video(const float* rows, int64_t channels, int64_t frames, int64_t height,
                          int64_t width);

// Audio latent [2, 32, N] <-> rows [2N, 32] (row ch*N + j holds the 32 channels of step j).
FloatVec audio_latents_to_rows(const float* latents, int64_t channels, int64_t len);
FloatVec audio_rows_to_latents(const float* rows, int64_t channels, int64_t len);

}  // namespace h3rt
