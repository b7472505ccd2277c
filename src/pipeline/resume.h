// Resume files of the sampling loop (internal to src/pipeline): the loop state after a step and
// the run it belongs to, written atomically as safetensors, read back with every difference from
// the present run named.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "h3rt/pipeline.h"

namespace h3rt::resume {

// The loop between two steps: steps done, latents (the simple loop's audio is the carried
// variable) and the multistep sampler's memory.
struct LoopState {
  int steps_done = 0;
  FloatVec video_rows, audio_rows;
  ComfyState comfy;
};

// What a resume file must agree on with the run that reads it, as (name, value) pairs.
using RunKeys = std::vector<std::pair<std::string, std::string>>;
RunKeys run_keys(const Denoiser& denoiser, const Request& request, const SampleOptions& options);

void write(const std::string& path, const RunKeys& keys, const LoopState& state,
           const Shape& video_shape, const Shape& audio_shape);
// Throws naming every key that differs, or a wrong tensor, shape or step count.
LoopState read(const std::string& path, const RunKeys& keys, const Shape& video_shape,
               const Shape& audio_shape, int total_steps);

}  // namespace h3rt::resume
