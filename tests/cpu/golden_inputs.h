// The golden tiny set's forward inputs, read straight from golden.safetensors (layout tensors
// included, so tests of the forward do not depend on the layout code). Shared by CPU and GPU tests.
#pragma once

#include <string>
#include <vector>

#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt::test {

struct GoldenInputs {
  SafetensorsFile file = SafetensorsFile::open(golden_dir() + "/golden.safetensors");
  SequenceLayout layout;
  TimestepPlan plan;
  std::vector<float> video, audio, text;

  std::vector<int64_t> ints(const std::string& name) const {
    const std::vector<double> d = file.get(name).to_f64();
    return std::vector<int64_t>(d.begin(), d.end());
  }
  std::vector<double> f64(const std::string& name) const { return file.get(name).to_f64(); }

  GoldenInputs() {
    const Tensor lat = file.get("input/video_latents");  // [1, 24, T, Hl, Wl]
    layout.text_len = file.get("layout/text_indices").numel();
    layout.audio_len = file.get("input/audio_latents").size(2);
    layout.frames = lat.size(2);
    layout.height = lat.size(3);
    layout.width = lat.size(4);
    layout.text_indices = ints("layout/text_indices");
    layout.audio_indices = ints("layout/audio_indices");
    layout.video_indices = ints("layout/video_indices");
    for (int64_t t : ints("layout/token_tags")) layout.token_tags.push_back(int32_t(t));
    layout.position_ids = f64("layout/position_ids");
    plan.timestep = file.get("fwd/timestep").to_f32();
    plan.timestep_indices = ints("fwd/timestep_indices");
    video = file.get("input/video_rows").to_f32();
    audio = file.get("input/audio_rows").to_f32();
    text = file.get("input/text_embeds").to_f32();  // bf16 values, exact in float
  }
  ForwardInputs inputs() const { return {layout, plan, video.data(), audio.data(), text.data()}; }
};

// Loaded once per test binary.
inline const GoldenInputs& golden_inputs() {
  static const GoldenInputs g;
  return g;
}

}  // namespace h3rt::test
