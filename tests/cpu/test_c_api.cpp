// The C API (h3rt/h3rt.h): the C++ pipeline's bits, with statuses and thread-local messages
// instead of exceptions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "c_api_test_util.h"
#include "h3rt/device.h"
#include "h3rt/h3rt.h"
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

float golden_sigma() {
  return SafetensorsFile::open(kGolden).get("fwd/sigma_video").to_f32()[0];
}

ForwardOutputs golden_forward(Denoiser& d) {
  const Request r = request_from_inputs(kGolden, d.config());
  return forward_at_sigma(d, r.layout, r.video_rows.data(), r.audio_rows.data(), r.text.data(),
                          golden_sigma());
}

// API version 7: h3rt_selftest refuses a NULL result and, without a GPU, fails naming why.
TEST(CApi, SelftestArgumentsAndWithoutAGpu) {
  const char* json = nullptr;
  EXPECT_EQ(h3rt_selftest(1, nullptr, &json), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("passed is NULL"), std::string::npos);
  if (cuda_current_device() >= 0) GTEST_SKIP() << "a GPU is present: CApiV7Cuda runs it";
  int passed = -1;
  EXPECT_EQ(h3rt_selftest(0, &passed, &json), H3RT_ERROR_RUNTIME);
  EXPECT_EQ(passed, -1);
  const std::string e = h3rt_last_error();
  EXPECT_TRUE(e.find("no CUDA device") != std::string::npos ||
              e.find("built without CUDA") != std::string::npos)
      << e;
}

TEST(CApi, VersionAndErrors) {
  EXPECT_EQ(h3rt_api_version(), H3RT_API_VERSION);
  EXPECT_STREQ(h3rt_version(), "0.1.0");
  h3rt_model* m = reinterpret_cast<h3rt_model*>(1);
  EXPECT_EQ(h3rt_model_create("/no/such/file.safetensors", nullptr, &m), H3RT_ERROR_RUNTIME);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(h3rt_last_error()).find("/no/such/file.safetensors"), std::string::npos)
      << h3rt_last_error();
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  o.device = "gpu";
  EXPECT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("options.device"), std::string::npos)
      << h3rt_last_error();
  EXPECT_EQ(h3rt_model_create(nullptr, nullptr, &m), H3RT_ERROR_INVALID_ARGUMENT);
  h3rt_model_free(nullptr);
}

TEST(CApi, DeviceMemoryLimitOption) {
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  EXPECT_EQ(o.device_memory_limit, nullptr);
  h3rt_model* m = nullptr;
  o.device_memory_limit = "24 elephants";
  EXPECT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("options.device_memory_limit"), std::string::npos)
      << h3rt_last_error();
  o.device_memory_limit = "24GB";  // the CPU backend has no device memory to limit
  EXPECT_NE(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK);
  EXPECT_NE(std::string(h3rt_last_error()).find("device_memory_limit applies to device cuda"),
            std::string::npos)
      << h3rt_last_error();
  o.device_memory_limit = "0";
  ASSERT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
  h3rt_model_free(m);
  o.device_memory_limit = "auto";  // on the CPU: no limit
  ASSERT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
  h3rt_model_free(m);
}

TEST(CApi, WeightStreamSourceOption) {
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  EXPECT_EQ(o.weight_stream_source, nullptr);
  h3rt_model* m = nullptr;
  o.weight_stream_source = "disk";
  EXPECT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error())
                .find("options.weight_stream_source must be auto, "
                      "pinned or file, got 'disk'"),
            std::string::npos)
      << h3rt_last_error();
  o.weight_stream_source = "file";  // without a limit nothing streams: said, not ignored
  EXPECT_NE(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK);
  EXPECT_NE(std::string(h3rt_last_error()).find("weight_stream_source file applies when"),
            std::string::npos)
      << h3rt_last_error();
  o.weight_stream_source = "auto";
  ASSERT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
  h3rt_model_free(m);
}

TEST(CApi, CheckFiniteOption) {
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  h3rt_model* m = nullptr;
  o.check_finite = "sometimes";
  EXPECT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("options.check_finite"), std::string::npos)
      << h3rt_last_error();
  // The golden t2va shape (text 10, audio 9, 7 x 8 x 12 latents) with one NaN input value.
  std::vector<float> v(7 * 4 * 6 * 96, 0.0f), a(18 * 32, 0.0f), t(10 * 64, 0.0f);
  std::vector<float> vv(v.size()), va(a.size());
  v[100] = NAN;
  for (const char* mode : {"first", "off"}) {
    o.check_finite = mode;
    ASSERT_EQ(h3rt_model_create(kWeights.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
    const h3rt_status st = h3rt_forward_t2va(m, 10, 9, 7, 8, 12, 0.5f, v.data(), a.data(), t.data(),
                                             vv.data(), va.data());
    if (std::string(mode) == "first") {
      EXPECT_EQ(st, H3RT_ERROR_RUNTIME);
      EXPECT_NE(std::string(h3rt_last_error()).find("input video latents"), std::string::npos)
          << h3rt_last_error();
    } else {
      EXPECT_EQ(st, H3RT_OK) << h3rt_last_error();
      EXPECT_TRUE(std::any_of(vv.begin(), vv.end(), [](float x) { return std::isnan(x); }));
    }
    h3rt_model_free(m);
  }
}

TEST(CApi, ForwardsGiveTheCppBits) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create(kWeights.c_str(), nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_config c{};
  ASSERT_EQ(h3rt_model_config(m, &c), H3RT_OK);
  EXPECT_EQ(c.hidden, 192);
  EXPECT_EQ(c.video_features, 96);
  auto d = from_file();
  const Request r = request_from_inputs(kGolden, d->config());
  const ForwardOutputs want = golden_forward(*d);
  const SequenceLayout& L = r.layout;
  FloatVec vv(want.video_velocity.size()), av(want.audio_velocity.size());
  ASSERT_EQ(h3rt_forward_t2va(m, L.text_len, L.audio_len, L.frames, L.height, L.width,
                              golden_sigma(), r.video_rows.data(), r.audio_rows.data(),
                              r.text.data(), vv.data(), av.data()),
            H3RT_OK)
      << h3rt_last_error();
  test::expect_same_bits(vv, want.video_velocity, "t2va video");
  test::expect_same_bits(av, want.audio_velocity, "t2va audio");
  // The plain-array form, with the layout's own arrays and the same timestep plan.
  const float s = golden_sigma();
  const TimestepPlan plan = make_timestep_plan(L, 1.0f - s, 1.0f - audio_sigma_from_video(s));
  const h3rt_layout cl{L.text_len,
                       L.audio_len,
                       L.frames,
                       L.height,
                       L.width,
                       L.text_indices.data(),
                       L.audio_indices.data(),
                       L.video_indices.data(),
                       L.token_tags.data(),
                       L.position_ids.data()};
  const h3rt_timesteps ct{plan.timestep.data(),
                          static_cast<int64_t>(plan.timestep.size()),
                          plan.timestep_indices.data(),
                          0,
                          nullptr,
                          0};
  std::fill(vv.begin(), vv.end(), 0.0f);
  ASSERT_EQ(h3rt_forward(m, &cl, &ct, r.video_rows.data(), r.audio_rows.data(), r.text.data(),
                         vv.data(), av.data()),
            H3RT_OK)
      << h3rt_last_error();
  test::expect_same_bits(vv, want.video_velocity, "forward video");
  std::vector<int64_t> bad = plan.timestep_indices;
  bad[0] = 7;
  const h3rt_timesteps cb{plan.timestep.data(), 2, bad.data(), 0, nullptr, 0};
  EXPECT_EQ(h3rt_forward(m, &cl, &cb, r.video_rows.data(), r.audio_rows.data(), r.text.data(),
                         vv.data(), av.data()),
            H3RT_ERROR_INVALID_ARGUMENT);
  // Device rows on a CPU model: refused, naming the device (the pointers are not read).
  EXPECT_EQ(h3rt_forward_device(m, &cl, &ct, r.video_rows.data(), r.audio_rows.data(),
                                r.text.data(), vv.data(), av.data(), nullptr),
            H3RT_ERROR_RUNTIME);
  EXPECT_NE(std::string(h3rt_last_error()).find("device cpu"), std::string::npos)
      << h3rt_last_error();
  EXPECT_EQ(h3rt_forward_device(m, &cl, &ct, nullptr, r.audio_rows.data(), r.text.data(), vv.data(),
                                av.data(), nullptr),
            H3RT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(h3rt_last_error()).find("h3rt_forward_device"), std::string::npos);
  h3rt_model_free(m);
}

// A layout without audio rows: NULL audio buffers are accepted (and still refused when there
// are audio rows), and the result is the C++ forward's.
TEST(CApi, ForwardWithoutAudioRowsTakesNullAudioBuffers) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create(kWeights.c_str(), nullptr, &m), H3RT_OK) << h3rt_last_error();
  auto d = from_file();
  const Request r = request_from_inputs(kGolden, d->config());
  const SequenceLayout& L = r.layout;
  const SequenceLayout none = make_t2va_layout(L.text_len, 0, L.frames, L.height, L.width);
  const ForwardOutputs want =
      forward_at_sigma(*d, none, r.video_rows.data(), nullptr, r.text.data(), 0.6f);
  FloatVec vv(want.video_velocity.size());
  ASSERT_EQ(h3rt_forward_t2va(m, L.text_len, 0, L.frames, L.height, L.width, 0.6f,
                              r.video_rows.data(), nullptr, r.text.data(), vv.data(), nullptr),
            H3RT_OK)
      << h3rt_last_error();
  test::expect_same_bits(vv, want.video_velocity, "t2va video without audio");
  EXPECT_EQ(h3rt_forward_t2va(m, L.text_len, L.audio_len, L.frames, L.height, L.width, 0.6f,
                              r.video_rows.data(), nullptr, r.text.data(), vv.data(), nullptr),
            H3RT_ERROR_INVALID_ARGUMENT);
  h3rt_model_free(m);
}

int stop_after_first(int step, int, double, void* calls) {
  ++*static_cast<int*>(calls);
  return step < 1;
}

TEST(CApi, SampleGivesTheCppBitsAndCancels) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  req.steps = 2;
  int64_t vs[5], as[3];
  ASSERT_EQ(h3rt_sample_shapes(m, &req, vs, as), H3RT_OK);
  EXPECT_EQ(std::vector<int64_t>(vs, vs + 5), (std::vector<int64_t>{1, 24, 7, 8, 12}));
  EXPECT_EQ(std::vector<int64_t>(as, as + 3), (std::vector<int64_t>{2, 32, 37}));
  FloatVec v(shape_numel({vs, vs + 5})), a(shape_numel({as, as + 3}));
  ASSERT_EQ(h3rt_sample(m, &req, v.data(), static_cast<int64_t>(v.size()), a.data(),
                        static_cast<int64_t>(a.size())),
            H3RT_OK)
      << h3rt_last_error();
  auto d = Denoiser::create(ModelSource{});
  SampleOptions o;
  o.steps = 2;
  const SampleResult want = sample(*d, make_request(d->config(), {}), o);
  test::expect_same_bits(v, want.video_latents, "video_latents");
  test::expect_same_bits(a, want.audio_latents, "audio_latents");
  EXPECT_EQ(h3rt_sample(m, &req, v.data(), 10, a.data(), 10), H3RT_ERROR_INVALID_ARGUMENT);
  int calls = 0;
  req.progress = stop_after_first;
  req.progress_user = &calls;
  EXPECT_EQ(h3rt_sample(m, &req, v.data(), static_cast<int64_t>(v.size()), a.data(),
                        static_cast<int64_t>(a.size())),
            H3RT_ERROR_CANCELLED);
  EXPECT_EQ(calls, 2);
  h3rt_model_free(m);
}

using test::CSample;
using test::run_c_sample;

// The request's seed seeds the sampler's own noise too (euler_ancestral), as `h3rt sample --seed`.
TEST(CApi, SeedReachesTheAncestralNoise) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  req.steps = 3;
  req.seed = 7;
  req.sampler = "euler_ancestral";
  req.scheduler = "simple";
  const CSample got = run_c_sample(m, req);
  ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
  auto d = Denoiser::create(ModelSource{});
  RequestOptions ro;
  ro.seed = 7;
  SampleOptions o;
  o.steps = 3;
  o.sampler = parse_sampler("euler_ancestral", "sampler");
  o.scheduler = parse_scheduler("simple", "scheduler");
  o.noise_seed = 7;
  const SampleResult want = sample(*d, make_request(d->config(), ro), o);
  test::expect_same_bits(got.video, want.video_latents, "video_latents");
  test::expect_same_bits(got.audio, want.audio_latents, "audio_latents");
  h3rt_model_free(m);
}

TEST(CApi, HybridSampleGivesTheCppBits) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  EXPECT_EQ(req.dense_steps, 10);
  EXPECT_EQ(req.dense_blocks, 2);
  EXPECT_EQ(req.step_cache_max, 3);
  req.steps = 3;
  req.sparse_attention = 1.0f;
  req.dense_steps = 1;
  req.dense_blocks = 1;
  req.step_cache = 50.0;
  req.step_cache_max = 1;
  const CSample got = run_c_sample(m, req);
  ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
  auto d = Denoiser::create(ModelSource{});
  SampleOptions o;
  o.steps = 3;
  o.hybrid.sparse.tau = 1.0f;
  o.hybrid.sparse.dense_blocks = 1;
  o.hybrid.dense_steps = 1;
  o.step_cache.threshold = 50.0;
  o.step_cache.max_reuses = 1;
  const SampleResult want = sample(*d, make_request(d->config(), {}), o);
  test::expect_same_bits(got.video, want.video_latents, "video_latents");
  test::expect_same_bits(got.audio, want.audio_latents, "audio_latents");
  ASSERT_EQ(want.hybrid_steps.size(), 3u);
  EXPECT_TRUE(want.hybrid_steps[1].cache.reused);  // the options reached the loop
  req.step_cache_max = 0;
  EXPECT_EQ(run_c_sample(m, req).status, H3RT_ERROR_INVALID_ARGUMENT) << h3rt_last_error();
  EXPECT_NE(std::string(h3rt_last_error()).find("max_reuses"), std::string::npos);
  h3rt_model_free(m);
}

TEST(CApi, SparseCheckFieldsReachTheLoop) {
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  EXPECT_EQ(req.sparse_check, 0);
  EXPECT_EQ(req.sparse_check_bound, 0.05);
  req.steps = 3;
  req.sparse_attention = 0.5f;
  req.dense_steps = 1;
  req.dense_blocks = 0;
  req.sparse_check = 1;
  req.sparse_check_bound = 0.0;
  const CSample got = run_c_sample(m, req);
  ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
  auto d = Denoiser::create(ModelSource{});
  SampleOptions o;
  o.steps = 3;
  o.hybrid.sparse.tau = 0.5f;
  o.hybrid.sparse.dense_blocks = 0;
  o.hybrid.dense_steps = 1;
  o.hybrid.check.every = 1;
  o.hybrid.check.bound = 0.0;
  const SampleResult want = sample(*d, make_request(d->config(), {}), o);
  test::expect_same_bits(got.video, want.video_latents, "video_latents");
  test::expect_same_bits(got.audio, want.audio_latents, "audio_latents");
  ASSERT_EQ(want.hybrid_steps.size(), 3u);
  EXPECT_TRUE(want.hybrid_steps[1].check.checked);  // the options reached the loop
  EXPECT_GT(want.hybrid_steps[1].check.dense_heads, 0);
  req.sparse_check = -1;
  EXPECT_EQ(run_c_sample(m, req).status, H3RT_ERROR_INVALID_ARGUMENT) << h3rt_last_error();
  EXPECT_NE(std::string(h3rt_last_error()).find("sparse_check must be in [0, 1000]"),
            std::string::npos)
      << h3rt_last_error();
  h3rt_model_free(m);
}

// The C++ run of the default request conditioned from `cond` (the C API's default seed).
SampleResult cpp_sample_with(const std::string& cond, const SampleOptions& o) {
  auto d = Denoiser::create(ModelSource{});
  Request r = make_request(d->config(), {});
  condition_request_from_file(r, d->config(), cond, 440420);
  return sample(*d, std::move(r), o);
}

TEST(CApi, ConditionedSampleGivesTheCppBits) {
  static const test::TempDir dir("h3rt_c_api_tests");
  const std::string cond = dir.file("kf.safetensors");
  // One first-frame keyframe on the default request's 8 x 12 latent grid.
  std::vector<float> kf(24 * 8 * 12);
  for (size_t i = 0; i < kf.size(); ++i) kf[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  write_safetensors(cond, {{"keyframe/0/video", tensor_from_f32(kf, {1, 24, 1, 8, 12})}},
                    {{"keyframe/0/frame_index", "0"}});
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  req.steps = 2;
  req.conditioning = cond.c_str();
  const CSample got = run_c_sample(m, req);
  ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
  SampleOptions o;
  o.steps = 2;
  const SampleResult want = cpp_sample_with(cond, o);
  test::expect_same_bits(got.video, want.video_latents, "video_latents");
  test::expect_same_bits(got.audio, want.audio_latents, "audio_latents");
  // The keyframe changes the result (the file was read, not ignored).
  auto d = Denoiser::create(ModelSource{});
  const SampleResult plain = sample(*d, make_request(d->config(), {}), o);
  EXPECT_NE(plain.video_latents, want.video_latents);
  req.conditioning = "/nonexistent/cond.safetensors";
  EXPECT_NE(run_c_sample(m, req).status, H3RT_OK);
  EXPECT_NE(std::string(h3rt_last_error()).find("/nonexistent/cond.safetensors"), std::string::npos)
      << h3rt_last_error();
  h3rt_model_free(m);
}

TEST(CApi, MaskedSampleOnComfysLoopGivesTheCppBits) {
  static const test::TempDir dir("h3rt_c_api_mask_tests");
  const std::string cond = dir.file("mask.safetensors");
  // The default request's 7 x 8 x 12 latent grid: the left half kept.
  std::vector<float> mask(7 * 8 * 12, 1.0f), image(24 * 7 * 8 * 12);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i % 12) < 6 ? 0.0f : 1.0f;
  for (size_t i = 0; i < image.size(); ++i) image[i] = 0.02f * static_cast<float>(i % 89) - 0.9f;
  write_safetensors(cond,
                    {{"input/video_denoise_mask", tensor_from_f32(mask, {7, 8, 12})},
                     {"input/video_latent_image", tensor_from_f32(image, {1, 24, 7, 8, 12})}},
                    {});
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create_preset("tiny", 0, nullptr, &m), H3RT_OK) << h3rt_last_error();
  h3rt_sample_request req;
  h3rt_sample_request_init(&req);
  EXPECT_EQ(req.sampler, nullptr);
  req.steps = 1;
  req.conditioning = cond.c_str();
  req.sampler = "res_multistep";
  req.scheduler = "simple";
  const CSample got = run_c_sample(m, req);
  ASSERT_EQ(got.status, H3RT_OK) << h3rt_last_error();
  SampleOptions o;
  o.steps = 1;
  o.sampler = SamplerKind::res_multistep;
  o.scheduler = Scheduler::simple;
  const SampleResult want = cpp_sample_with(cond, o);
  test::expect_same_bits(got.video, want.video_latents, "video_latents");
  test::expect_same_bits(got.audio, want.audio_latents, "audio_latents");
  EXPECT_EQ(got.video[0], image[0]);  // a kept element
  req.sampler = "dpm";
  EXPECT_EQ(run_c_sample(m, req).status, H3RT_ERROR_INVALID_ARGUMENT) << h3rt_last_error();
  EXPECT_NE(std::string(h3rt_last_error()).find("sampler must be"), std::string::npos)
      << h3rt_last_error();
  h3rt_model_free(m);
}

}  // namespace
}  // namespace h3rt
