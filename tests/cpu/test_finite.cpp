// --check-finite on the CPU: NaN/Inf in weights (scan at load), inputs and each stage's output is
// an error naming the tensor, block, row and step; checks never change the outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "ops/finite_check/finite_check.h"
#include "test_util.h"
#include "variant_files.h"

namespace h3rt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::map<std::string, Tensor> weights_with(const std::string& key, int64_t index, float value) {
  return test::golden_weights_with(key, index, value);
}

std::unique_ptr<Denoiser> denoiser(const std::map<std::string, Tensor>& w, CheckFinite check) {
  DenoiserOptions o;
  o.check_finite = check;
  return Denoiser::create(w, o);
}

SampleOptions steps(int n) {
  SampleOptions o;
  o.steps = n;
  return o;
}

// The NonFinite message of sampling `steps` steps, or "" when it ran through.
std::string sample_error(Denoiser& d, Request r, int n) {
  try {
    sample(d, std::move(r), steps(n));
  } catch (const NonFinite& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& msg, const std::string& needle) {
  EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
}

TEST(FiniteCheck, FirstNonFiniteOnBits) {
  std::vector<float> x(37, 1.0f);
  EXPECT_EQ(ops::first_non_finite_cpu(x.data(), 37), -1);
  x[20] = -kInf;
  x[30] = kNaN;
  EXPECT_EQ(ops::first_non_finite_cpu(x.data(), 37), 20);
  EXPECT_EQ(ops::first_non_finite_cpu(x.data() + 21, 16), 9);
  x[20] = std::numeric_limits<float>::max();  // finite extremes are finite
  x[30] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(ops::first_non_finite_cpu(x.data(), 37), -1);
  const std::vector<uint16_t> b = {0x3f80, 0xff7f, 0x7f80, 0xffc1};  // 1, -max, +Inf, NaN
  EXPECT_EQ(ops::first_non_finite_bf16_cpu(b.data(), 2), -1);
  EXPECT_EQ(ops::first_non_finite_bf16_cpu(b.data(), 4), 2);
  EXPECT_EQ(ops::first_non_finite_bf16_cpu(b.data() + 3, 1), 0);
}

TEST(FiniteCheck, NaNWeightNamesTheBlockAndStep) {
  const auto w = weights_with("blocks.1.mlp.fc2.weight", 5, kNaN);
  auto d = denoiser(w, CheckFinite::first_step);
  const std::string msg = sample_error(*d, test::small_request(d->config()), 2);
  expect_has(msg, "step 1: the output of block 1 (blocks.1.*) holds NaN at row ");
  expect_has(msg, ", column ");
  // Off: the run goes through (and its latents are NaN).
  auto off = denoiser(w, CheckFinite::off);
  const SampleResult r = sample(*off, test::small_request(off->config()), steps(1));
  EXPECT_TRUE(std::isnan(r.video_latents[0]));
}

TEST(FiniteCheck, WeightScanAtLoadNamesTheTensorAndElement) {
  const auto w = weights_with("blocks.0.attn.qkv_proj.weight", 192 * 3 + 7, kInf);
  try {
    denoiser(w, CheckFinite::every_step);
    ADD_FAILURE() << "loaded";
  } catch (const NonFinite& e) {
    expect_has(e.what(), "weight 'blocks.0.attn.qkv_proj.weight' holds +Inf at [3, 7]");
  }
  EXPECT_NO_THROW(denoiser(w, CheckFinite::first_step));  // no scan unless asked
  const auto b = weights_with("token_refiner.final_norm.weight", 2, kNaN);
  try {
    denoiser(b, CheckFinite::every_step);
    ADD_FAILURE() << "loaded";
  } catch (const NonFinite& e) {
    expect_has(e.what(), "weight 'token_refiner.final_norm.weight' holds NaN at [2]");
  }
}

TEST(FiniteCheck, RefinerAndInputStagesAreNamed) {
  auto d = denoiser(weights_with("token_refiner.blocks.0.mlp.fc1.weight", 0, kNaN),
                    CheckFinite::first_step);
  expect_has(sample_error(*d, test::small_request(d->config()), 1),
             "step 1: the token refiner's output (token_refiner.*) holds NaN at text token ");
  auto p = denoiser(weights_with("video_patch_proj.bias", 4, kNaN), CheckFinite::first_step);
  expect_has(sample_error(*p, test::small_request(p->config()), 1),
             "the packed input rows (patch projections and condition_proj) holds NaN at row ");
  expect_has(sample_error(*p, test::small_request(p->config()), 1), "(video row 0), column 4");
}

TEST(FiniteCheck, NonFiniteInputsAreNamed) {
  auto d = Denoiser::create(ModelSource{});
  Request r = test::small_request(d->config());
  r.video_rows[2 * 96 + 7] = kNaN;
  expect_has(sample_error(*d, r, 2),
             "step 1: the input video latents (patch rows) holds NaN at row 2, column 7");
  r = test::small_request(d->config());
  r.text[64 + 1] = -kInf;
  expect_has(sample_error(*d, r, 2), "the input text embeddings holds -Inf at row 1, column 1");
  r = test::small_request(d->config());
  r.audio_rows[3] = kInf;
  expect_has(sample_error(*d, r, 2), "the input audio latents (rows) holds +Inf at row 0");
}

// first_step checks step 0 of a run (and a denoiser's first forward); every_step every step.
TEST(FiniteCheck, FirstStepPolicy) {
  for (CheckFinite mode : {CheckFinite::first_step, CheckFinite::every_step}) {
    DenoiserOptions o;
    o.check_finite = mode;
    auto d = Denoiser::create(ModelSource{}, o);
    Request r = test::small_request(d->config());
    const TimestepPlan plan = make_timestep_plan(r.layout, 0.5f, 0.5f);
    ForwardInputs in{r.layout, plan, r.video_rows.data(), r.audio_rows.data(), r.text.data()};
    in.step = 0;
    d->forward(in);  // clean
    r.video_rows[0] = kNaN;
    in.step = 3;
    bool threw = false;
    try {
      d->forward(in);
    } catch (const NonFinite& e) {
      threw = true;
      expect_has(e.what(), "step 4: the input video latents");
    }
    EXPECT_EQ(threw, mode == CheckFinite::every_step);
    in.step = 0;
    EXPECT_THROW(d->forward(in), NonFinite);  // step 0 of the next run
  }
}

TEST(FiniteCheck, ChecksDoNotChangeTheOutputs) {
  DenoiserOptions on, off;
  on.check_finite = CheckFinite::every_step;
  off.check_finite = CheckFinite::off;
  auto a = Denoiser::create(ModelSource{}, on), b = Denoiser::create(ModelSource{}, off);
  const SampleResult ra = sample(*a, test::small_request(a->config()), steps(2));
  const SampleResult rb = sample(*b, test::small_request(b->config()), steps(2));
  test::expect_same_bits(ra.video_latents, rb.video_latents, "video_latents");
  test::expect_same_bits(ra.audio_latents, rb.audio_latents, "audio_latents");
}

TEST(FiniteCheck, CliNamesBlockAndStepAndOffRunsThrough) {
  const test::TempDir dir("h3rt_finite");
  const std::string bad = dir.file("nan.safetensors");
  NamedTensors out;
  for (const auto& [k, t] : weights_with("blocks.0.attn.out_proj.weight", 11, kNaN))
    out.emplace_back(k, t);
  write_safetensors(bad, out);
  const std::string args = "sample --checkpoint " + bad +
                           " --steps 1 --width 64 --height 64 --frames 1 --out " +
                           dir.file("o.safetensors");
  test::CliRun r = test::run_cli(args);
  EXPECT_EQ(r.status, 1) << r.output;
  expect_has(r.output, "h3rt: error: step 1: the output of block 0 (blocks.0.*) holds NaN");
  r = test::run_cli(args + " --check-finite all");
  EXPECT_EQ(r.status, 1) << r.output;
  expect_has(r.output, "weight 'blocks.0.attn.out_proj.weight' holds NaN at [0, 11]");
  r = test::run_cli(args + " --check-finite off");
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace h3rt
