// The JSON report of `h3rt bench step`, assembled from measured times (CPU code, so its schema
// is tested in CI): one whole denoising step's model evaluation on a reusable forward session,
// eager and replayed from a CUDA graph, with per-stage GPU times, host work, launch counts,
// peak device memory and checksums of the velocities.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/device_info.h"
#include "bench/kernel_timeline.h"
#include "bench/telemetry.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "h3rt/pipeline.h"
#include "h3rt/report.h"

namespace h3rt::bench {

// Stages of a step as the forward session times them (eager steps).
const std::vector<std::string>& step_stages();

struct StepRepetition {
  double wall_ms = 0;                      // the forward call, host wall clock
  double device_ms = 0;                    // the step's device work (CUDA events)
  double host_prepare_ms = 0;              // host work before the device work
  double host_finish_ms = 0;               // wait for the device + velocities out of staging
  std::map<std::string, double> stage_ms;  // eager steps only
  double weight_copy_ms = 0;               // eager steps of a streamed model: H2D copies busy
  double weight_gather_ms = 0;             // and the file source's host gathers busy
  float t_video = 0, t_audio = 0;
  Checksum video, audio;  // of the velocities
};

struct StepMeasurements {
  std::string preset;  // "h3" / "tiny"
  bool fp8 = false;
  int int8_group = -1;     // int8 W8A8 block GEMMs with this convrot group (0: none); -1: not int8
  std::string nvfp4_algo;  // NVFP4 W4A4 block GEMMs with this algorithm; empty: none
  bool sage_attention = false;
  uint64_t seed = 0, weights_seed = 0;
  double model_setup_s = 0;     // synthetic weights generated on the GPU (+ fp8/NVFP4 packing)
  double session_setup_ms = 0;  // buffers, RoPE tables, staging
  double text_refiner_ms = 0;   // condition_proj + refiner + final norm (GPU), once per text
  double first_step_ms = 0;     // the warm-up step (plans, workspaces, refiner included)
  double capture_ms = 0;        // graph capture + instantiation
  std::vector<StepRepetition> eager, graph;  // graph wall times exclude the capture
  // Latents after the warm-up step run as a one-step sample (`h3rt sample --steps 1`).
  Checksum one_step_video, one_step_audio;
  bool graph_captured = false;
  int64_t graph_nodes = 0;
  int block_launches = 10;     // launcher calls of one block (model::kBlockLaunches, + 4 fp8)
  int64_t cupti_kernels = -1;  // per eager step; -1: not counted (built without CUPTI)
  // CUPTI (unset without it): the device work of one more CUDA graph step.
  std::optional<KernelTimeline> timeline;
  int64_t weight_bytes = 0;    // device bytes of the model
  int64_t peak_allocated = 0, peak_reserved = 0;
  DeviceInfo device;
  WeightStreaming weight_streaming;  // the plan under device_memory_limit (h3rt/pipeline.h)
  // SM clock, power, energy: TelemetrySampler::header_json, and the eager and graph steps
  // (names "eager", "cuda_graph"; step_ms is filled in by step_report).
  nlohmann::json telemetry_header = {{"available", false}, {"reason", "not measured"}};
  StepTelemetry eager_telemetry, graph_telemetry;
};

// Launcher calls of one step's device work (kernels, GEMMs and copies it enqueues), from the
// model's shape and a block's launcher calls.
int64_t step_launcher_calls(const H3Config& c, const SequenceLayout& layout, int block_launches);

nlohmann::json step_report(const H3Config& c, const SequenceLayout& layout,
                           const StepMeasurements& m);
// `streamed` beside `resident` (the same steps with resident weights): the streamed report with
// the resident one under "resident" and the step time ratios and bit identity under
// "streamed_vs_resident".
nlohmann::json step_comparison_report(const H3Config& c, const SequenceLayout& layout,
                                      const StepMeasurements& streamed,
                                      const StepMeasurements& resident);

}  // namespace h3rt::bench
