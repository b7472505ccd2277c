// Weight streaming (model/weight_stream_cuda.h): a model whose block weights stream from pinned
// host memory gives the same bits as the same model resident, eagerly and from CUDA graphs, in
// every GEMM format, with step caching's block ranges; the slot layout matches the planner's;
// the working-set estimate covers what a session allocates; the Denoiser streams under
// device_memory_limit and refuses a limit below what streaming needs.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cuda/arena.h"
#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "h3rt/pipeline.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#include "model/synthetic_gemm_cuda.h"
#include "model/weight_stream_cuda.h"
#include "model/weights.h"

namespace h3rt {
namespace {

using Gemm = SyntheticGemm;

// The tiny dimensions with 5 blocks, so that slots are reused within a step (2 slots).
H3Config five_blocks() {
  H3Config c = H3Config::tiny();
  c.layers = 5;
  return c;
}

// The block projections in `gemm` as `sample --gemm` makes them (int8: convrot group 64).
model::DeviceModel make_model(const H3Config& c, uint64_t seed, Gemm gemm) {
  model::DeviceModel d = model::make_synthetic_device_model(c, seed);
  model::quantize_synthetic_blocks(d, gemm, 64, nullptr);
  return d;
}

model::LinearStorage storage_of(Gemm g) {
  switch (g) {
    case Gemm::fp8:
      return model::LinearStorage::fp8;
    case Gemm::int8:
      return model::LinearStorage::int8;
    case Gemm::nvfp4:
      return model::LinearStorage::nvfp4;
    case Gemm::bf16:
      break;
  }
  return model::LinearStorage::bf16;
}

std::vector<float> normal(size_t n, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16(d(g));
  return v;
}

void expect_same_bits(const FloatVec& got, const FloatVec& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
}

// Steps with changing timesteps (table heights 2, 2, 1, 2) on a resident and a streamed copy of
// the same model: the same velocities bit for bit (and the graph steps replayed).
void expect_streamed_equals_resident(Gemm gemm, bool graphs, bool step_cache,
                                     ops::AttentionKernel attention) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const H3Config c = five_blocks();
  model::DeviceModel resident = make_model(c, seed, gemm);
  model::DeviceModel streamed = make_model(c, seed, gemm);
  model::stream_block_weights(streamed);
  ASSERT_TRUE(streamed.streamed);
  for (const auto& [name, t] : model::streamed_tensors(streamed.blocks[0]))
    EXPECT_EQ(t->device(), Device::cpu) << name;
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  model::ForwardSessionOptions o;
  o.cuda_graph = graphs;
  o.attention = attention;
  model::ForwardSessionCuda a(resident, layout, o), b(streamed, layout, o);
  StepCache cache_a({1e-30, 3}), cache_b({1e-30, 3});  // on, never reused: ranges 0..1, 1..5
  std::mt19937_64 g(seed);
  const std::vector<float> text = normal(layout.text_len * c.text_dim, g);
  const float steps[][2] = {{0.3f, 0.63f}, {0.45f, 0.8f}, {0.5f, 0.5f}, {0.9f, 0.2f}, {0.7f, 0.4f}};
  int graphed = 0;
  for (const auto& t : steps) {
    const std::vector<float> video = normal(layout.video_rows() * c.video_features(), g);
    const std::vector<float> audio = normal(layout.audio_rows() * c.audio_channels, g);
    const TimestepPlan plan = make_timestep_plan(layout, t[0], t[1]);
    ForwardInputs in_a{layout, plan, video.data(), audio.data(), text.data()};
    ForwardInputs in_b{layout, plan, video.data(), audio.data(), text.data()};
    if (step_cache) {
      in_a.step_cache = &cache_a;
      in_b.step_cache = &cache_b;
    }
    const ForwardOutputs want = a.forward(in_a);
    const ForwardOutputs got = b.forward(in_b);
    EXPECT_TRUE(b.last_times().weights_streamed);
    graphed += b.last_times().graph;
    expect_same_bits(got.video_velocity, want.video_velocity, "video at t " + std::to_string(t[0]));
    expect_same_bits(got.audio_velocity, want.audio_velocity, "audio at t " + std::to_string(t[0]));
  }
  EXPECT_EQ(graphed > 0, graphs);
}

TEST(WeightStream, Bf16EagerBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::bf16, false, false, ops::AttentionKernel::flash_bf16);
}
TEST(WeightStream, Bf16GraphsBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::bf16, true, false, ops::AttentionKernel::flash_bf16);
}
TEST(WeightStream, Int8EagerBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::int8, false, false, ops::AttentionKernel::flash_bf16);
}
TEST(WeightStream, Int8GraphsSageBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::int8, true, false, ops::AttentionKernel::sage_8bit);
}
TEST(WeightStream, Fp8GraphsBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::fp8, true, false, ops::AttentionKernel::flash_bf16);
}
TEST(WeightStream, Nvfp4GraphsBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::nvfp4, true, false, ops::AttentionKernel::flash_bf16);
}
TEST(WeightStream, StepCacheRangesBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::int8, true, true, ops::AttentionKernel::flash_bf16);
  expect_streamed_equals_resident(Gemm::bf16, false, true, ops::AttentionKernel::flash_bf16);
}

TEST(WeightStream, SlotLayoutIsThePlannersAndDeviceMemoryIsFreed) {
  H3RT_REQUIRE_GPU();
  const H3Config c = five_blocks();
  for (Gemm gemm : {Gemm::bf16, Gemm::fp8, Gemm::int8, Gemm::nvfp4}) {
    model::DeviceModel m = make_model(c, 7, gemm);
    const model::SlotLayout want =
        model::block_slot_layout(c, model::uniform_storage(c, storage_of(gemm)));
    const model::SlotLayout got = model::block_slot_layout(m.blocks[0]);
    ASSERT_EQ(got.entries.size(), want.entries.size());
    for (size_t k = 0; k < got.entries.size(); ++k) {
      EXPECT_EQ(got.entries[k].name, want.entries[k].name);
      EXPECT_EQ(got.entries[k].bytes, want.entries[k].bytes) << got.entries[k].name;
      EXPECT_EQ(got.entries[k].offset, want.entries[k].offset) << got.entries[k].name;
    }
    if (gemm == Gemm::bf16)  // (make_model converts the blocks only, not the refiner)
      EXPECT_EQ(model::model_weight_bytes(m),
                model::model_weight_bytes(c, model::uniform_storage(c, storage_of(gemm))));
    const int64_t before = cuda::default_arena().stats().current_allocated;
    model::stream_block_weights(m);
    const int64_t freed = before - cuda::default_arena().stats().current_allocated;
    EXPECT_GE(freed, c.layers * (want.bytes - 256 * int64_t(want.entries.size())));
    for (const auto& [name, t] : model::streamed_tensors(m.blocks[1]))
      EXPECT_EQ(t->device(), Device::cpu) << name;
  }
}

// The estimate covers the session's allocations (its activations, workspaces, a forward's
// GEMM plans) for the tiny shape in each format.
TEST(WeightStream, WorkingSetEstimateCoversTheSession) {
  H3RT_REQUIRE_GPU();
  const H3Config c = five_blocks();
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  for (Gemm gemm : {Gemm::bf16, Gemm::int8, Gemm::nvfp4}) {
    model::DeviceModel m = make_model(c, 3, gemm);
    model::stream_block_weights(m);
    cuda::default_arena().release_cached();
    const int64_t base = cuda::default_arena().stats().current_allocated;
    cuda::default_arena().reset_peak();
    {
      model::ForwardSessionCuda s(m, layout, {true, ops::AttentionKernel::sage_8bit, false});
      std::vector<float> video(layout.video_rows() * c.video_features(), 0.1f);
      std::vector<float> audio(layout.audio_rows() * c.audio_channels, 0.1f);
      std::vector<float> text(layout.text_len * c.text_dim, 0.1f);
      const TimestepPlan plan = make_timestep_plan(layout, 0.5f, 0.4f);
      s.forward({layout, plan, video.data(), audio.data(), text.data()});
    }
    const int64_t used = cuda::default_arena().stats().peak_allocated - base;
    const model::SlotLayout slot = model::block_slot_layout(m.blocks[0]);
    const int64_t estimate = model::estimate_working_set_bytes(c, model::block_storage(m.blocks[0]),
                                                               true, model::forward_shape(layout));
    EXPECT_LE(used, estimate + 2 * slot.bytes) << "format " << int(gemm);
  }
}

// A state dict of the five-block tiny model: every key in its dtype, small random values.
std::map<std::string, Tensor> state_dict(const H3Config& c, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::map<std::string, Tensor> t;
  for (const auto& spec : model::weight_specs(c)) {
    std::vector<float> v(static_cast<size_t>(shape_numel(spec.shape)));
    const bool norm = spec.shape.size() == 1 && spec.key.find("norm") != std::string::npos;
    for (float& x : v) x = norm ? 1.0f + u(g) : u(g);
    t[spec.key] = tensor_from_f32(v, spec.shape, spec.dtype);
  }
  return t;
}

// The Denoiser under a limit that forces streaming: the same bits as without a limit; a limit
// below what streaming needs: an error naming the option and the bytes.
TEST(WeightStream, DenoiserStreamsUnderTheLimitAndRefusesTooLittle) {
  H3RT_REQUIRE_GPU();
  const auto weights = state_dict(five_blocks(), test::fresh_seed());
  DenoiserOptions o;
  o.device = Device::cuda;
  const auto resident = Denoiser::create(weights, o);
  const H3Config& c = resident->config();
  ASSERT_EQ(c.layers, 5);
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  std::vector<float> video(layout.video_rows() * c.video_features(), 0.25f);
  std::vector<float> audio(layout.audio_rows() * c.audio_channels, -0.5f);
  std::vector<float> text(layout.text_len * c.text_dim, 0.125f);
  const TimestepPlan plan = make_timestep_plan(layout, 0.5f, 0.4f);
  const ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
  const ForwardOutputs want = resident->forward(in);
  EXPECT_FALSE(resident->weight_streaming().streamed);

  // The limit streaming needs exactly: weights - block images + 2 slots + the working set.
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t slot = model::block_slot_layout(c, st).bytes;
  const int64_t need =
      model::model_weight_bytes(c, st) - c.layers * slot + 2 * slot +
      model::estimate_working_set_bytes(c, st, false, model::forward_shape(layout));
  o.device_memory_limit = need;
  const auto streamed = Denoiser::create(weights, o);
  const ForwardOutputs got = streamed->forward(in);
  const WeightStreaming w = streamed->weight_streaming();
  EXPECT_TRUE(w.streamed);
  EXPECT_EQ(w.slots, 2);
  EXPECT_EQ(w.slot_bytes, slot);
  EXPECT_EQ(w.h2d_bytes_per_step, c.layers * slot);
  EXPECT_EQ(w.planned_device_bytes, need);
  expect_same_bits(got.video_velocity, want.video_velocity, "video");
  expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");

  o.device_memory_limit = need - 1;
  const auto small = Denoiser::create(weights, o);
  try {
    small->forward(in);
    ADD_FAILURE() << "a limit 1 byte below the need ran";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device_memory_limit"), std::string::npos) << m;
    EXPECT_NE(m.find("(" + std::to_string(need) + " bytes"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace h3rt
