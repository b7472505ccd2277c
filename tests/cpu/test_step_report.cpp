// The bench step report's schema and arithmetic, from given measurements (no GPU needed).
#include <gtest/gtest.h>

#include "bench/step_report.h"

namespace h3rt {
namespace {

bench::StepRepetition rep(double wall, double device, double sum) {
  bench::StepRepetition r;
  r.wall_ms = wall;
  r.device_ms = device;
  r.host_prepare_ms = wall - device;
  r.host_finish_ms = 1.0;
  r.video = {sum, 2 * sum};
  r.audio = {-sum, sum};
  return r;
}

bench::StepMeasurements measurements() {
  bench::StepMeasurements m;
  m.preset = "h3";
  m.eager = {rep(100, 90, 1), rep(120, 95, 2), rep(110, 92, 3)};
  double k = 1;
  for (auto& r : m.eager)
    for (const auto& s : bench::step_stages()) r.stage_ms[s] = k++;
  m.graph = {rep(80, 79, 1), rep(90, 85, 2), rep(85, 84, 3)};
  m.graph_captured = true;
  m.graph_nodes = 700;
  m.capture_ms = 12;
  return m;
}

TEST(StepReport, SchemaMediansAndGraphComparison) {
  const H3Config c = H3Config::h3();
  const SequenceLayout layout = make_t2va_layout(100, 207, 37, 48, 84);
  ASSERT_EQ(layout.seq_len(), 37810);
  const nlohmann::json r = bench::step_report(c, layout, measurements());

  EXPECT_DOUBLE_EQ(r.at("step_ms_p50_eager").get<double>(), 110.0);
  EXPECT_DOUBLE_EQ(r.at("step_ms_p50_cuda_graph").get<double>(), 85.0);
  EXPECT_DOUBLE_EQ(r.at("device_ms_p50_eager").get<double>(), 92.0);
  const auto& g = r.at("cuda_graph");
  EXPECT_DOUBLE_EQ(g.at("speedup_over_eager").get<double>(), 110.0 / 85.0);
  EXPECT_TRUE(g.at("velocities_bit_identical_to_eager").get<bool>());
  EXPECT_EQ(g.at("repetitions").size(), 3u);

  // Stage k of repetition i holds n i + k + 1 (n stages): the medians are repetition 1's.
  const auto& st = r.at("eager_stage_ms_p50");
  const double n = static_cast<double>(bench::step_stages().size());
  for (size_t k = 0; k < bench::step_stages().size(); ++k)
    EXPECT_DOUBLE_EQ(st.at(bench::step_stages()[k]).get<double>(), n + k + 1) << k;
  EXPECT_DOUBLE_EQ(st.at("host_prepare").get<double>(), 18.0);  // median of {10, 25, 18}

  EXPECT_EQ(r.at("workload").at("packed_tokens").get<int64_t>(), 37810);
  EXPECT_EQ(r.at("workload").at("blocks").get<int64_t>(), 50);
  // 4 copies in, 2 x 3 projection launches, 50 x 11, final AdaLN + norm, 2 x 4 head launches.
  EXPECT_EQ(r.at("launches_per_step").at("launcher_calls").get<int64_t>(), 4 + 6 + 550 + 2 + 8);
  EXPECT_EQ(r.at("launches_per_step").at("cuda_graph_nodes").get<int64_t>(), 700);
  EXPECT_DOUBLE_EQ(r.at("velocity_checksums").at("video").at("sum").get<double>(), 3.0);
  EXPECT_TRUE(r.contains("peak_device_bytes"));
  EXPECT_TRUE(r.contains("setup"));
  EXPECT_FALSE(r.contains("kernel_timeline"));  // not recorded (no CUPTI)

  auto m = measurements();
  m.timeline = bench::kernel_timeline({{0, 5000, "a"}, {6000, 9000, "[memcpy]", false}});
  const nlohmann::json t = bench::step_report(c, layout, m).at("kernel_timeline");
  EXPECT_EQ(t.at("kernels").get<int64_t>(), 1);
  EXPECT_EQ(t.at("memsets_and_memcpys").get<int64_t>(), 1);
  EXPECT_DOUBLE_EQ(t.at("idle_fraction").get<double>(), 1.0 / 9.0);
}

TEST(StepReport, DifferentGraphVelocitiesAreReported) {
  bench::StepMeasurements m = measurements();
  m.graph[2].video.sum += 1e-9;
  const nlohmann::json r =
      bench::step_report(H3Config::tiny(), make_t2va_layout(10, 37, 7, 8, 12), m);
  EXPECT_FALSE(r.at("cuda_graph").at("velocities_bit_identical_to_eager").get<bool>());
}

// The workload names the block GEMMs that ran.
TEST(StepReport, NamesTheGemmPath) {
  const SequenceLayout layout = make_t2va_layout(10, 37, 7, 8, 12);
  auto gemm = [&](const bench::StepMeasurements& m) {
    return bench::step_report(H3Config::tiny(), layout, m)
        .at("workload")
        .at("gemm")
        .get<std::string>();
  };
  bench::StepMeasurements m = measurements();
  EXPECT_EQ(gemm(m), "cuBLASLt bf16");
  m.fp8 = true;
  EXPECT_NE(gemm(m).find("fp8"), std::string::npos);
  m.fp8 = false;
  m.nvfp4_algo = "dequantize to bf16 scratch + cuBLASLt bf16";
  EXPECT_EQ(gemm(m).rfind("NVFP4 W4A4 (dequantize to bf16 scratch", 0), 0u);
}

TEST(StepReport, RejectsUnknownStagesAndMissingRepetitions) {
  bench::StepMeasurements m = measurements();
  m.eager[0].stage_ms["made_up"] = 1.0;
  const SequenceLayout layout = make_t2va_layout(10, 37, 7, 8, 12);
  EXPECT_THROW(bench::step_report(H3Config::tiny(), layout, m), Error);
  m.eager.clear();
  EXPECT_THROW(bench::step_report(H3Config::tiny(), layout, m), Error);
}

// A streamed run: the plan, the copy time against the compute stream's wait for it; beside a
// resident run of the same steps: the ratios and the bit identity of the velocities.
TEST(StepReport, WeightStreamingAndResidentComparison) {
  const H3Config c = H3Config::tiny();
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  bench::StepMeasurements resident = measurements();
  EXPECT_FALSE(bench::step_report(c, layout, resident).at("weight_streaming").at("streamed"));
  bench::StepMeasurements streamed = measurements();
  streamed.weight_streaming.limit = 24000000000;
  streamed.weight_streaming.streamed = true;
  streamed.weight_streaming.slots = 2;
  streamed.weight_streaming.slot_bytes = 1000;
  streamed.weight_streaming.h2d_bytes_per_step = 2000000;
  for (auto* reps : {&streamed.eager, &streamed.graph})
    for (auto& r : *reps) r.wall_ms *= 1.25;
  const double copies[] = {20, 40, 30};
  for (int i = 0; i < 3; ++i) {
    streamed.eager[i].weight_copy_ms = copies[i];
    streamed.eager[i].stage_ms["weight_wait"] = 3.0 * (i + 1);  // median 6
  }
  const nlohmann::json r = bench::step_comparison_report(c, layout, streamed, resident);
  EXPECT_FALSE(r.at("weight_streaming").contains("gather_ms_p50_eager"));  // pinned
  const auto& w = r.at("weight_streaming");
  EXPECT_TRUE(w.at("streamed").get<bool>());
  EXPECT_EQ(w.at("device_memory_limit").get<int64_t>(), 24000000000);
  EXPECT_EQ(w.at("slot_bytes").get<int64_t>(), 1000);
  EXPECT_DOUBLE_EQ(w.at("copy_ms_p50_eager").get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(w.at("compute_waited_ms_p50_eager").get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(w.at("copy_hidden_fraction").get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(w.at("h2d_gb_per_s_eager").get<double>(), 2000000 / 30.0 / 1e6);
  // The file source: its gathers run beside the copies; the longer of the two is what the
  // compute's wait is set against.
  streamed.weight_streaming.source = "file";
  const double gathers[] = {50, 70, 60};
  for (int i = 0; i < 3; ++i) streamed.eager[i].weight_gather_ms = gathers[i];
  const nlohmann::json f = bench::step_report(c, layout, streamed).at("weight_streaming");
  EXPECT_DOUBLE_EQ(f.at("gather_ms_p50_eager").get<double>(), 60.0);
  EXPECT_DOUBLE_EQ(f.at("gather_gb_per_s_eager").get<double>(), 2000000 / 60.0 / 1e6);
  EXPECT_DOUBLE_EQ(f.at("copy_ms_p50_eager").get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(f.at("copy_hidden_fraction").get<double>(), 0.9);
  const auto& cmp = r.at("streamed_vs_resident");
  EXPECT_DOUBLE_EQ(cmp.at("eager_step_ratio").get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(cmp.at("cuda_graph_step_ratio").get<double>(), 1.25);
  EXPECT_TRUE(cmp.at("velocities_bit_identical").get<bool>());
  EXPECT_DOUBLE_EQ(r.at("resident").at("step_ms_p50_eager").get<double>(), 110.0);
  streamed.graph[1].audio.sum += 1;  // one velocity differs
  EXPECT_FALSE(bench::step_comparison_report(c, layout, streamed, resident)
                   .at("streamed_vs_resident")
                   .at("velocities_bit_identical")
                   .get<bool>());
}

}  // namespace
}  // namespace h3rt
