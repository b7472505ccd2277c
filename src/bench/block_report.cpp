#include "bench/block_report.h"

#include <algorithm>

#include "bench/nvfp4_fusion_bytes.h"
#include "h3rt/check.h"

namespace h3rt::bench {

const std::vector<std::string>& block_components() {
  static const std::vector<std::string> names = {"norm_modulate",     "qkv_projection",
                                                 "rms_rope",          "attention",
                                                 "output_projection", "residual_gate_norm_modulate",
                                                 "mlp_fc1",           "swiglu",
                                                 "mlp_fc2",           "residual_gates"};
  return names;
}

std::map<std::string, double> block_byte_model(const H3Config& c, int64_t rows) {
  const double S = static_cast<double>(rows), H = c.hidden, I = c.inner(), F = c.ffn, b = 2.0;
  return {
      {"norm_modulate", 2 * S * H * b},
      {"qkv_projection", (S * H + 3 * I * H + 3 * S * I) * b},
      {"rms_rope", 4 * S * I * b + 2 * S * c.rope_dim() * 4.0},
      {"attention", 4 * S * I * b},
      {"output_projection", (S * I + H * I + S * H) * b},
      {"residual_gate_norm_modulate", 4 * S * H * b},
      {"mlp_fc1", (S * H + 2 * F * H + 2 * S * F) * b},
      {"swiglu", 3 * S * F * b},
      {"mlp_fc2", (S * F + H * F + S * H) * b},
      {"residual_gates", 3 * S * H * b},
  };
}

std::map<std::string, double> block_flop_model(const H3Config& c, int64_t rows) {
  const double S = static_cast<double>(rows), H = c.hidden, I = c.inner(), F = c.ffn;
  return {{"qkv_projection", 2.0 * S * H * 3 * I},
          {"output_projection", 2.0 * S * I * H},
          {"mlp_fc1", 2.0 * S * H * 2 * F},
          {"mlp_fc2", 2.0 * S * F * H},
          {"attention", 4.0 * S * S * I}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string nvfp4_gemm_description(const std::string& algo, bool static_input_scale) {
  return "NVFP4 W4A4 (" + algo + "); " +
         (static_input_scale ? "static input scales: the producers encode the NVFP4 inputs (fused)"
                             : "computed input scales: each projection includes its two-pass "
                               "activation quantization (amax, encode)");
}

std::string int8_rotation_description(int group) {
  return group > 0 ? "convrot group " + std::to_string(group) : std::string("no rotation");
}

namespace {

std::string gemm_description(const BlockMeasurements& m) {
  if (m.int8_group >= 0)
    return "int8 W8A8, " + int8_rotation_description(m.int8_group) +
           " (rotate+quantize fused into the producers of the projections marked fused, a "
           "separate launch for the others; the int8 GEMM applies both scales in its epilogue)";
  if (m.nvfp4) return nvfp4_gemm_description(m.nvfp4_algo, m.nvfp4_static_input_scale);
  if (m.fp8)
    return "fp8 e4m3 GEMMs (cublaslt), static per-tensor scales (the e4m3 input written by the "
           "producer of the projections marked fused, a quantize launch inside each of the "
           "others)";
  return "cuBLASLt bf16";
}

// The format each block projection ran in (the bench runs all four in one format).
nlohmann::json projection_formats(const BlockMeasurements& m) {
  const std::string f = m.int8_group > 0    ? "int8_convrot G=" + std::to_string(m.int8_group)
                        : m.int8_group == 0 ? "int8"
                        : m.nvfp4           ? "nvfp4"
                        : m.fp8             ? "fp8_scaled"
                                            : "bf16";
  nlohmann::json j;
  for (const char* name : {"qkv", "out", "fc1", "fc2"}) {
    const bool fused =
        std::find(m.fused_inputs.begin(), m.fused_inputs.end(), name) != m.fused_inputs.end();
    std::string note = fused ? "input from its producer, fused" : "";
    if (const auto g = m.int8_gemm.find(name); g != m.int8_gemm.end())
      note += (note.empty() ? "GEMM " : "; GEMM ") + g->second;
    j[name] = note.empty() ? f : f + " (" + note + ")";
  }
  return j;
}

// NVFP4 runs: which producers encoded the projection inputs and the DRAM bytes that saves against
// "producer writes bf16, then nvfp4_quantize" (src/bench/nvfp4_fusion_bytes.h). The block fuses
// all four boundaries with static input scales (given g) and none with computed ones.
nlohmann::json nvfp4_fusion_report(const H3Config& c, int64_t rows, bool static_scales) {
  Nvfp4FusionShape shape;
  shape.rows = rows;
  shape.hidden = c.hidden;
  shape.heads = c.heads;
  shape.head_dim = c.head_dim;
  shape.ffn = c.ffn;
  const Nvfp4FusionBytes bytes = nvfp4_fusion_bytes(shape);
  nlohmann::json saved = nlohmann::json::object();
  for (const auto& b : bytes.boundaries) saved[b.name] = static_scales ? b.saved_given : 0;
  return {{"fused_producers", static_scales},
          {"dram_bytes_saved_per_block", static_scales ? bytes.saved_given : 0},
          {"dram_bytes_saved_per_boundary", saved}};
}

bool is_gemm(const std::string& name) {
  return name.find("projection") != std::string::npos || name.rfind("mlp_fc", 0) == 0;
}

}  // namespace

nlohmann::json block_report(const H3Config& c, const SequenceLayout& layout,
                            const BlockMeasurements& m) {
  const int64_t S = layout.seq_len();
  const auto bytes = block_byte_model(c, S);
  const auto flops = block_flop_model(c, S);
  nlohmann::json p50 = nlohmann::json::object(), moved = nlohmann::json::object(),
                 roof = nlohmann::json::object();
  double gemm_ms = 0, memory_bound_ms = 0, attention_ms = 0;
  std::map<std::string, double> component_p50;
  for (const auto& [name, v] : m.component_ms) {
    H3RT_CHECK(bytes.count(name), "block report: unknown component '", name, "'");
    const double ms = median(v), by = bytes.at(name);
    p50[name] = ms;
    component_p50[name] = ms;
    moved[name] = by;
    roof[name] = {{"h200_hbm_4.8TBps_ms", by / 4.8e9},
                  {"gb10_273GBps_ms", by / 273e6},
                  {"achieved_GBps", ms > 0 ? by / (ms * 1e6) : 0.0}};
    if (flops.count(name) && ms > 0) roof[name]["achieved_TFLOPs"] = flops.at(name) / (ms * 1e9);
    if (name == "attention")
      attention_ms = ms;
    else if (is_gemm(name))
      gemm_ms += ms;
    else
      memory_bound_ms += ms;
  }
  p50["module_forward"] = median(m.instrumented_ms);
  const double block_ms = median(m.uninstrumented_ms);
  nlohmann::json report = {
      {"workload",
       {{"packed_tokens", S},
        {"text", layout.text_len},
        {"audio", layout.audio_rows()},
        {"video", layout.video_rows()},
        {"hidden", c.hidden},
        {"heads", c.heads},
        {"ffn", c.ffn},
        {"precision", "bf16"},
        {"attention", m.sage_attention ? "sage_8bit (h3rt, SageAttention2 numerics, pre-pass "
                                         "included)"
                                       : "flash_bf16 (h3rt)"},
        {"gemm", gemm_description(m)},
        {"projection_formats", projection_formats(m)},
        {"seed", m.seed}}},
      {"representative_block_p50_milliseconds", p50},
      {"component_fusion",
       {{"norm_modulate", "norm1 + AdaLN modulate (seeds: norm + modulate)"},
        {"residual_gate_norm_modulate", "gate_msa residual + norm2 + modulate in one kernel"},
        {"residual_gates", "gate_mlp residual"},
        {"qkv_and_output_layout", "none: attention reads q/k/v through strides"}}},
      {"block_p50_milliseconds_uninstrumented", block_ms},
      {"block_p50_milliseconds_cuda_graph", median(m.graph_ms)},
      {"gemm_milliseconds", gemm_ms},
      {"attention_milliseconds", attention_ms},
      {"memory_bound_milliseconds", memory_bound_ms},
      {"block_over_gemm_plus_attention",
       gemm_ms + attention_ms > 0 ? block_ms / (gemm_ms + attention_ms) : 0.0},
      {"launches_per_block",
       {{"launcher_calls", m.launcher_calls},
        {"cuda_graph_nodes", m.graph_nodes},
        {"cupti_kernels", m.cupti_kernels}}},
      {"bytes_moved_model", moved},
      {"roofline", roof},
      {"peak_device_bytes", {{"allocated", m.peak_allocated}, {"reserved", m.peak_reserved}}},
      {"reps", m.uninstrumented_ms.size()},
      {"telemetry", block_telemetry_json(m.telemetry, block_ms, component_p50)},
  };
  if (m.timeline)
    report["kernel_timeline"] =
        kernel_timeline_json(*m.timeline,
                             "CUPTI kernel activity over one replay of the block's "
                             "CUDA graph (GPU timestamps)");
  if (m.nvfp4) report["nvfp4_fusion"] = nvfp4_fusion_report(c, S, m.nvfp4_static_input_scale);
  add_device_fields(report, m.device);
  return report;
}

}  // namespace h3rt::bench
