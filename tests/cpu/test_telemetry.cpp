// Bench telemetry without a GPU: the reductions, the sampler thread over a fake source, the
// report fields of bench block and bench step, and "unavailable" when NVML cannot be loaded.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "bench/block_report.h"
#include "bench/step_report.h"
#include "bench/telemetry.h"

namespace h3rt {
namespace {

using bench::Interval;
using bench::TelemetrySample;

// Readings 1000 + 10 n MHz, 300 + n W, capped every other reading; energy 5 J per call.
class FakeSource : public bench::TelemetrySource {
 public:
  explicit FakeSource(std::string reason = "") : reason_(std::move(reason)) {}
  std::string unavailable_reason() const override { return reason_; }
  std::string description() const override { return "fake"; }
  bool read(TelemetrySample& s) override {
    s.sm_clock_mhz = 1000 + 10 * n_;
    s.power_w = 300 + n_;
    s.power_capped = n_ % 2;
    ++n_;
    return true;
  }
  std::optional<double> energy_mj() override { return 5000.0 * ++e_; }
  std::optional<double> power_limit_w() override { return 700.0; }

 private:
  std::string reason_;
  int n_ = 0, e_ = 0;
};

std::vector<TelemetrySample> samples_at(const std::vector<double>& t) {
  std::vector<TelemetrySample> v;
  for (size_t i = 0; i < t.size(); ++i)
    v.push_back({t[i], 1000.0 + 100 * i, 200.0 + 10 * i, static_cast<int>(i % 2)});
  return v;
}

TEST(Telemetry, SummarizeKeepsSamplesInsideTheIntervals) {
  // Samples at 0..9 ms: clocks 1000..1900, powers 200..290.
  const auto s = samples_at({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  const bench::PowerSummary r = bench::summarize(s, {{1.5, 3.0}, {7.0, 8.0}});  // 2, 3, 7, 8
  EXPECT_EQ(r.samples, 4);
  EXPECT_DOUBLE_EQ(r.sm_clock_mhz_min, 1200);
  EXPECT_DOUBLE_EQ(r.sm_clock_mhz_median, 1700);  // upper median of 1200 1300 1700 1800
  EXPECT_DOUBLE_EQ(r.power_w_mean, (220 + 230 + 270 + 280) / 4.0);
  EXPECT_DOUBLE_EQ(r.power_capped_fraction, 0.5);  // samples 3 and 7
  const bench::PowerSummary none = bench::summarize(s, {{20, 30}});
  EXPECT_EQ(none.samples, 0);
  EXPECT_EQ(none.power_capped_fraction, -1);
}

TEST(Telemetry, EnergyWindowPerUnit) {
  bench::EnergyWindow w;
  EXPECT_FALSE(w.joules_per_unit());
  w.begin_mj = 1000;
  w.end_mj = 41000;
  w.units = 4;
  EXPECT_DOUBLE_EQ(*w.joules_per_unit(), 10.0);
  w.end_mj = 500;  // a counter that went back (driver reload): no figure
  EXPECT_FALSE(w.joules_per_unit());
}

TEST(Telemetry, PowerJsonShapeAndNullsWithoutSamples) {
  bench::PowerSummary s;
  s.samples = 3;
  s.sm_clock_mhz_median = 1725;
  s.sm_clock_mhz_min = 1500;
  s.power_w_mean = 650;
  s.power_capped_fraction = 1.0;
  const nlohmann::json j = bench::power_json(s, 70.0, "joules");
  EXPECT_EQ(j.at("samples").get<int>(), 3);
  EXPECT_DOUBLE_EQ(j.at("sm_clock_mhz_median").get<double>(), 1725);
  EXPECT_DOUBLE_EQ(j.at("joules").get<double>(), 650 * 0.070);
  const nlohmann::json empty = bench::power_json({}, 70.0, "joules");
  for (const char* k : {"sm_clock_mhz_median", "sm_clock_mhz_min", "power_w_mean",
                        "power_capped_fraction", "joules"})
    EXPECT_TRUE(empty.at(k).is_null()) << k;
}

// The sampler thread reads the fake source until stopped; samples carry the sampler's clock.
TEST(Telemetry, SamplerThreadCollectsReadings) {
  bench::TelemetrySampler sampler(std::make_unique<FakeSource>(), 1.0);
  ASSERT_TRUE(sampler.available());
  const double t0 = sampler.now_ms();
  sampler.start();
  for (int i = 0; i < 5000 && sampler.samples().size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sampler.stop();
  const auto s = sampler.samples();
  ASSERT_GE(s.size(), 3u);
  const size_t n = s.size();
  sampler.stop();  // idempotent; nothing more is sampled
  EXPECT_EQ(sampler.samples().size(), n);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_GE(s[i].t_ms, t0);
    EXPECT_DOUBLE_EQ(s[i].sm_clock_mhz, 1000 + 10.0 * i);
    if (i) EXPECT_GE(s[i].t_ms, s[i - 1].t_ms);
  }
  EXPECT_EQ(*sampler.energy_mj(), 5000.0);
  const nlohmann::json h = sampler.header_json();
  EXPECT_TRUE(h.at("available").get<bool>());
  EXPECT_EQ(h.at("source").get<std::string>(), "fake");
  EXPECT_DOUBLE_EQ(h.at("power_limit_w").get<double>(), 700.0);
  EXPECT_DOUBLE_EQ(h.at("sample_period_ms").get<double>(), 1.0);
}

TEST(Telemetry, UnavailableSourceReportsItsReason) {
  bench::TelemetrySampler sampler(std::make_unique<FakeSource>("no driver here"));
  EXPECT_FALSE(sampler.available());
  sampler.start();  // a no-op
  sampler.stop();
  EXPECT_TRUE(sampler.samples().empty());
  EXPECT_FALSE(sampler.energy_mj());
  EXPECT_EQ(sampler.header_json(),
            nlohmann::json({{"available", false}, {"reason", "no driver here"}}));
}

// Without the driver library (as on CI machines) NVML is unavailable, and says why.
TEST(Telemetry, MissingNvmlLibraryIsUnavailable) {
  auto src = bench::make_nvml_telemetry("", "libh3rt-no-such-nvml.so.1");
  const std::string reason = src->unavailable_reason();
  EXPECT_NE(reason.find("libh3rt-no-such-nvml.so.1 not found"), std::string::npos) << reason;
  bench::TelemetrySampler sampler(std::move(src));
  EXPECT_FALSE(sampler.header_json().at("available").get<bool>());
}

TEST(Telemetry, StderrLine) {
  bench::PowerSummary s{4, 1725, 1500, 650, 1.0};
  const bench::EnergyWindow e{0.0, 92200.0, 2};
  EXPECT_EQ(bench::telemetry_line({{"available", true}}, s, e, "block"),
            "SM clock median 1725 MHz (min 1500), mean 650 W over 4 samples, 46.10 J per block");
  EXPECT_EQ(bench::telemetry_line({{"available", false}, {"reason", "no driver"}}, s, e, "block"),
            "telemetry unavailable: no driver");
}

bench::BlockMeasurements block_measurements() {
  bench::BlockMeasurements m;
  for (const auto& name : bench::block_components()) m.component_ms[name] = {1.0};
  m.component_ms["attention"] = {40.0};
  m.instrumented_ms = {60.0};
  m.uninstrumented_ms = {50.0};
  m.graph_ms = {49.0};
  return m;
}

// bench block's "telemetry": the block over the uninstrumented repetitions (energy counter and
// mean power), each component with its own samples; unavailable: the reason only.
TEST(Telemetry, BlockReportFields) {
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  bench::BlockMeasurements m = block_measurements();
  bench::TelemetrySampler sampler(std::make_unique<FakeSource>());
  m.telemetry.header = sampler.header_json();
  const auto s = samples_at({0, 10, 20, 30, 40, 50});
  m.telemetry.block = bench::summarize(s, {{0, 50}});
  m.telemetry.block_energy = {1000.0, 61000.0, 2};
  m.telemetry.components["attention"] = bench::summarize(s, {{15, 35}});
  const nlohmann::json t = bench::block_report(H3Config::tiny(), layout, m).at("telemetry");
  EXPECT_TRUE(t.at("available").get<bool>());
  const auto& block = t.at("block");
  EXPECT_EQ(block.at("samples").get<int>(), 6);
  EXPECT_DOUBLE_EQ(block.at("joules_per_block").get<double>(), 30.0);  // 60 J over 2 blocks
  EXPECT_DOUBLE_EQ(block.at("joules_per_block_from_mean_power").get<double>(), 225.0 * 0.050);
  const auto& comps = t.at("components");
  for (const auto& name : bench::block_components()) EXPECT_TRUE(comps.contains(name)) << name;
  EXPECT_EQ(comps.at("attention").at("samples").get<int>(), 2);
  EXPECT_DOUBLE_EQ(comps.at("attention").at("power_w_mean").get<double>(), 225.0);
  EXPECT_DOUBLE_EQ(comps.at("attention").at("joules_from_mean_power").get<double>(), 9.0);
  EXPECT_EQ(comps.at("swiglu").at("samples").get<int>(), 0);
  EXPECT_TRUE(comps.at("swiglu").at("power_w_mean").is_null());
  EXPECT_FALSE(t.contains("sustained"));  // --sustain not given

  // --sustain: 4 blocks back to back over 200 ms of wall time, 100 J on the counter.
  m.telemetry.sustained = {bench::summarize(s, {{0, 20}}), {5000.0, 105000.0, 4}, 200.0};
  const nlohmann::json with = bench::block_report(H3Config::tiny(), layout, m);
  const auto& sus = with.at("telemetry").at("sustained");
  EXPECT_EQ(sus.at("blocks").get<int>(), 4);
  EXPECT_DOUBLE_EQ(sus.at("wall_ms_per_block").get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(sus.at("joules_per_block").get<double>(), 25.0);
  EXPECT_EQ(sus.at("samples").get<int>(), 3);
  EXPECT_DOUBLE_EQ(sus.at("joules_per_block_from_mean_power").get<double>(),
                   sus.at("power_w_mean").get<double>() * 0.050);

  bench::BlockMeasurements none = block_measurements();  // default: not measured
  const nlohmann::json u = bench::block_report(H3Config::tiny(), layout, none).at("telemetry");
  EXPECT_FALSE(u.at("available").get<bool>());
  EXPECT_FALSE(u.contains("block"));
}

// bench attention --sustain: the same fields named by the unit; nothing when the run did not
// happen; joules null when the energy counter could not be read.
TEST(Telemetry, SustainedRunFields) {
  const auto s = samples_at({0, 10, 20, 30});
  bench::SustainedRun r{bench::summarize(s, {{0, 30}}), {2000.0, 12000.0, 5}, 250.0};
  const nlohmann::json j = bench::sustained_json(r, "call");
  EXPECT_EQ(j.at("calls").get<int>(), 5);
  EXPECT_DOUBLE_EQ(j.at("wall_ms_per_call").get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(j.at("joules_per_call").get<double>(), 2.0);  // 10 J over 5 calls
  EXPECT_EQ(j.at("samples").get<int>(), 4);
  EXPECT_DOUBLE_EQ(j.at("joules_per_call_from_mean_power").get<double>(),
                   j.at("power_w_mean").get<double>() * 0.050);
  EXPECT_FALSE(j.contains("blocks"));

  r.energy.end_mj.reset();
  EXPECT_TRUE(bench::sustained_json(r, "call").at("joules_per_call").is_null());
  EXPECT_TRUE(bench::sustained_json(bench::SustainedRun{}, "call").is_null());
}

TEST(Telemetry, StepReportFields) {
  bench::StepMeasurements m;
  m.preset = "tiny";
  for (double w : {100.0, 120.0, 110.0}) {
    bench::StepRepetition r;
    r.wall_ms = w;
    m.eager.push_back(r);
    r.wall_ms = w - 20;
    m.graph.push_back(r);
  }
  bench::TelemetrySampler sampler(std::make_unique<FakeSource>());
  m.telemetry_header = sampler.header_json();
  m.eager_telemetry.power = bench::summarize(samples_at({0, 1}), {{0, 1}});
  m.eager_telemetry.energy = {0.0, 90000.0, 3};
  m.graph_telemetry.energy = {0.0, 50000.0, 2};
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  const nlohmann::json t = bench::step_report(H3Config::tiny(), layout, m).at("telemetry");
  EXPECT_DOUBLE_EQ(t.at("eager").at("joules_per_step").get<double>(), 30.0);
  EXPECT_EQ(t.at("eager").at("steps").get<int>(), 3);
  EXPECT_DOUBLE_EQ(t.at("eager").at("joules_per_step_from_mean_power").get<double>(),
                   205.0 * 0.110);  // mean power x the eager p50 step
  EXPECT_DOUBLE_EQ(t.at("cuda_graph").at("joules_per_step").get<double>(), 25.0);
  EXPECT_EQ(t.at("cuda_graph").at("samples").get<int>(), 0);
}

}  // namespace
}  // namespace h3rt
