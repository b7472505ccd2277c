// The C API's version-5 fields (h3rt/h3rt.h): LoRAs at load, flow shifts per forward and per
// sample, and resumable sampling, each giving the C++ pipeline's bits.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "c_api_test_util.h"
#include "h3rt/h3rt.h"
#include "h3rt/lora.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

const std::string kWeights = test::golden_dir() + "/weights.safetensors";
const std::string kGolden = test::golden_dir() + "/golden.safetensors";

struct Golden {
  Request request;
  float sigma;
};
Golden golden_inputs(const H3Config& c) {
  return {request_from_inputs(kGolden, c),
          SafetensorsFile::open(kGolden).get("fwd/sigma_video").to_f32()[0]};
}

// The tiny golden model's forward through the C API at the given shifts.
struct CForward {
  h3rt_status status;
  FloatVec video, audio;
};
CForward c_forward(h3rt_model* m, const Golden& g, double video_shift, double audio_shift) {
  const SequenceLayout& L = g.request.layout;
  CForward f{H3RT_OK, FloatVec(L.video_rows() * 96), FloatVec(L.audio_rows() * 32)};
  f.status = h3rt_forward_t2va_shifted(m, L.text_len, L.audio_len, L.frames, L.height, L.width,
                                       g.sigma, video_shift, audio_shift,
                                       g.request.video_rows.data(), g.request.audio_rows.data(),
                                       g.request.text.data(), f.video.data(), f.audio.data());
  return f;
}

ForwardOutputs cpp_forward(Denoiser& d, const Golden& g, const FlowShifts& shifts = {}) {
  const Request& r = g.request;
  return forward_at_sigma(d, r.layout, r.video_rows.data(), r.audio_rows.data(), r.text.data(),
                          g.sigma, {}, shifts);
}

bool differs(const FloatVec& a, const FloatVec& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return true;
  return false;
}

std::unique_ptr<Denoiser> cpp_model(const std::vector<LoraSpec>& loras = {}) {
  ModelSource s;
  s.checkpoint = kWeights;
  DenoiserOptions o;
  o.loras = loras;
  return Denoiser::create(s, o);
}

// A turbo-shaped synthetic LoRA for the tiny model; with `misfit`, its first pair targets block
// 7, which the two-block model does not have.
std::string write_tiny_lora(const test::TempDir& dir, const std::string& name, bool misfit) {
  Lora l = make_synthetic_lora(*config_preset("tiny"), 4, 259, 3);
  if (misfit) {
    LoraPair& p = l.pairs.at(0);
    for (std::string* k : {&p.module, &p.up_key, &p.down_key, &p.alpha_key}) {
      const size_t at = k->find("blocks.0.");
      if (at != std::string::npos) k->replace(at, 9, "blocks.7.");
    }
  }
  const std::string path = dir.file(name);
  write_lora(path, l);
  return path;
}

TEST(CApiV5, LorasMergeAsTheCppOptionsDo) {
  test::TempDir dir;
  const std::string lora = write_tiny_lora(dir, "turbo.safetensors", false);
  auto plain = cpp_model();
  const Golden g = golden_inputs(plain->config());
  const ForwardOutputs base = cpp_forward(*plain, g);
  for (const bool given_strength : {true, false}) {
    const double strength = given_strength ? 0.5 : 1.0;
    const char* paths[] = {lora.c_str()};
    h3rt_model_options o;
    h3rt_model_options_init(&o);
    o.lora_paths = paths;
    o.lora_strengths = given_strength ? &strength : nullptr;
    o.num_loras = 1;
    h3rt_model* m = nullptr;
    ASSERT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
    auto d = cpp_model({{lora, strength}});
    const ForwardOutputs want = cpp_forward(*d, g);
    const CForward got = c_forward(m, g, 12.0, 3.0);
    ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
    test::expect_same_bits(got.video, want.video_velocity, "lora video");
    test::expect_same_bits(got.audio, want.audio_velocity, "lora audio");
    EXPECT_TRUE(differs(got.video, base.video_velocity)) << "the LoRA changed nothing";
    int pairs = -1, layers = -1;
    const char* skipped = nullptr;
    ASSERT_EQ(h3rt_model_lora_report(m, &pairs, &layers, &skipped), H3RT_OK);
    EXPECT_EQ(pairs, d->lora_report().pairs);
    EXPECT_GT(pairs, 0);
    EXPECT_EQ(layers, d->lora_report().layers);
    EXPECT_STREQ(skipped, "");
    h3rt_model_free(m);
  }
}

TEST(CApiV5, LoraErrorsNameTheOptionOrTheFile) {
  test::TempDir dir;
  const std::string misfit = write_tiny_lora(dir, "misfit.safetensors", true);
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  EXPECT_EQ(o.num_loras, 0);
  EXPECT_EQ(o.lora_paths, nullptr);
  EXPECT_EQ(o.cuda_graphs, 1);
  h3rt_model* m = nullptr;
  o.num_loras = 1;  // and no paths
  EXPECT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("options.num_loras"), std::string::npos)
      << h3rt_last_error();
  const std::string missing = dir.file("absent.safetensors");
  const char* paths[] = {missing.c_str()};
  o.lora_paths = paths;
  EXPECT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_ERROR_RUNTIME);
  EXPECT_NE(std::string(h3rt_last_error()).find(missing), std::string::npos) << h3rt_last_error();
  paths[0] = misfit.c_str();
  EXPECT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_ERROR_RUNTIME);
  EXPECT_NE(std::string(h3rt_last_error()).find("blocks.7"), std::string::npos)
      << h3rt_last_error();
  o.lora_skip_unmatched = 1;
  ASSERT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
  const char* skipped = nullptr;
  int pairs = 0;
  ASSERT_EQ(h3rt_model_lora_report(m, &pairs, nullptr, &skipped), H3RT_OK);
  EXPECT_NE(std::string(skipped).find("blocks.7"), std::string::npos) << skipped;
  EXPECT_GT(pairs, 0);
  EXPECT_EQ(h3rt_model_lora_report(nullptr, &pairs, nullptr, nullptr), H3RT_ERROR_INVALID_ARGUMENT);
  h3rt_model_free(m);
}

TEST(CApiV5, ShiftsReachTheForward) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create(kWeights.c_str(), nullptr, &m), H3RT_OK) << h3rt_last_error();
  auto d = cpp_model();
  const Golden g = golden_inputs(d->config());
  const ForwardOutputs want = cpp_forward(*d, g, {6.37, 2.9});
  const CForward got = c_forward(m, g, 6.37, 2.9);
  ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
  test::expect_same_bits(got.video, want.video_velocity, "shifted video");
  test::expect_same_bits(got.audio, want.audio_velocity, "shifted audio");
  EXPECT_TRUE(differs(got.audio, cpp_forward(*d, g).audio_velocity)) << "shifts changed nothing";
  for (const double bad : {0.0, -1.0}) {
    EXPECT_EQ(c_forward(m, g, 12.0, bad).status, H3RT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h3rt_last_error()).find("h3rt_forward_t2va_shifted: audio_shift"),
              std::string::npos)
        << h3rt_last_error();
  }
  h3rt_model_free(m);
}

using test::CSample;
using test::run_c_sample;

TEST(CApiV5, ShiftsReachTheSampler) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  EXPECT_EQ(req.video_shift, 0.0);
  EXPECT_EQ(req.checkpoint_file, nullptr);
  req.steps = 2;
  const CSample plain = run_c_sample(m, req);
  req.video_shift = 6.0;
  req.audio_shift = 2.0;
  const CSample got = run_c_sample(m, req);
  ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
  auto d = Denoiser::create(ModelSource{});
  SampleOptions o;
  o.steps = 2;
  o.video_shift = 6.0;
  o.audio_shift = 2.0;
  const SampleResult want = sample(*d, make_request(d->config(), {}), o);
  test::expect_same_bits(got.video, want.video_latents, "shifted video_latents");
  test::expect_same_bits(got.audio, want.audio_latents, "shifted audio_latents");
  EXPECT_TRUE(differs(got.video, plain.video)) << "the shifts changed nothing";
  req.audio_shift = -2.0;
  EXPECT_EQ(run_c_sample(m, req).status, H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("request: audio_shift"), std::string::npos)
      << h3rt_last_error();
  h3rt_model_free(m);
}

int cancel_after_step_1(int step, int, double, void*) {
  return step < 1;
}

TEST(CApiV5, CancelledRunsResumeToTheSameBits) {
  test::TempDir dir;
  const std::string file = dir.file("run.resume");
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  req.steps = 3;
  req.sampler = "res_multistep";  // a sampler with state carried across steps
  req.scheduler = "simple";
  const CSample whole = run_c_sample(m, req);
  ASSERT_EQ(whole.status, H3RT_OK) << h3rt_last_error();
  req.checkpoint_every = 1;  // without a file
  EXPECT_EQ(run_c_sample(m, req).status, H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("request.checkpoint_file"), std::string::npos);
  req.checkpoint_every = 0;
  req.checkpoint_file = file.c_str();
  req.progress = cancel_after_step_1;
  EXPECT_EQ(run_c_sample(m, req).status, H3RT_ERROR_CANCELLED);
  EXPECT_NE(std::string(h3rt_last_error()).find(file), std::string::npos) << h3rt_last_error();
  ASSERT_TRUE(std::filesystem::exists(file));
  // Another model's run: refused, naming the model key.
  h3rt_model* other = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 1, nullptr, &other), H3RT_OK);
  h3rt_sample_request resume = req;
  resume.progress = nullptr;
  resume.checkpoint_file = nullptr;
  resume.resume = file.c_str();
  EXPECT_EQ(run_c_sample(other, resume).status, H3RT_ERROR_RUNTIME);
  EXPECT_NE(std::string(h3rt_last_error()).find("weights seed 1"), std::string::npos)
      << h3rt_last_error();
  h3rt_model_free(other);
  const CSample resumed = run_c_sample(m, resume);
  ASSERT_EQ(resumed.status, H3RT_OK) << h3rt_last_error();
  test::expect_same_bits(resumed.video, whole.video, "resumed video_latents");
  test::expect_same_bits(resumed.audio, whole.audio, "resumed audio_latents");
  h3rt_model_free(m);
}

// A resume file records the LoRAs merged at load: another strength is another model.
TEST(CApiV5, ModelIdentityNamesTheLoras) {
  test::TempDir dir;
  const std::string lora = write_tiny_lora(dir, "turbo.safetensors", false);
  ModelSource s;
  s.checkpoint = kWeights;
  DenoiserOptions o;
  const std::string plain = model_identity(s, o);
  o.loras = {{lora, 1.0}};
  const std::string one = model_identity(s, o);
  o.loras = {{lora, 0.5}};
  const std::string half = model_identity(s, o);
  EXPECT_EQ(one.rfind(plain, 0), 0u) << one;  // the plain identity stays a prefix
  EXPECT_NE(one, plain);
  EXPECT_NE(one, half);
  EXPECT_NE(half.find("strength 0.5"), std::string::npos) << half;
}

}  // namespace
}  // namespace h3rt
