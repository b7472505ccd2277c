// Run reports: JSON shaped like the reference stack's measurements (stage names packing,
// denoiser, output_transform, sampler_update; checksums of the final latents; peak memory).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "h3rt/layout.h"

namespace h3rt {

struct StageSeconds {
  double packing = 0, denoiser = 0, output_transform = 0, sampler_update = 0;
  double step_total() const { return packing + denoiser + output_transform + sampler_update; }
};

struct Checksum {
  double sum = 0;      // sum of the values (float64 accumulation)
  double abs_sum = 0;  // sum of |values|
};
Checksum checksum(const float* values, int64_t n);

struct SampleReport {
  std::string device;
  std::string model;  // preset name or checkpoint path
  std::string precision;
  int64_t width = 0, height = 0, frames = 0;  // pixels and video frames
  int64_t latent_frames = 0, latent_height = 0, latent_width = 0, audio_latents = 0;
  int64_t text_tokens = 0, audio_rows = 0, video_rows = 0, packed_tokens = 0;
  uint64_t seed = 0;
  int steps = 0;                     // model evaluations
  std::vector<StageSeconds> stages;  // one per step
  double total_seconds = 0;
  int64_t peak_host_bytes = 0;
  int64_t peak_device_allocated_bytes = 0, peak_device_reserved_bytes = 0;
  Checksum video, audio;

  // The latent shape, token counts and packed rows of a request's layout.
  void set_layout(const SequenceLayout& layout);
};

nlohmann::json to_json(const SampleReport& r);
void write_json(const std::string& path, const nlohmann::json& j);  // atomic; "-" = stdout

}  // namespace h3rt
