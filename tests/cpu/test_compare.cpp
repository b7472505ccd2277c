#include <gtest/gtest.h>

#include "h3rt/compare.h"

namespace h3rt {
namespace {

TEST(CompareTimings, PairsTimeFieldsPresentInBothAndComputesSpeedups) {
  const auto before = nlohmann::json::parse(R"({
    "representative_block_p50_milliseconds": {"attention": 160.0, "swiglu": 1.5, "only_old": 3},
    "sampling_stage_seconds_per_step": [{"denoiser": 10.0}],
    "reps": 10, "device": "x"})");
  const auto after = nlohmann::json::parse(R"({
    "representative_block_p50_milliseconds": {"attention": 40.0, "swiglu": 2.0},
    "sampling_stage_seconds_per_step": [{"denoiser": 5.0}],
    "reps": 20})");
  const auto rows = compare_timings(before, after);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].path, "representative_block_p50_milliseconds/attention");
  EXPECT_DOUBLE_EQ(rows[0].speedup(), 4.0);
  EXPECT_DOUBLE_EQ(rows[1].speedup(), 0.75);
  EXPECT_EQ(rows[2].path, "sampling_stage_seconds_per_step/0/denoiser");
  EXPECT_DOUBLE_EQ(rows[2].speedup(), 2.0);
  const std::string table = format_comparison(rows, "old", "new");
  EXPECT_NE(table.find("4.000x"), std::string::npos) << table;
}

// Energies from the bench telemetry pair like times: old / new, above 1 when the new used less.
TEST(CompareTimings, PairsEnergies) {
  const auto before = nlohmann::json::parse(
      R"({"telemetry": {"block": {"joules_per_block": 46.0, "power_w_mean": 650}}})");
  const auto after = nlohmann::json::parse(
      R"({"telemetry": {"block": {"joules_per_block": 40.0, "power_w_mean": 600}}})");
  const auto rows = compare_timings(before, after);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].path, "telemetry/block/joules_per_block");
  EXPECT_DOUBLE_EQ(rows[0].speedup(), 46.0 / 40.0);
}

}  // namespace
}  // namespace h3rt
