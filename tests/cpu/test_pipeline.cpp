// The library API (h3rt/pipeline.h): models from files and from caller-owned tensors, the
// single forward at a sigma, and the sampling loop's progress and cancellation.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

const std::string kWeights = test::golden_dir() + "/weights.safetensors";
const std::string kGolden = test::golden_dir() + "/golden.safetensors";

std::unique_ptr<Denoiser> from_file() {
  ModelSource s;
  s.checkpoint = kWeights;
  return Denoiser::create(s);
}

double rel_max_err(const FloatVec& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return a.size() == b.size() ? num / den : 1e30;
}

float golden_sigma() {
  return SafetensorsFile::open(kGolden).get("fwd/sigma_video").to_f32()[0];
}

ForwardOutputs golden_forward(Denoiser& d) {
  const Request r = request_from_inputs(kGolden, d.config());
  return forward_at_sigma(d, r.layout, r.video_rows.data(), r.audio_rows.data(), r.text.data(),
                          golden_sigma());
}

TEST(Pipeline, ForwardAtSigmaMatchesFloat64Reference) {
  auto d = from_file();
  const ForwardOutputs v = golden_forward(*d);
  const SafetensorsFile g = SafetensorsFile::open(kGolden);
  EXPECT_LE(rel_max_err(v.video_velocity, g.get("fwd_f64/video_velocity").to_f64()), 1e-5);
  EXPECT_LE(rel_max_err(v.audio_velocity, g.get("fwd_f64/audio_velocity").to_f64()), 1e-5);
}

TEST(Pipeline, DenoiserFromCallerTensorsEqualsFromFile) {
  const SafetensorsFile f = SafetensorsFile::open(kWeights);
  std::map<std::string, Tensor> tensors;
  for (const auto& e : f.entries()) tensors[e.name] = f.get(e.name);
  auto a = Denoiser::create(tensors);
  auto b = from_file();
  EXPECT_EQ(a->config().hidden, b->config().hidden);
  const ForwardOutputs va = golden_forward(*a), vb = golden_forward(*b);
  test::expect_same_bits(va.video_velocity, vb.video_velocity, "video_velocity");
  test::expect_same_bits(va.audio_velocity, vb.audio_velocity, "audio_velocity");
  tensors.erase("final_layer.norm.weight");
  try {
    Denoiser::create(tensors);
    ADD_FAILURE() << "a missing tensor loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("final_layer.norm.weight"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, SampleReportsProgressAndCancels) {
  auto d = Denoiser::create(ModelSource{});
  const Request r = make_request(d->config(), {});
  std::vector<std::pair<int, int>> calls;
  SampleOptions o;
  o.steps = 2;
  o.progress = [&](int step, int steps, double) {
    calls.emplace_back(step, steps);
    return true;
  };
  const SampleResult res = sample(*d, r, o);
  EXPECT_EQ(calls, (std::vector<std::pair<int, int>>{{0, 2}, {1, 2}, {2, 2}}));
  EXPECT_EQ(res.stages.size(), 2u);
  EXPECT_EQ(res.video_shape, (Shape{1, 24, 7, 8, 12}));
  EXPECT_EQ(static_cast<int64_t>(res.video_latents.size()), shape_numel(res.video_shape));
  // The callback stops after step 1; the flag stops before the first step.
  o.progress = [](int step, int, double) { return step < 1; };
  EXPECT_THROW(sample(*d, r, o), Cancelled);
  std::atomic<bool> stop{true};
  o.progress = nullptr;
  o.cancel = &stop;
  EXPECT_THROW(sample(*d, r, o), Cancelled);
  o.cancel = nullptr;
  o.steps = 0;
  EXPECT_THROW(sample(*d, r, o), Error);
}

// audio_seconds: 0 means the video's length; a negative or non-finite length is an error (it
// used to mean the default too).
TEST(Pipeline, RequestAudioSecondsMustBeAFiniteNumber) {
  const H3Config c = *config_preset("tiny");
  RequestOptions o;
  EXPECT_EQ(make_request(c, o).layout.audio_len, 37);  // 22 frames at 24 fps, 40 latents/s
  o.audio_seconds = 0.5;
  EXPECT_EQ(make_request(c, o).layout.audio_len, 20);
  for (double bad : {-1.0, std::nan(""), double(INFINITY)}) {
    o.audio_seconds = bad;
    EXPECT_NE(test::error_of([&] { make_request(c, o); }).find("audio seconds must be"),
              std::string::npos)
        << bad;
  }
}

// A t2va layout without audio rows (audio_len 0 is a valid layout): the forward runs on text and
// video alone and returns no audio velocity. Before, the CPU linear refused the empty audio
// projection's null pointers ("linear: null pointer").
TEST(Pipeline, ForwardWithoutAudioRows) {
  auto d = Denoiser::create(ModelSource{});
  const H3Config& c = d->config();
  RequestOptions o;
  const Request with = make_request(c, o);
  const SequenceLayout l = make_t2va_layout(with.layout.text_len, 0, with.layout.frames,
                                            with.layout.height, with.layout.width);
  const ForwardOutputs none =
      forward_at_sigma(*d, l, with.video_rows.data(), nullptr, with.text.data(), 0.7f);
  const ForwardOutputs full = forward_at_sigma(*d, with.layout, with.video_rows.data(),
                                               with.audio_rows.data(), with.text.data(), 0.7f);
  EXPECT_TRUE(none.audio_velocity.empty());
  ASSERT_EQ(none.video_velocity.size(), full.video_velocity.size());
  for (float v : none.video_velocity) ASSERT_TRUE(std::isfinite(v));
  // Attention spans every row, so dropping the audio rows changes the video velocity.
  EXPECT_GT(test::rel_l2(none.video_velocity, full.video_velocity), 1e-4);
}

// ComfyUI's MiniMaxH3SigmaShift node changes the flow shifts, which _forward reads per call: the
// audio timestep is 1 - time_shift_sigma(sigma, video shift, audio shift) in float64 (here written
// out), on both the t2va reference path and ComfyUI's conditioned path; bad shifts are refused.
TEST(Pipeline, FlowShiftsSetTheAudioTimestep) {
  auto d = Denoiser::create(ModelSource{});
  const H3Config& c = d->config();
  Request r = make_request(c, RequestOptions{});
  const float sigma = 0.7f;
  const double sv = sigma, base = sv / (5.0 + sv * (1.0 - 5.0));
  const double sigma_a = 2.5 * base / (1.0 + 1.5 * base);  // video shift 5 -> audio shift 2.5
  EvalOptions o;
  o.shifts = {5.0, 2.5};
  auto forward_with = [&](const Request& q, const TimestepPlan& plan) {
    return d->forward({q.layout, plan, q.video_rows.data(), q.audio_rows.data(), q.text.data()});
  };
  const TimestepPlan t2va =
      make_timestep_plan(r.layout, 1.0f - sigma, 1.0f - static_cast<float>(sigma_a));
  const ForwardOutputs got = forward_request(*d, r, sigma, o);
  const ForwardOutputs want = forward_with(r, t2va);
  test::expect_same_bits(got.video_velocity, want.video_velocity, "t2va video");
  test::expect_same_bits(got.audio_velocity, want.audio_velocity, "t2va audio");
  EXPECT_NE(forward_request(*d, r, sigma).audio_velocity, got.audio_velocity);  // 12 -> 3

  Request comfy = r;
  condition_request(comfy, c, Conditioning{});
  const EvalTimes times{sv, 1.0 - sv, 1.0 - sigma_a};
  const ForwardOutputs got_c = forward_request(*d, comfy, sigma, o);
  const ForwardOutputs want_c = forward_with(comfy, make_conditioned_plan(comfy.layout, times));
  test::expect_same_bits(got_c.video_velocity, want_c.video_velocity, "comfy video");
  test::expect_same_bits(got_c.audio_velocity, want_c.audio_velocity, "comfy audio");

  o.shifts = {0.0, 3.0};
  EXPECT_NE(test::error_of([&] {
              forward_request(*d, r, sigma, o);
            }).find("video_shift must be a finite number > 0, got 0"),
            std::string::npos);
  o.shifts = {12.0, std::nan("")};
  EXPECT_NE(test::error_of([&] {
              forward_at_sigma(*d, r.layout, r.video_rows.data(), r.audio_rows.data(),
                               r.text.data(), sigma, {}, o.shifts);
            }).find("audio_shift must be a finite number > 0, got nan"),
            std::string::npos);
}

TEST(Pipeline, RejectsSageOnCpuAndBadWords) {
  DenoiserOptions o;
  o.attention = Attention::sage;
  EXPECT_THROW(Denoiser::create(ModelSource{}, o), Error);
  EXPECT_THROW(parse_device("gpu"), Error);
  EXPECT_THROW(parse_attention("fp8"), Error);
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
}

// --gemm's option words and the int8 group a preset gets by default: the largest of 256, 64, 16
// dividing every block projection's input (tiny: qkv/fc1 192, out 256, fc2 384 -> 64; h3: 5376
// and 14336 -> 256).
TEST(Pipeline, SyntheticGemmWordsAndInt8Group) {
  for (const char* w : {"bf16", "fp8", "int8", "nvfp4"})
    EXPECT_STREQ(synthetic_gemm_name(parse_synthetic_gemm(w)), w);
  EXPECT_THROW(parse_synthetic_gemm("int4", "--gemm"), Error);
  EXPECT_EQ(synthetic_int8_group(*config_preset("tiny"), -1), 64);
  EXPECT_EQ(synthetic_int8_group(*config_preset("h3"), -1), 256);
  EXPECT_EQ(synthetic_int8_group(*config_preset("tiny"), 16), 16);
  DenoiserOptions o;
  o.synthetic_gemm = SyntheticGemm::int8;
  EXPECT_THROW(Denoiser::create(ModelSource{}, o), Error);  // the CPU runs bf16/fp32 presets
}

}  // namespace
}  // namespace h3rt
