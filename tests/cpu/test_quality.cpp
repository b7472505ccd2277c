// The latent comparison metrics (h3rt/quality.h) on pairs with known answers, the file
// comparison's errors, and `h3rt sample --gate` / `h3rt compare` end to end on the tiny preset.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "h3rt/quality.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

const Shape kVideo = {1, 3, 2, 8, 12};  // C 3, T 2, Hl 8, Wl 12

std::vector<float> ramp(const Shape& shape) {
  std::vector<float> v(shape_numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * float(i)) + 0.01f * float(i % 17);
  return v;
}

double range_of(const std::vector<float>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return double(*hi) - double(*lo);
}

TEST(Quality, IdenticalLatents) {
  const std::vector<float> a = ramp(kVideo);
  const VideoComparison v = compare_video(a.data(), a.data(), kVideo);
  ASSERT_EQ(v.frames.size(), 2u);
  for (const Similarity& s : {v.frames[0], v.frames[1], v.overall}) {
    EXPECT_EQ(s.rel_l2, 0.0);
    EXPECT_NEAR(s.cosine, 1.0, 1e-12);
    EXPECT_TRUE(std::isinf(s.psnr_db) && s.psnr_db > 0);
    EXPECT_NEAR(s.ssim, 1.0, 1e-12);
  }
  const AudioComparison au = compare_audio(a.data(), a.data(), {2, 4, 36});
  EXPECT_EQ(au.pearson, 1.0);
  EXPECT_EQ(au.rel_l2, 0.0);
}

// B = A +- e (alternating signs): MSE = e^2 exactly, so PSNR = 10 log10(R^2 / e^2) with R the
// reference's range; frames and overall alike.
TEST(Quality, KnownNoiseLevelGivesTheAnalyticPsnr) {
  const std::vector<float> a = ramp(kVideo);
  const float e = 0.0625f;
  std::vector<float> b(a.size());
  for (size_t i = 0; i < a.size(); ++i) b[i] = a[i] + ((i % 2) ? e : -e);
  const VideoComparison v = compare_video(a.data(), b.data(), kVideo);
  const double r = range_of(a);
  EXPECT_DOUBLE_EQ(v.data_range, r);
  // the float32 additions round a + e a little: allow a small tolerance on the MSE
  const double want = 10 * std::log10(r * r / (double(e) * e));
  for (const Similarity& s : {v.frames[0], v.frames[1], v.overall}) {
    EXPECT_NEAR(s.psnr_db, want, 1e-4);
    EXPECT_LT(s.ssim, 1.0);
    EXPECT_GT(s.ssim, 0.5);
  }
}

TEST(Quality, ScaledCopyHasCosineOne) {
  const std::vector<float> a = ramp(kVideo);
  std::vector<float> b(a.size());
  for (size_t i = 0; i < a.size(); ++i) b[i] = 2.0f * a[i];  // exact
  const VideoComparison v = compare_video(a.data(), b.data(), kVideo);
  EXPECT_NEAR(v.overall.cosine, 1.0, 1e-12);
  EXPECT_NEAR(v.overall.rel_l2, 1.0, 1e-12);  // ||2A - A|| / ||A||
  const AudioComparison au = compare_audio(a.data(), b.data(), {2, 4, 36});
  EXPECT_NEAR(au.pearson, 1.0, 1e-12);
  EXPECT_NEAR(au.rel_l2, 1.0, 1e-12);
  for (size_t i = 0; i < a.size(); ++i) b[i] = -a[i];
  EXPECT_NEAR(compare_video(a.data(), b.data(), kVideo).overall.cosine, -1.0, 1e-12);
  EXPECT_NEAR(compare_audio(a.data(), b.data(), {2, 4, 36}).pearson, -1.0, 1e-12);
}

// One 2x2 window (plane smaller than 7): A = [1 -1; -1 1] (mean 0, sample variance 4/3), B = -A
// (covariance -4/3), R = 2: SSIM = (C2 - 8/3) / (C2 + 8/3) with C2 = (0.03 R)^2.
TEST(Quality, SsimOfANegatedPlaneIsAnalytic) {
  const std::vector<float> a = {1, -1, -1, 1}, b = {-1, 1, 1, -1};
  const VideoComparison v = compare_video(a.data(), b.data(), {1, 1, 1, 2, 2});
  const double c2 = 0.06 * 0.06;
  EXPECT_NEAR(v.overall.ssim, (c2 - 8.0 / 3) / (c2 + 8.0 / 3), 1e-12);
  EXPECT_NEAR(v.frames[0].ssim, v.overall.ssim, 0);
}

std::string tmp(const std::string& name) {
  static const test::TempDir dir("h3rt_quality");
  return dir.file(name);
}

void write_latents(const std::string& path, const std::vector<float>& video, const Shape& vs,
                   const std::vector<float>& audio, const Shape& as) {
  NamedTensors t = {{"video_latents", tensor_from_f32(video, vs)}};
  if (!audio.empty()) t.push_back({"audio_latents", tensor_from_f32(audio, as)});
  write_safetensors(path, t);
}

std::string error_of(const std::string& a, const std::string& b) {
  try {
    compare_latent_files(a, b);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Quality, FileErrorsNameFileAndTensor) {
  const std::vector<float> v = ramp(kVideo), au = ramp({2, 4, 36});
  write_latents(tmp("a.st"), v, kVideo, au, {2, 4, 36});
  write_latents(tmp("b.st"), v, kVideo, std::vector<float>(2 * 4 * 35, 0.f), {2, 4, 35});
  write_latents(tmp("c.st"), v, kVideo, {}, {});
  const std::string shape = error_of(tmp("a.st"), tmp("b.st"));
  EXPECT_NE(shape.find("tensor 'audio_latents'"), std::string::npos) << shape;
  EXPECT_NE(shape.find(tmp("a.st")), std::string::npos) << shape;
  EXPECT_NE(shape.find(tmp("b.st")), std::string::npos) << shape;
  EXPECT_NE(shape.find("[2, 4, 35]"), std::string::npos) << shape;
  const std::string missing = error_of(tmp("a.st"), tmp("c.st"));
  EXPECT_NE(missing.find(tmp("c.st") + " has no tensor 'audio_latents'"), std::string::npos)
      << missing;
  const LatentComparison c = compare_latent_files(tmp("a.st"), tmp("a.st"));
  ASSERT_TRUE(c.video && c.audio);
  const nlohmann::json j = to_json(c);
  EXPECT_TRUE(j["video"]["overall"]["psnr_db"].is_null()) << "infinite PSNR as null";
  EXPECT_EQ(j["video"]["frames"].size(), 2u);
  EXPECT_EQ(j["audio"]["pearson"].get<double>(), 1.0);
  EXPECT_NE(format_latent_comparison(c).find("overall"), std::string::npos);
}

// The gate on the tiny preset: both runs written, the report holds the comparison and both
// times, and `h3rt compare` on the two files gives the same figures.
TEST(Quality, SampleGateAndCompareCli) {
  const std::string out = tmp("gate.safetensors"), report = tmp("gate_report.json");
  const test::CliRun r = test::run_cli(
      "sample --width 64 --height 64 --frames 5 --text-tokens 3 --steps 4 --step-cache 50 "
      "--step-cache-max 2 --gate --out " +
      out + " --report " + report);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(std::ifstream(out).good()) << "--gate writes the named files only";
  const std::string dense = tmp("gate.dense.safetensors"), approx = tmp("gate.approx.safetensors");
  nlohmann::json rep;
  std::ifstream(report) >> rep;
  const nlohmann::json& g = rep["gate"];
  EXPECT_GT(g["dense_seconds"].get<double>(), 0);
  EXPECT_GT(g["approx_seconds"].get<double>(), 0);
  EXPECT_EQ(g["files"]["dense"], dense);
  EXPECT_EQ(rep["hybrid"]["reused_steps"].get<int>(), 2);  // C R R C: cap 2
  EXPECT_EQ(rep["hybrid"]["steps"][1]["step_cache"], "reused");
  const LatentComparison c = compare_latent_files(dense, approx);
  const double ssim = g["comparison"]["video"]["overall"]["ssim"].get<double>();
  EXPECT_DOUBLE_EQ(ssim, c.video->overall.ssim);
  EXPECT_LT(ssim, 1.0) << "reused steps move the latents";
  const test::CliRun cmp =
      test::run_cli("compare " + dense + " " + approx + " --json " + tmp("cmp.json"));
  ASSERT_EQ(cmp.status, 0) << cmp.output;
  EXPECT_NE(cmp.output.find("overall"), std::string::npos) << cmp.output;
  nlohmann::json j;
  std::ifstream(tmp("cmp.json")) >> j;
  EXPECT_DOUBLE_EQ(j["video"]["overall"]["ssim"].get<double>(), ssim);
  std::ifstream gate_json(tmp("gate.gate.json"));
  EXPECT_TRUE(gate_json.good());
}

}  // namespace
}  // namespace h3rt
