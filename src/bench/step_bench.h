// `h3rt bench step` and `h3rt bench sample`: whole model evaluations on the GPU through a
// reusable forward session (model/forward_session_cuda.h), with synthetic weights generated on
// the GPU and the request `h3rt sample` builds from the same seed (seeded noise, seeded stand-in
// text embeddings).
//
// step: warm-up (GEMM plans, the text refiner; the first warm-up step is the whole of
// `h3rt sample --steps 1` for the request, whose latents' checksums it reports), then `reps`
// eager steps with per-stage CUDA events, then the same steps replayed from a CUDA graph
// (captured at the first of them; capture time reported apart). The timed steps take the
// timesteps of an Euler trajectory's steps 1.. (two distinct timesteps, as every step but the
// first). JSON: see step_report.h.
// sample: the whole Euler loop (`steps` evaluations) end to end, with per-step stage seconds and
// the final latents' checksums (the same as `h3rt sample --device cuda` for the same request).
// With a device memory limit the model's blocks stream when the plan says so
// (model/weight_stream_cuda.h), from the load on when the resident model cannot fit the limit
// at all (the blocks go to pinned memory as they are made; load_peak_device_bytes); the report's
// "weight_streaming" says how, and step's eager steps time the copies and the compute stream's
// waits for them.
// step with device_io: then, the bench's model freed, the Denoiser the Python module loads for
// the preset (h3rt.preset(..., device="cuda")) runs the Python module's device forward of CUDA
// latents in C++ (forward_device_latents) `reps` times back to back at sigma 0.7 with the text
// unchanged, timed as tools/device/py_overhead.py times the Python call; JSON "device_io".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "h3rt/pipeline.h"

namespace h3rt::bench {

struct StepBenchOptions {
  std::string preset = "h3";  // "h3" (release dims) or "tiny"
  int64_t text_len = 100, audio_len = 207, frames = 37, height = 48, width = 84;  // latents
  int64_t pixel_frames = 124, pixel_width = 1344, pixel_height = 768;             // for reports
  int reps = 3, warmup = 1;                                                       // step
  int steps = 8;                // sample: model evaluations
  bool cuda_graph = true;       // sample
  bool device_loop = true;      // sample: the latents stay on the device (pipeline/device_loop.h)
  bool fp8 = false;             // fp8 e4m3 block GEMMs (static per-tensor scales)
  bool nvfp4 = false;           // NVFP4 W4A4 block GEMMs (static input scales: fused producers)
  int int8_group = -1;          // >= 0: int8 W8A8 block GEMMs with this convrot group (0: none)
  bool sage_attention = false;  // the blocks' attention: Sage 8-bit instead of flash bf16
  uint64_t seed = 440420, weights_seed = 0;
  // Weight streaming (DenoiserOptions::device_memory_limit); step: with compare_resident the
  // same steps run first on a model loaded whole (resident), freed before the model under the
  // limit loads, in one run (the ratio, both loads' peaks).
  int64_t device_memory_limit = 0;
  WeightStreamSource weight_stream_source = WeightStreamSource::automatic;
  bool compare_resident = false;
  bool device_io = false;  // step: also time the device-io forward (above)
};

nlohmann::json run_step_bench(const StepBenchOptions& o);
nlohmann::json run_sample_bench(const StepBenchOptions& o);

}  // namespace h3rt::bench
