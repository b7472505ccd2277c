#include "bench/step_report.h"

#include <algorithm>

#include "bench/block_report.h"
#include "h3rt/check.h"

namespace h3rt::bench {

const std::vector<std::string>& step_stages() {
  static const std::vector<std::string> names = {"inputs", "weight_wait", "adaln_tables", "blocks",
                                                 "final_heads"};
  return names;
}

int64_t step_launcher_calls(const H3Config& c, const SequenceLayout& layout, int block_launches) {
  const bool audio = layout.audio_rows() > 0, video = layout.video_rows() > 0;
  // Copies in: silu(temb), video rows, audio rows, text rows.
  int64_t n = 1 + video + audio + (layout.text_len > 0);
  // A float32 patch projection: GEMM, bias, cast into the stream.
  n += 3 * (video + audio);
  // Per block: its AdaLN table GEMM and the block.
  n += c.layers * (1 + block_launches);
  // Final AdaLN GEMM and norm; per head: cast to float32, GEMM, bias, copy out.
  n += 2 + 4 * (video + audio);
  return n;
}

namespace {

std::string step_gemm_description(const StepMeasurements& m) {
  if (!m.nvfp4_algo.empty()) return nvfp4_gemm_description(m.nvfp4_algo, true);
  if (m.int8_group >= 0)
    return "int8 W8A8, " + int8_rotation_description(m.int8_group);
  return m.fp8 ? "cuBLASLt fp8 e4m3, static per-tensor scales" : "cuBLASLt bf16";
}

nlohmann::json checksum_json(const Checksum& c) {
  return {{"sum", c.sum}, {"abs_sum", c.abs_sum}};
}

std::vector<double> field(const std::vector<StepRepetition>& reps, double StepRepetition::*member) {
  std::vector<double> v;
  for (const auto& r : reps) v.push_back(r.*member);
  return v;
}

nlohmann::json reps_json(const std::vector<StepRepetition>& reps) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : reps) {
    nlohmann::json j = {{"wall_ms", r.wall_ms},
                        {"device_ms", r.device_ms},
                        {"host_prepare_ms", r.host_prepare_ms},
                        {"host_finish_ms", r.host_finish_ms},
                        {"timestep", {{"video", r.t_video}, {"audio", r.t_audio}}},
                        {"velocity_checksums",
                         {{"video", checksum_json(r.video)}, {"audio", checksum_json(r.audio)}}}};
    if (!r.stage_ms.empty()) j["stage_ms"] = r.stage_ms;
    a.push_back(j);
  }
  return a;
}

bool same_checksums(const StepRepetition& a, const StepRepetition& b) {
  return a.video.sum == b.video.sum && a.video.abs_sum == b.video.abs_sum &&
         a.audio.sum == b.audio.sum && a.audio.abs_sum == b.audio.abs_sum;
}

bool same_velocities(const std::vector<StepRepetition>& a, const std::vector<StepRepetition>& b) {
  bool same = !a.empty() && a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = same_checksums(a[i], b[i]);
  return same;
}

// The plan and, for a streamed model, the eager steps' copy (and file gather) time against the
// compute stream's wait for them (hidden when that wait is a small part of the longer of the
// two, which run side by side).
nlohmann::json streaming_json(const StepMeasurements& m) {
  nlohmann::json j = to_json(m.weight_streaming);
  if (!m.weight_streaming.streamed) return j;
  std::vector<double> wait;
  for (const auto& r : m.eager) {
    auto it = r.stage_ms.find("weight_wait");
    wait.push_back(it == r.stage_ms.end() ? 0.0 : it->second);
  }
  const double copy = median(field(m.eager, &StepRepetition::weight_copy_ms));
  const double gather = median(field(m.eager, &StepRepetition::weight_gather_ms));
  const double waited = median(wait);
  const double bytes = static_cast<double>(m.weight_streaming.h2d_bytes_per_step);
  j["copy_ms_p50_eager"] = copy;
  j["h2d_gb_per_s_eager"] = copy > 0 ? bytes / copy / 1e6 : 0.0;
  if (m.weight_streaming.source == "file") {
    j["gather_ms_p50_eager"] = gather;
    j["gather_gb_per_s_eager"] = gather > 0 ? bytes / gather / 1e6 : 0.0;
  }
  j["compute_waited_ms_p50_eager"] = waited;
  const double busy = std::max(copy, gather);
  j["copy_hidden_fraction"] = busy > 0 ? std::max(0.0, 1.0 - waited / busy) : 0.0;
  return j;
}

}  // namespace

nlohmann::json step_report(const H3Config& c, const SequenceLayout& layout,
                           const StepMeasurements& m) {
  H3RT_CHECK(!m.eager.empty(), "step report: no eager repetitions");
  nlohmann::json stages = nlohmann::json::object();
  std::map<std::string, std::vector<double>> per_stage;
  for (const auto& r : m.eager)
    for (const auto& [name, ms] : r.stage_ms) per_stage[name].push_back(ms);
  for (const auto& [name, v] : per_stage) {
    bool known = false;
    for (const auto& s : step_stages()) known |= s == name;
    H3RT_CHECK(known, "step report: unknown stage '", name, "'");
    stages[name] = median(v);
  }
  stages["host_prepare"] = median(field(m.eager, &StepRepetition::host_prepare_ms));
  stages["host_finish"] = median(field(m.eager, &StepRepetition::host_finish_ms));

  // Eager and graph repetitions run the same inputs in the same order: equal checksums.
  const bool identical = same_velocities(m.eager, m.graph);

  const double eager_ms = median(field(m.eager, &StepRepetition::wall_ms));
  const double graph_ms = m.graph.empty() ? 0.0 : median(field(m.graph, &StepRepetition::wall_ms));
  nlohmann::json graph = {
      {"captured", m.graph_captured},
      {"capture_ms", m.capture_ms},
      {"step_ms_p50", graph_ms},
      {"device_ms_p50", m.graph.empty() ? 0.0 : median(field(m.graph, &StepRepetition::device_ms))},
      {"host_prepare_ms_p50",
       m.graph.empty() ? 0.0 : median(field(m.graph, &StepRepetition::host_prepare_ms))},
      {"speedup_over_eager", graph_ms > 0 ? eager_ms / graph_ms : 0.0},
      {"velocities_bit_identical_to_eager", identical},
      {"repetitions", reps_json(m.graph)}};
  nlohmann::json report = {
      {"workload",
       {{"preset", m.preset},
        {"packed_tokens", layout.seq_len()},
        {"text", layout.text_len},
        {"audio", layout.audio_rows()},
        {"video", layout.video_rows()},
        {"latent_shape", {layout.frames, layout.height, layout.width}},
        {"hidden", c.hidden},
        {"blocks", c.layers},
        {"refiner_blocks", c.refiner_layers},
        {"heads", c.heads},
        {"ffn", c.ffn},
        {"precision", "bf16"},
        {"attention",
         m.sage_attention ? "sage_8bit (h3rt, SageAttention2 numerics)" : "flash_bf16 (h3rt)"},
        {"gemm", step_gemm_description(m)},
        {"weights", "synthetic, generated on the GPU"},
        {"seed", m.seed},
        {"weights_seed", m.weights_seed}}},
      {"setup",
       {{"model_seconds", m.model_setup_s},
        {"session_ms", m.session_setup_ms},
        {"text_refiner_ms", m.text_refiner_ms},
        {"first_step_ms", m.first_step_ms}}},
      {"step_ms_p50_eager", eager_ms},
      {"step_ms_p50_cuda_graph", graph_ms},
      {"device_ms_p50_eager", median(field(m.eager, &StepRepetition::device_ms))},
      {"eager_stage_ms_p50", stages},
      {"cuda_graph", graph},
      {"eager_repetitions", reps_json(m.eager)},
      {"launches_per_step",
       {{"launcher_calls", step_launcher_calls(c, layout, m.block_launches)},
        {"cuda_graph_nodes", m.graph_nodes},
        {"cupti_kernels", m.cupti_kernels}}},
      {"peak_device_bytes",
       {{"weights", m.weight_bytes},
        {"allocated", m.peak_allocated},
        {"reserved", m.peak_reserved}}},
      {"velocity_checksums",
       {{"video", checksum_json(m.eager.back().video)},
        {"audio", checksum_json(m.eager.back().audio)}}},
      {"one_step_sample_latent_checksums",
       {{"note", "warm-up step run as `h3rt sample --steps 1` with the same seeds"},
        {"video_latents", checksum_json(m.one_step_video)},
        {"audio_latents", checksum_json(m.one_step_audio)}}},
      {"reps", m.eager.size()},
      {"weight_streaming", streaming_json(m)},
  };
  StepTelemetry eager_t = m.eager_telemetry, graph_t = m.graph_telemetry;
  eager_t.name = "eager", eager_t.step_ms = eager_ms;
  graph_t.name = "cuda_graph", graph_t.step_ms = graph_ms;
  report["telemetry"] = steps_telemetry_json(m.telemetry_header, {eager_t, graph_t});
  if (m.timeline)
    report["kernel_timeline"] = kernel_timeline_json(
        *m.timeline,
        "CUPTI activity over one more CUDA graph step, not among the repetitions "
        "above (GPU timestamps; the step's host work before its first launch is "
        "outside the span)");
  add_device_fields(report, m.device);
  return report;
}

nlohmann::json step_comparison_report(const H3Config& c, const SequenceLayout& layout,
                                      const StepMeasurements& streamed,
                                      const StepMeasurements& resident) {
  nlohmann::json j = step_report(c, layout, streamed);
  const nlohmann::json r = step_report(c, layout, resident);
  auto ratio = [&](const char* key) {
    const double base = r[key].get<double>();
    return base > 0 ? j[key].get<double>() / base : 0.0;
  };
  j["streamed_vs_resident"] = {
      {"eager_step_ratio", ratio("step_ms_p50_eager")},
      {"cuda_graph_step_ratio", ratio("step_ms_p50_cuda_graph")},
      {"velocities_bit_identical", same_velocities(streamed.eager, resident.eager) &&
                                       same_velocities(streamed.graph, resident.graph)}};
  j["resident"] = r;
  return j;
}

}  // namespace h3rt::bench
