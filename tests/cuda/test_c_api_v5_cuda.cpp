// The C API's version-5 model options on a CUDA model: load progress over the blocks, and LoRAs
// merged as the C++ options merge them (the same bits).
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "cuda_test_util.h"
#include "h3rt/h3rt.h"
#include "h3rt/lora.h"
#include "h3rt/pipeline.h"

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

}  // namespace
}  // namespace h3rt
