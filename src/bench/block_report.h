// The JSON report of `h3rt bench block`, assembled from measured times (CPU code, so its schema
// is tested in CI): per-component p50 under the reference stack's component names, block times,
// launch counts, bytes moved per component from a written-down model, and rooflines for an H200
// (4.8 TB/s) and a GB10 (273 GB/s).
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

namespace h3rt::bench {

// Components of a block as block_forward_cuda names its stages.
const std::vector<std::string>& block_components();

// Fewest bytes each component must move (bf16 activations and weights, each read once and
// written once; RoPE tables in float32) and the FLOPs of the matrix components, at S rows.
std::map<std::string, double> block_byte_model(const H3Config& c, int64_t rows);
std::map<std::string, double> block_flop_model(const H3Config& c, int64_t rows);

struct BlockMeasurements {
  std::map<std::string, std::vector<double>> component_ms;  // per repetition
  std::vector<double> instrumented_ms, uninstrumented_ms, graph_ms;
  int launcher_calls = 0;
  int64_t graph_nodes = 0, cupti_kernels = -1;  // -1: not counted (built without CUPTI)
  // CUPTI (unset without it): the kernels of one graph replay.
  std::optional<KernelTimeline> timeline;
  int64_t peak_allocated = 0, peak_reserved = 0;
  DeviceInfo device;
  BlockTelemetry telemetry;  // SM clock, power and energy (unavailable without NVML)
  bool fp8 = false;
  bool nvfp4 = false, nvfp4_static_input_scale = false;
  int int8_group = -1;  // int8 W8A8 projections: the convrot group (0: plain int8); -1: none
  bool sage_attention = false;
  std::string nvfp4_algo;                 // the NVFP4 GEMM algorithm that ran
  std::vector<std::string> fused_inputs;  // projections whose producer quantized the input
  std::map<std::string, std::string> int8_gemm;  // int8: the GEMM each projection ran (qkv, ...)
  uint64_t seed = 0;
};

double median(std::vector<double> v);

// NVFP4 W4A4 block projections run by GEMM algorithm `algo`, in words (block and step reports).
std::string nvfp4_gemm_description(const std::string& algo, bool static_input_scale);
// The rotation of int8 W8A8 block projections with convrot group `group`, in words:
// "convrot group G", or "no rotation" for 0 (block, step and sample reports).
std::string int8_rotation_description(int group);

nlohmann::json block_report(const H3Config& c, const SequenceLayout& layout,
                            const BlockMeasurements& m);

}  // namespace h3rt::bench
