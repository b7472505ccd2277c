// The GPU self-test's host side (h3rt/selftest.h): every bound fails on data outside it and
// passes within it, the report's verdict and forms, the synthetic checkpoint it writes, and its
// error without a GPU. The GPU run itself: tests/cuda/test_selftest_cuda.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/spot_check.h"
#include "h3rt/check.h"
#include "h3rt/device.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"
#include "h3rt/selftest.h"
#include "ops/attention_sage/selftest.h"
#include "ops/int8_linear/selftest.h"
#include "pipeline/selftest_bounds.h"
#include "test_util.h"

namespace h3rt {
namespace {

using attention_sage::sage_selftest_failure;
using attention_sage::SageSelftest;
using selftest_detail::bf16_rule_failure;
using selftest_detail::sage_forward_failure;
using selftest_detail::velocity_error;
using selftest_detail::VelocityError;

TEST(Selftest, WithoutAGpuItIsAnErrorThatSaysSo) {
  if (cuda_current_device() >= 0)
    GTEST_SKIP() << "a GPU is present: tests/cuda/test_selftest_cuda.cpp";
  try {
    selftest();
    FAIL() << "selftest ran without a GPU";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("no CUDA device") != std::string::npos ||
                m.find("built without CUDA") != std::string::npos)
        << m;
  }
}

TEST(Selftest, VelocityErrorFigures) {
  const FloatVec ref = {1.0f, -2.0f, 2.0f}, got = {1.5f, -2.0f, 2.0f};
  const VelocityError e = velocity_error(got, ref);
  EXPECT_DOUBLE_EQ(e.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(e.mean_abs, 0.5 / 3);
  EXPECT_NEAR(e.rel_l2, 0.5 / 3.0, 1e-12);
  EXPECT_GT(e.cosine, 0.98);
  EXPECT_LT(e.cosine, 1.0);
  EXPECT_DOUBLE_EQ(velocity_error(ref, ref).rel_l2, 0.0);
  EXPECT_DOUBLE_EQ(velocity_error(ref, ref).cosine, 1.0);
  // A NaN, a length mismatch or nothing at all can never pass a bound.
  const FloatVec nan = {std::numeric_limits<float>::quiet_NaN(), -2.0f, 2.0f};
  for (const VelocityError& bad :
       {velocity_error(nan, ref), velocity_error(FloatVec{1.0f}, ref), velocity_error({}, {})}) {
    EXPECT_TRUE(std::isinf(bad.max_abs));
    EXPECT_EQ(bad.cosine, 0.0);
    EXPECT_NE(bf16_rule_failure(bad, {1.0, 1.0, 1.0, 0.5}, "video"), "");
    EXPECT_NE(sage_forward_failure(bad, "video"), "");
  }
}

TEST(Selftest, Bf16RuleBounds) {
  const VelocityError cpu{1e-3, 1e-2, 0, 1};
  EXPECT_EQ(bf16_rule_failure({2e-3, 3e-2, 0, 1}, cpu, "video"), "");
  const std::string mean = bf16_rule_failure({2.1e-3, 1e-2, 0, 1}, cpu, "audio");
  EXPECT_NE(mean.find("audio mean"), std::string::npos) << mean;
  const std::string max = bf16_rule_failure({1e-3, 3.1e-2, 0, 1}, cpu, "video");
  EXPECT_NE(max.find("video max"), std::string::npos) << max;
}

TEST(Selftest, SageForwardBounds) {
  EXPECT_EQ(sage_forward_failure({0, 0, 0.05, 0.999}, "video"), "");
  EXPECT_NE(sage_forward_failure({0, 0, 0.051, 0.9999}, "video"), "");
  EXPECT_NE(sage_forward_failure({0, 0, 0.01, 0.9989}, "audio"), "");
}

TEST(Selftest, SageKernelBounds) {
  SageSelftest ok;
  ok.rel_l2_sage = 4e-3, ok.ref_rel_l2_exact = 0.02, ok.rel_l2_exact = 0.024,
  ok.cosine_exact = 0.9995;
  EXPECT_EQ(sage_selftest_failure(ok), "");
  auto fails = [&](auto change, const char* word) {
    SageSelftest r = ok;
    change(r);
    const std::string f = sage_selftest_failure(r);
    EXPECT_NE(f.find(word), std::string::npos) << f;
  };
  fails([](SageSelftest& r) { r.prepass_mismatches = 1; }, "pre-pass");
  fails([](SageSelftest& r) { r.non_finite = 3; }, "NaN");
  fails([](SageSelftest& r) { r.rel_l2_sage = 4.1e-3; }, "CPU Sage reference");
  fails([](SageSelftest& r) { r.rel_l2_exact = 0.0243; }, "fp64");  // > 1.1 * 0.02 + 2e-3
  fails([](SageSelftest& r) { r.ref_rel_l2_exact = r.rel_l2_exact = 0.06; }, "fp64");  // > 0.05
  fails([](SageSelftest& r) { r.cosine_exact = 0.9989; }, "cosine");
  fails([](SageSelftest& r) { r.rel_l2_sage = std::nan(""); }, "CPU Sage reference");
}

// Sampled rows (S above kSampledFrom): the fp64 figures are not computed and not judged; the
// Sage reference bound still is.
TEST(Selftest, SageSampledRowsBounds) {
  SageSelftest r;
  r.exact_checked = false;
  r.rows_checked = 32;
  r.rel_l2_sage = 3e-3;
  r.rel_l2_exact = std::nan("");  // not computed
  EXPECT_EQ(sage_selftest_failure(r), "");
  r.rel_l2_sage = 5e-3;
  EXPECT_NE(sage_selftest_failure(r), "");
}

TEST(Selftest, Int8Bounds) {
  ops::Int8Selftest r;
  EXPECT_EQ(ops::int8_selftest_failure(r), "no row was checked");
  r.rows_checked = 16;
  EXPECT_EQ(ops::int8_selftest_failure(r), "");
  r.y_mismatches = 1;
  EXPECT_NE(ops::int8_selftest_failure(r).find("1 GEMM outputs of 16"), std::string::npos);
  r.scale_mismatches = 2;
  EXPECT_NE(ops::int8_selftest_failure(r).find("2 row scales"), std::string::npos);
  r.q_mismatches = 3;
  EXPECT_NE(ops::int8_selftest_failure(r).find("3 quantized values"), std::string::npos);
}

// The release-shape cases' row choice: the fixed rows first, then distinct drawn rows in [0, n),
// the same for the same seed; byte comparison counts differing elements.
TEST(Selftest, SpotRowsAndByteMismatches) {
  std::mt19937_64 a(5), b(5);
  const std::vector<int64_t> r = spot_rows(1000, {0, 999, 500}, 32, a);
  EXPECT_EQ(r, spot_rows(1000, {0, 999, 500}, 32, b));
  ASSERT_EQ(r.size(), 32u);
  EXPECT_EQ(std::vector<int64_t>(r.begin(), r.begin() + 3), (std::vector<int64_t>{0, 999, 500}));
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_TRUE(r[i] >= 0 && r[i] < 1000) << r[i];
    EXPECT_EQ(std::count(r.begin(), r.end(), r[i]), 1) << r[i];
  }
  std::mt19937_64 c(1);
  EXPECT_EQ(spot_rows(4, {}, 4, c).size(), 4u);  // every row of a short output
  const float x[] = {1.0f, 0.0f, 2.0f}, y[] = {1.0f, -0.0f, 3.0f};
  EXPECT_EQ(byte_mismatches(x, y, 3), 2);  // -0 differs from +0 in its bytes
  EXPECT_EQ(byte_mismatches(x, x, 3), 0);
}

TEST(Selftest, ReportVerdictAndForms) {
  SelftestReport r;
  r.device = "GPU X (sm_121)";
  r.cc = 121;
  r.seed = 42;
  EXPECT_FALSE(r.passed()) << "no case ran";
  SelftestCase skip{"sage attention S=77 H=3", true, false, "not here", 0};
  r.cases.push_back(skip);
  EXPECT_FALSE(r.passed()) << "only skipped cases";
  r.cases.push_back({"forward bf16", false, true, "video mean ...", 0.5});
  EXPECT_TRUE(r.passed());
  r.cases.push_back({"forward nvfp4", false, false, "video max |error| 1 > 3x ...", 0.25});
  EXPECT_FALSE(r.passed());
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["compute_capability"], "12.1");
  EXPECT_EQ(j["seed"], 42u);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["gpu_suite_ran_on_this_arch"], false);
  ASSERT_EQ(j["cases"].size(), 3u);
  EXPECT_EQ(j["cases"][0]["result"], "skipped");
  EXPECT_EQ(j["cases"][1]["result"], "passed");
  EXPECT_EQ(j["cases"][2]["result"], "failed");
  const std::string t = format_selftest(r);
  EXPECT_NE(t.find("FAIL    forward nvfp4"), std::string::npos) << t;
  EXPECT_NE(t.find("FAILED: 1 of 2 cases"), std::string::npos) << t;
  EXPECT_NE(t.find("sm_90 only"), std::string::npos) << t;
  EXPECT_EQ(untested_arch_note(90), "");
  EXPECT_EQ(untested_arch_note(0), "");
  EXPECT_NE(untested_arch_note(121).find("sm_121 GPU run `h3rt selftest`"), std::string::npos);
  EXPECT_TRUE(gpu_suite_ran_on(90));
  EXPECT_FALSE(gpu_suite_ran_on(121));
  EXPECT_FALSE(gpu_suite_ran_on(100));
}

// The checkpoint the self-test writes loads back as make_synthetic_model's weights: the same
// CPU forward, bit for bit.
TEST(Selftest, SyntheticCheckpointIsTheSyntheticModel) {
  const H3Config c = H3Config::tiny();
  const std::string path = ::testing::TempDir() + "/h3rt_synthetic_checkpoint.safetensors";
  write_safetensors(path, synthetic_checkpoint(c, 77));
  const H3Model file = load_model(path), mem = make_synthetic_model(c, 77);
  const SequenceLayout layout = make_t2va_layout(4, 3, 2, 4, 4);
  std::vector<float> video(layout.video_rows() * c.video_features(), 0.25f),
      audio(layout.audio_rows() * c.audio_channels, -0.5f),
      text(layout.text_len * c.text_dim, 0.1f);
  const TimestepPlan plan = make_timestep_plan(layout, 0.4f, 0.7f);
  const ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
  const ForwardOutputs a = forward_cpu(file, in, Precision::fp32),
                       b = forward_cpu(mem, in, Precision::fp32);
  ASSERT_EQ(a.video_velocity.size(), b.video_velocity.size());
  EXPECT_EQ(std::memcmp(a.video_velocity.data(), b.video_velocity.data(),
                        a.video_velocity.size() * sizeof(float)),
            0);
  EXPECT_EQ(a.audio_velocity, b.audio_velocity);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace h3rt
