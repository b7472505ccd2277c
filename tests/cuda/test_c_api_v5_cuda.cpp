// The C API's version-5 model options on a CUDA model: load progress over the blocks, and LoRAs
// merged as the C++ options merge them (the same bits); version 6's h3rt_model_weight_streaming
// under a limit that streams part of a twelve-block model; version 7's h3rt_selftest.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "cuda_test_util.h"
#include "h3rt/h3rt.h"
#include "h3rt/lora.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "model/weight_stream_plan.h"
#include "model/weights.h"

namespace h3rt {
namespace {

void record(int done, int total, void* calls) {
  static_cast<std::vector<std::pair<int, int>>*>(calls)->push_back({done, total});
}

TEST(CApiV5Cuda, LoadProgressAndLorasGiveTheCppBits) {
  H3RT_REQUIRE_GPU();
  const test::GoldenInputs& g = test::golden_inputs();
  const std::string w = test::golden_dir() + "/weights.safetensors";
  test::TempDir dir;
  const std::string lora = dir.file("turbo.safetensors");
  write_lora(lora, make_synthetic_lora(*config_preset("tiny"), 4, 259, 3));
  std::vector<std::pair<int, int>> calls;
  const char* paths[] = {lora.c_str()};
  const double strength = 0.75;
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  o.device = "cuda";
  o.lora_paths = paths;
  o.lora_strengths = &strength;
  o.num_loras = 1;
  o.load_progress = record;
  o.load_progress_user = &calls;
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create(w.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
  h3rt_config c{};
  ASSERT_EQ(h3rt_model_config(m, &c), H3RT_OK);
  ASSERT_EQ(calls.size(), static_cast<size_t>(c.layers + 1));
  for (int i = 0; i <= c.layers; ++i)
    EXPECT_EQ(calls[i], std::make_pair(i, static_cast<int>(c.layers))) << "call " << i;

  ModelSource s;
  s.checkpoint = w;
  DenoiserOptions d;
  d.device = Device::cuda;
  d.loras = {{lora, strength}};
  auto want_model = Denoiser::create(s, d);
  const SequenceLayout& L = g.layout;
  const SequenceLayout t2va =
      make_t2va_layout(L.text_len, L.audio_len, L.frames, L.height, L.width);
  const ForwardOutputs want = forward_at_sigma(*want_model, t2va, g.video.data(), g.audio.data(),
                                               g.text.data(), 0.6f, {}, {6.0, 2.5});
  FloatVec vv(g.video.size()), av(g.audio.size());
  ASSERT_EQ(h3rt_forward_t2va_shifted(m, L.text_len, L.audio_len, L.frames, L.height, L.width, 0.6f,
                                      6.0, 2.5, g.video.data(), g.audio.data(), g.text.data(),
                                      vv.data(), av.data()),
            H3RT_OK)
      << h3rt_last_error();
  test::expect_same_bits(vv, want.video_velocity, "cuda lora video");
  test::expect_same_bits(av, want.audio_velocity, "cuda lora audio");
  h3rt_model_free(m);
}

// A twelve-block tiny model written as a checkpoint, loaded through the C API under a limit one
// byte below what its resident request needs: three blocks stream, and the call says so.
TEST(CApiV6Cuda, WeightStreamingReportsThePartialPlan) {
  H3RT_REQUIRE_GPU();
  H3Config c = *config_preset("tiny");
  c.layers = 12;
  NamedTensors t;
  for (const auto& spec : model::weight_specs(c))
    t.emplace_back(spec.key, Tensor::zeros(spec.dtype, spec.shape));
  test::TempDir dir;
  const std::string path = dir.file("twelve.safetensors");
  write_safetensors(path, t);
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const SequenceLayout L = make_t2va_layout(10, 9, 7, 8, 12);
  const int64_t limit = model::model_weight_bytes(c, st) +
                        model::estimate_working_set_bytes(c, st, false, model::forward_shape(L)) -
                        1;
  const std::string limit_text = std::to_string(limit);
  h3rt_model_options o;
  h3rt_model_options_init(&o);
  o.device = "cuda";
  o.attention = "bf16";
  o.device_memory_limit = limit_text.c_str();
  h3rt_model* m = nullptr;
  ASSERT_EQ(h3rt_model_create(path.c_str(), &o, &m), H3RT_OK) << h3rt_last_error();
  h3rt_weight_streaming w{};
  ASSERT_EQ(h3rt_model_weight_streaming(m, &w), H3RT_OK) << h3rt_last_error();
  EXPECT_EQ(w.device_memory_limit, limit);
  EXPECT_EQ(w.streamed, 0);  // resident at load: the smallest request fits
  FloatVec video(L.video_rows() * c.video_features(), 0.25f), audio(L.audio_rows() * 32, -0.5f),
      text(L.text_len * c.text_dim, 0.125f), vv(video.size()), av(audio.size());
  ASSERT_EQ(h3rt_forward_t2va(m, L.text_len, L.audio_len, L.frames, L.height, L.width, 0.5f,
                              video.data(), audio.data(), text.data(), vv.data(), av.data()),
            H3RT_OK)
      << h3rt_last_error();
  ASSERT_EQ(h3rt_model_weight_streaming(m, &w), H3RT_OK) << h3rt_last_error();
  EXPECT_EQ(w.streamed, 1);
  EXPECT_EQ(w.streamed_blocks, 3);
  EXPECT_EQ(w.slots, 2);
  EXPECT_EQ(w.h2d_bytes_per_step, 3 * w.slot_bytes);
  EXPECT_LE(w.planned_device_bytes, limit);
  EXPECT_STREQ(w.source, "pinned");
  h3rt_model_free(m);
}

TEST(CApiV7Cuda, SelftestPassesWithItsReport) {
  H3RT_REQUIRE_GPU();
  int passed = -1;
  const char* json = nullptr;
  ASSERT_EQ(h3rt_selftest(5, &passed, &json), H3RT_OK) << h3rt_last_error();
  EXPECT_EQ(passed, 1) << json;
  ASSERT_NE(json, nullptr);
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["seed"], 5u);
  EXPECT_EQ(j["passed"], true);
  EXPECT_EQ(j["cases"].size(), 10u);
}

}  // namespace
}  // namespace h3rt
