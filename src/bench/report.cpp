#include "h3rt/report.h"

#include <cmath>
#include <cstdio>
#include <iostream>

#include "h3rt/check.h"
#include "io/atomic_file.h"

namespace h3rt {

Checksum checksum(const float* values, int64_t n) {
  Checksum c;
  for (int64_t i = 0; i < n; ++i) {
    c.sum += values[i];
    c.abs_sum += std::fabs(static_cast<double>(values[i]));
  }
  return c;
}

namespace {

nlohmann::json stage_json(const StageSeconds& s) {
  return {{"packing", s.packing},
          {"denoiser", s.denoiser},
          {"output_transform", s.output_transform},
          {"sampler_update", s.sampler_update},
          {"step_total", s.step_total()}};
}

}  // namespace

void SampleReport::set_layout(const SequenceLayout& layout) {
  latent_frames = layout.frames;
  latent_height = layout.height;
  latent_width = layout.width;
  audio_latents = layout.audio_len;
  text_tokens = layout.text_len;
  audio_rows = layout.audio_rows();
  video_rows = layout.video_rows();
  packed_tokens = layout.seq_len();
}

nlohmann::json to_json(const SampleReport& r) {
  nlohmann::json steps = nlohmann::json::array();
  StageSeconds sum;
  for (const auto& s : r.stages) {
    steps.push_back(stage_json(s));
    sum.packing += s.packing;
    sum.denoiser += s.denoiser;
    sum.output_transform += s.output_transform;
    sum.sampler_update += s.sampler_update;
  }
  return {
      {"device", r.device},
      {"model", r.model},
      {"precision", r.precision},
      {"resolution", {r.width, r.height}},
      {"frames", r.frames},
      {"latent_shape", {r.latent_frames, r.latent_height, r.latent_width}},
      {"audio_latents_per_channel", r.audio_latents},
      {"packed_tokens", r.packed_tokens},
      {"rows", {{"text", r.text_tokens}, {"audio", r.audio_rows}, {"video", r.video_rows}}},
      {"seed", r.seed},
      {"steps", r.steps},
      {"sampling_seconds", r.total_seconds},
      {"sampling_stage_seconds_per_step", steps},
      {"sampling_stage_seconds_total", stage_json(sum)},
      {"peak_memory_bytes",
       {{"host", r.peak_host_bytes},
        {"device_allocated", r.peak_device_allocated_bytes},
        {"device_reserved", r.peak_device_reserved_bytes}}},
      {"checksums",
       {{"video_latents", {{"sum", r.video.sum}, {"abs_sum", r.video.abs_sum}}},
        {"audio_latents", {{"sum", r.audio.sum}, {"abs_sum", r.audio.abs_sum}}}}},
  };
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::string text = j.dump(1) + "\n";
  if (path == "-") {
    std::cout << text << std::flush;
    return;
  }
  io::write_file_atomically(path, [&](std::FILE* f) {
    return std::fwrite(text.data(), 1, text.size(), f) == text.size();
  });
}

}  // namespace h3rt
