// Weight streaming (model/weight_stream_cuda.h): a model whose block weights stream from pinned
// host memory gives the same bits as the same model resident, eagerly and from CUDA graphs, in
// every GEMM format, with step caching's block ranges; the slot layout matches the planner's;
// the working-set estimate covers what a session allocates; the Denoiser streams under
// device_memory_limit and refuses a limit below what streaming needs. The streamed load
// (WeightStreamLoad.*): blocks written to pinned memory as they load, the load's device peak
// the resident part (+ one block for synthetic conversion), the same bits; a caller's device
// block weights are refused for streaming.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../cpu/test_util.h"
#include "cuda/arena.h"
#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "h3rt/lora.h"
#include "h3rt/pipeline.h"
#include "model/forward_session_cuda.h"
#include "model/lora_cuda.h"
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
// the same model (`blocks` streamed; empty: all): the same velocities bit for bit (and the graph
// steps replayed).
void expect_streamed_equals_resident(Gemm gemm, bool graphs, bool step_cache,
                                     ops::AttentionKernel attention,
                                     WeightStreamSource source = WeightStreamSource::pinned,
                                     const std::vector<int64_t>& blocks = {}) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const H3Config c = five_blocks();
  model::DeviceModel resident = make_model(c, seed, gemm);
  model::DeviceModel streamed = make_model(c, seed, gemm);
  model::stream_block_weights(streamed, source, blocks);
  ASSERT_TRUE(streamed.streamed);
  EXPECT_EQ(streamed.streamed->source, source);
  for (size_t i = 0; i < streamed.blocks.size(); ++i) {
    const bool host = blocks.empty() || streamed.streamed->ordinal(int64_t(i)) >= 0;
    for (const auto& [name, t] : model::streamed_tensors(streamed.blocks[i]))
      EXPECT_EQ(t->device(), host ? Device::cpu : Device::cuda) << "block " << i << " " << name;
  }
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

// The file source with pageable host copies (a model made on the device has no file): the
// gather into pinned staging on the copy stream, eagerly, from graphs and over step-cache ranges.
TEST(WeightStreamFile, Bf16EagerStepCacheBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::bf16, false, true, ops::AttentionKernel::flash_bf16,
                                  WeightStreamSource::file);
}
TEST(WeightStreamFile, Int8GraphsSageBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::int8, true, false, ops::AttentionKernel::sage_8bit,
                                  WeightStreamSource::file);
}
TEST(WeightStreamFile, Nvfp4GraphsBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::nvfp4, true, true, ops::AttentionKernel::flash_bf16,
                                  WeightStreamSource::file);
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
// Some blocks streamed, the others resident, over the step cache's ranges 0..1 (no streamed
// block in it for {1, 3, 4}) and 1..5 (three streamed blocks, two slots), from pinned images and
// from the file source's staging.
TEST(WeightStream, PartialStepCacheRangesBitIdenticalToResident) {
  expect_streamed_equals_resident(Gemm::int8, true, true, ops::AttentionKernel::sage_8bit,
                                  WeightStreamSource::pinned, {1, 3, 4});
  expect_streamed_equals_resident(Gemm::bf16, false, true, ops::AttentionKernel::flash_bf16,
                                  WeightStreamSource::file, {0, 2, 4});
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

// A small t2va request of constant rows for config c (layout 10 text, 9 audio, 7 x 8 x 12 video).
struct ConstantRequest {
  SequenceLayout layout;
  TimestepPlan plan;
  std::vector<float> video, audio, text;
  explicit ConstantRequest(const H3Config& c,
                           const SequenceLayout& l = make_t2va_layout(10, 9, 7, 8, 12))
      : layout(l),
        plan(make_timestep_plan(layout, 0.5f, 0.4f)),
        video(layout.video_rows() * c.video_features(), 0.25f),
        audio(layout.audio_rows() * c.audio_channels, -0.5f),
        text(layout.text_len * c.text_dim, 0.125f) {}
  ForwardInputs inputs() const { return {layout, plan, video.data(), audio.data(), text.data()}; }
};

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
  const ConstantRequest req(c);
  const ForwardInputs in = req.inputs();
  const ForwardOutputs want = resident->forward(in);
  EXPECT_FALSE(resident->weight_streaming().streamed);

  // The limit streaming needs exactly: weights - block images + 2 slots + the working set.
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t slot = model::block_slot_layout(c, st).bytes;
  const int64_t need =
      model::model_weight_bytes(c, st) - c.layers * slot + 2 * slot +
      model::estimate_working_set_bytes(c, st, false, model::forward_shape(req.layout));
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

// ---- the streamed load: the blocks never whole on the device ------------------------------

// The tiny dimensions with 12 blocks: the blocks are most of the model, so a load that held
// them all would show.
H3Config twelve_blocks() {
  H3Config c = H3Config::tiny();
  c.layers = 12;
  return c;
}

// Device bytes the arena hands out at most while `load` runs, above what it held before.
template <class F>
int64_t load_peak(F&& load) {
  auto& arena = cuda::default_arena();
  arena.release_cached();
  const int64_t base = arena.stats().current_allocated;
  arena.reset_peak();
  load();
  return arena.stats().peak_allocated - base;
}

// The same velocities bit for bit from two models over steps with changing timesteps.
void expect_same_forwards(const model::DeviceModel& want_m, const model::DeviceModel& got_m,
                          uint64_t seed, bool graphs) {
  const H3Config& c = want_m.config;
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  model::ForwardSessionOptions o;
  o.cuda_graph = graphs;
  model::ForwardSessionCuda a(want_m, layout, o), b(got_m, layout, o);
  std::mt19937_64 g(seed);
  const std::vector<float> text = normal(layout.text_len * c.text_dim, g);
  const std::pair<float, float> steps[] = {{0.3f, 0.63f}, {0.45f, 0.8f}, {0.9f, 0.2f}};
  for (const auto& t : steps) {
    const std::vector<float> video = normal(layout.video_rows() * c.video_features(), g);
    const std::vector<float> audio = normal(layout.audio_rows() * c.audio_channels, g);
    const TimestepPlan plan = make_timestep_plan(layout, t.first, t.second);
    const ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
    const ForwardOutputs want = a.forward(in);
    const ForwardOutputs got = b.forward(in);
    EXPECT_TRUE(b.last_times().weights_streamed);
    expect_same_bits(got.video_velocity, want.video_velocity, "video");
    expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");
  }
}

// A synthetic model streamed at load (each block made, converted and written to its pinned image
// before the next): the arena's peak during the load is the resident part plus one block in
// bf16 and converted (far below the whole model), the planner's bytes are the model's, and the
// steps are bit-identical to the model loaded whole.
void expect_synthetic_load_streams(Gemm gemm, bool graphs) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", format " + std::to_string(int(gemm)));
  const H3Config c = twelve_blocks();
  const model::BlockStorage blocks = model::synthetic_block_storage(c, gemm);
  const model::BlockStorage refiner = model::synthetic_block_storage(c, Gemm::bf16);
  const int64_t least = model::estimate_working_set_bytes(c, blocks, false, {});
  const int64_t slot = model::block_slot_layout(c, blocks).bytes;
  // The least that streaming every block needs: the blocks' images less two slots over.
  const int64_t limit = model::model_weight_bytes(c, blocks, refiner) + least - 10 * slot;
  const model::LoadPlan lp = model::plan_load(c, blocks, refiner, limit, false);
  ASSERT_TRUE(lp.stream);
  ASSERT_EQ(lp.plan.blocks.size(), 12u);
  model::DeviceModel streamed;
  const int64_t peak =
      load_peak([&] { streamed = model::make_synthetic_gemm_model(c, seed, gemm, 64, &lp); });
  ASSERT_TRUE(streamed.streamed);
  for (model::DeviceBlock& b : streamed.blocks)
    for (const auto& [name, t] : model::streamed_tensors(b))
      EXPECT_EQ(t->device(), Device::cpu) << name;
  EXPECT_EQ(model::model_weight_bytes(streamed), lp.weight_bytes);
  const int64_t bf16_block = model::block_slot_layout(c, refiner).bytes;
  const int64_t slack = int64_t(1) << 20;  // bucket rounding, the nvfp4 quantizer's workspace
  EXPECT_LE(peak, lp.device_weight_bytes + bf16_block + lp.slot.bytes + slack);
  EXPECT_LT(peak, lp.weight_bytes - 6 * lp.slot.bytes);  // half the blocks never were there
  const model::DeviceModel resident = model::make_synthetic_gemm_model(c, seed, gemm, 64);
  EXPECT_FALSE(resident.streamed);
  expect_same_forwards(resident, streamed, seed, graphs);
}

TEST(WeightStreamLoad, SyntheticBf16LoadStaysUnderBudgetBitIdentical) {
  expect_synthetic_load_streams(Gemm::bf16, false);
}
TEST(WeightStreamLoad, SyntheticInt8LoadStaysUnderBudgetBitIdentical) {
  expect_synthetic_load_streams(Gemm::int8, true);
}
TEST(WeightStreamLoad, SyntheticFp8LoadStaysUnderBudgetBitIdentical) {
  expect_synthetic_load_streams(Gemm::fp8, true);
}
TEST(WeightStreamLoad, SyntheticNvfp4LoadStaysUnderBudgetBitIdentical) {
  expect_synthetic_load_streams(Gemm::nvfp4, false);
}

// A host state dict under a limit the resident model cannot meet: Denoiser::create writes each
// block's matrices from the host straight to its pinned image (no block matrix is allocated on
// the device: the load's peak is the resident part), reports it, and the forward is
// bit-identical to the resident Denoiser's.
TEST(WeightStreamLoad, HostStateDictLoadsStreamedWithoutTheBlocksOnTheDevice) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  const auto weights = state_dict(c, test::fresh_seed());
  DenoiserOptions o;
  o.device = Device::cuda;
  const auto resident = Denoiser::create(weights, o);
  EXPECT_FALSE(resident->weight_streaming().streamed_at_load);
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t least = model::estimate_working_set_bytes(c, st, false, {});
  o.device_memory_limit = model::model_weight_bytes(c, st) + least - 1;
  const model::LoadPlan lp = model::plan_load(c, st, st, o.device_memory_limit, false);
  ASSERT_TRUE(lp.stream);
  std::unique_ptr<Denoiser> streamed;
  const int64_t peak = load_peak([&] { streamed = Denoiser::create(weights, o); });
  const WeightStreaming w = streamed->weight_streaming();
  EXPECT_TRUE(w.streamed_at_load);
  EXPECT_TRUE(w.streamed);
  EXPECT_EQ(w.streamed_blocks, 3);  // 1 byte over: the fewest that fit, the rest resident
  EXPECT_EQ(w.host_bytes, 3 * lp.slot.bytes);
  EXPECT_GT(w.load_peak_device_bytes, 0);
  EXPECT_LE(peak, lp.device_weight_bytes + (int64_t(1) << 20));  // + bucket rounding
  EXPECT_LT(peak, lp.device_weight_bytes + lp.slot.bytes);       // not one block on the device
  EXPECT_LE(w.load_peak_device_bytes, lp.device_weight_bytes + (int64_t(4) << 20));

  const ConstantRequest req(c);
  const ForwardInputs in = req.inputs();
  const ForwardOutputs want = resident->forward(in);
  const ForwardOutputs got = streamed->forward(in);
  EXPECT_TRUE(streamed->weight_streaming().streamed_at_load);  // kept past the forward's plan
  expect_same_bits(got.video_velocity, want.video_velocity, "video");
  expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");
}

// A caller's block weights already in device memory are used in place; streaming them would
// free none of it, so a limit that needs streaming is an error naming the option and what to
// do, at load (the model cannot fit at all) or at the first forward (this request's shape).
// Moves a state dict's 2-D bf16 block weights to device memory, as a caller's CUDA tensors (the
// ComfyUI node's weights from the loaded model); returns their bytes.
int64_t blocks_bf16_weights_to_device(std::map<std::string, Tensor>& weights) {
  int64_t on_device = 0;
  for (auto& [key, t] : weights)
    if (key.rfind("blocks.", 0) == 0 && key.ends_with(".weight") && t.dim() == 2 &&
        t.dtype() == DType::bf16) {
      t = cuda::to_device(t);
      on_device += t.nbytes();
    }
  return on_device;
}

TEST(WeightStreamLoad, CallerDeviceBlockWeightsAreNotStreamed) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  auto weights = state_dict(c, test::fresh_seed());
  const int64_t on_device = blocks_bf16_weights_to_device(weights);
  ASSERT_GT(on_device, 0);
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t w = model::model_weight_bytes(c, st);
  const int64_t least = model::estimate_working_set_bytes(c, st, false, {});
  DenoiserOptions o;
  o.device = Device::cuda;
  o.device_memory_limit = w + least - 1;  // streams at load
  try {
    Denoiser::create(weights, o);
    ADD_FAILURE() << "a limit that needs the caller's device weights streamed loaded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device_memory_limit"), std::string::npos) << m;
    EXPECT_NE(m.find("caller's CUDA tensors"), std::string::npos) << m;
    EXPECT_NE(m.find("CPU tensors"), std::string::npos) << m;
  }
  o.device_memory_limit = w + least;  // loads resident; this request's shape would stream
  const auto d = Denoiser::create(weights, o);
  EXPECT_EQ(d->weight_streaming().caller_device_bytes, on_device);
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  std::vector<float> video(layout.video_rows() * c.video_features(), 0.25f);
  std::vector<float> audio(layout.audio_rows() * c.audio_channels, -0.5f);
  std::vector<float> text(layout.text_len * c.text_dim, 0.125f);
  const TimestepPlan plan = make_timestep_plan(layout, 0.5f, 0.4f);
  try {
    d->forward({layout, plan, video.data(), audio.data(), text.data()});
    ADD_FAILURE() << "a request that needs the caller's device weights streamed ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("caller's CUDA tensors"), std::string::npos) << e.what();
  }
}

// A synthetic preset with a LoRA streamed at load (each block merged on the device, converted,
// written out): the same bits as the model merged whole (merge_loras_cuda) and then converted.
TEST(WeightStreamLoad, SyntheticLoraMergedBlockByBlockBitIdentical) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const H3Config c = twelve_blocks();
  const std::vector<Lora> loras = {make_synthetic_lora(c, 4, 1000, seed)};
  model::DeviceModel whole = model::make_synthetic_device_model(c, seed);
  const model::LoraMergeCuda merged = model::merge_loras_cuda(whole, loras);
  model::quantize_synthetic_blocks(whole, Gemm::int8, 64, nullptr);
  const model::BlockStorage blocks = model::synthetic_block_storage(c, Gemm::int8);
  const model::BlockStorage refiner = model::synthetic_block_storage(c, Gemm::bf16);
  const int64_t limit = model::model_weight_bytes(c, blocks, refiner) +
                        model::estimate_working_set_bytes(c, blocks, false, {}) - 1;
  const model::LoadPlan lp = model::plan_load(c, blocks, refiner, limit, false);
  ASSERT_TRUE(lp.stream);
  model::BlockwiseLoraMergeCuda blockwise(c, loras, {});
  const model::DeviceModel streamed =
      model::make_synthetic_gemm_model(c, seed, Gemm::int8, 64, &lp, &blockwise);
  ASSERT_TRUE(streamed.streamed);
  EXPECT_EQ(blockwise.report().pairs, merged.report.pairs);
  EXPECT_EQ(blockwise.report().layers, merged.report.layers);
  EXPECT_EQ(blockwise.report().layers, 12 * 5 + 4 + 2);  // every block, refiner, cond, final
  expect_same_forwards(whole, streamed, seed, true);
}

}  // namespace
}  // namespace h3rt

namespace h3rt {
namespace {

// ---- the file source: blocks read from the mapped checkpoint ------------------------------

// The twelve-block model written as a checkpoint file (every key in its dtype).
std::string write_checkpoint(const test::TempDir& dir, const H3Config& c, uint64_t seed) {
  NamedTensors t;
  for (auto& [key, v] : state_dict(c, seed)) t.emplace_back(key, v);
  const std::string path = dir.file("twelve.safetensors");
  write_safetensors(path, t);
  return path;
}

// Each streamed tensor of every block is a view of the mapped file (the loaded host layer's
// stored bytes, not a copy), for a model streamed at its upload and for one streamed after it.
void expect_views_of(const model::DeviceModel& d, const H3Model& host) {
  ASSERT_TRUE(d.streamed);
  ASSERT_EQ(d.streamed->source, WeightStreamSource::file);
  for (size_t i = 0; i < d.blocks.size(); ++i) {
    const BlockWeights& b = host.weights.blocks[i];
    const void* stored[] = {b.attn.qkv.data.data(), b.attn.out.data.data(), b.mlp.fc1.data.data(),
                            b.mlp.fc2.data.data(), b.adaln.data.data()};
    const std::vector<Tensor>& src = d.streamed->sources[i];
    ASSERT_EQ(src.size(), 5u) << "block " << i;
    for (size_t k = 0; k < 5; ++k) EXPECT_EQ(src[k].data(), stored[k]) << "block " << i << " " << k;
  }
}

TEST(WeightStreamFile, CheckpointBlocksAreViewsOfTheMappedFile) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  test::TempDir dir("h3rt_stream_file");
  LoadOptions lo;
  lo.dense_float_copies = false;
  const H3Model host = load_model(write_checkpoint(dir, c, test::fresh_seed()), lo);
  const model::SlotLayout slot =
      model::block_slot_layout(c, model::uniform_storage(c, model::LinearStorage::bf16));
  model::BlockImageWriter writer(slot, host.weights.blocks.size(), WeightStreamSource::file);
  const model::DeviceModel at_load = model::upload_model(host, &writer);
  expect_views_of(at_load, host);
  model::DeviceModel later = model::upload_model(host, nullptr, true);
  ASSERT_EQ(later.block_sources.size(), host.weights.blocks.size());
  model::stream_block_weights(later, WeightStreamSource::file);
  EXPECT_TRUE(later.block_sources.empty());
  expect_views_of(later, host);
}

// The Denoiser from a checkpoint with the file source: streamed at load and streamed at the
// first forward (a limit the model fits but this request does not), both bit-identical to the
// resident Denoiser over three forwards (eager, capture, replay), pinning only two staging
// images.
TEST(WeightStreamFile, CheckpointDenoiserBitIdenticalToResident) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  test::TempDir dir("h3rt_stream_file");
  ModelSource src;
  src.checkpoint = write_checkpoint(dir, c, test::fresh_seed());
  DenoiserOptions o;
  o.device = Device::cuda;
  const auto resident = Denoiser::create(src, o);
  const ConstantRequest req(c);
  const ForwardInputs in = req.inputs();
  const ForwardOutputs want = resident->forward(in);
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t slot = model::block_slot_layout(c, st).bytes;
  const int64_t w = model::model_weight_bytes(c, st);
  const int64_t least = model::estimate_working_set_bytes(c, st, false, {});
  o.weight_stream_source = WeightStreamSource::file;
  for (const int64_t limit : {w + least - 1, w + least}) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    o.device_memory_limit = limit;
    const auto streamed = Denoiser::create(src, o);
    EXPECT_EQ(streamed->weight_streaming().streamed_at_load, limit < w + least);
    for (int rep = 0; rep < 3; ++rep) {
      const ForwardOutputs got = streamed->forward(in);
      expect_same_bits(got.video_velocity, want.video_velocity, "video " + std::to_string(rep));
      expect_same_bits(got.audio_velocity, want.audio_velocity, "audio " + std::to_string(rep));
    }
    const WeightStreaming ws = streamed->weight_streaming();
    EXPECT_TRUE(ws.streamed);
    EXPECT_EQ(ws.source, "file");
    EXPECT_EQ(ws.host_bytes, 2 * slot);
    EXPECT_GT(ws.streamed_blocks, 2);
    EXPECT_LE(ws.streamed_blocks, c.layers);
    EXPECT_EQ(ws.h2d_bytes_per_step, ws.streamed_blocks * slot);
  }
  // The file written on disk after the load: the next forward refuses, naming it.
  o.device_memory_limit = w + least - 1;
  const auto streamed = Denoiser::create(src, o);
  streamed->forward(in);
  namespace fs = std::filesystem;
  fs::last_write_time(src.checkpoint,
                      fs::last_write_time(src.checkpoint) + std::chrono::seconds(2));
  try {
    streamed->forward(in);
    ADD_FAILURE() << "a forward read blocks from a file written since the load";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(src.checkpoint), std::string::npos) << m;
    EXPECT_NE(m.find("weight_stream_source file"), std::string::npos) << m;
  }
}

// DenoiserOptions::load_progress: (0, n), then once per block in order, resident and streamed
// at load (the blocks written to host memory).
TEST(WeightStreamLoad, LoadProgressCountsEveryBlock) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  const auto weights = state_dict(c, test::fresh_seed());
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  for (const int64_t limit :
       {int64_t(0), model::model_weight_bytes(c, st) +
                        model::estimate_working_set_bytes(c, st, false, {}) - 1}) {
    std::vector<std::pair<int, int>> calls;
    DenoiserOptions o;
    o.device = Device::cuda;
    o.device_memory_limit = limit;
    o.load_progress = [&](int done, int total) { calls.push_back({done, total}); };
    const auto d = Denoiser::create(weights, o);
    EXPECT_EQ(d->weight_streaming().streamed_at_load, limit > 0);
    ASSERT_EQ(calls.size(), 13u) << "limit " << limit;
    for (int i = 0; i <= 12; ++i) EXPECT_EQ(calls[i], std::make_pair(i, 12)) << i;
  }
}

// device_memory_limit auto: read from the GPU's free memory at create(). With most of the GPU
// taken by another allocation, so that auto gives a limit between what streaming needs and what
// the resident model needs, the Denoiser streams (the same bits); with the memory back, it does
// not.
TEST(WeightStream, AutoLimitFollowsTheFreeMemory) {
  H3RT_REQUIRE_GPU();
  const auto weights = state_dict(twelve_blocks(), test::fresh_seed());
  DenoiserOptions o;
  o.device = Device::cuda;
  const auto resident = Denoiser::create(weights, o);
  const H3Config& c = resident->config();
  const ConstantRequest req(c);
  const ForwardInputs in = req.inputs();
  const ForwardOutputs want = resident->forward(in);
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t slot = model::block_slot_layout(c, st).bytes;
  const int64_t work =
      model::estimate_working_set_bytes(c, st, false, model::forward_shape(req.layout));
  const int64_t stream_need = model::model_weight_bytes(c, st) - (c.layers - 2) * slot + work;
  const int64_t resident_need = model::model_weight_bytes(c, st) + work;
  ASSERT_GT(resident_need - stream_need, int64_t(8) << 20);  // room for the GPU's 2 MiB pages

  o.device_memory_limit = kDeviceMemoryAuto;
  const auto roomy = Denoiser::create(weights, o);
  roomy->forward(in);
  EXPECT_TRUE(roomy->weight_streaming().limit_auto);
  EXPECT_GT(roomy->weight_streaming().limit, resident_need);
  EXPECT_FALSE(roomy->weight_streaming().streamed);

  cuda::default_arena().release_cached();
  size_t free_b = 0, total_b = 0;
  H3RT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t target = (stream_need + resident_need) / 2;
  const int64_t reserve =
      int64_t(free_b) - auto_device_memory_limit(int64_t(free_b), int64_t(total_b));
  void* taken = nullptr;
  H3RT_CUDA_CHECK(cudaMalloc(&taken, size_t(int64_t(free_b) - reserve - target)));
  const int64_t limit = resolve_device_memory_limit(kDeviceMemoryAuto);
  EXPECT_NEAR(double(limit), double(target), double(int64_t(4) << 20));
  const auto tight = Denoiser::create(weights, o);
  const ForwardOutputs got = tight->forward(in);
  const WeightStreaming w = tight->weight_streaming();
  H3RT_CUDA_CHECK(cudaFree(taken));
  EXPECT_TRUE(w.limit_auto);
  EXPECT_TRUE(w.streamed) << "auto limit " << w.limit << ", resident needs " << resident_need;
  expect_same_bits(got.video_velocity, want.video_velocity, "video");
  expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");
}

// auto with the caller's device weights (the ComfyUI node's "weights from the loaded model"):
// they are already taken from the GPU's free memory and used in place, so auto counts them as
// free. With the free memory set so that only that makes the resident model fit, the model loads
// resident and runs (without it, the plan would stream the caller's tensors: refused).
TEST(WeightStreamLoad, AutoLimitCountsTheCallersDeviceWeightsAsFree) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  auto weights = state_dict(c, test::fresh_seed());
  const int64_t on_device = blocks_bf16_weights_to_device(weights);
  ASSERT_GT(on_device, int64_t(8) << 20);  // room for the GPU's 2 MiB pages
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  const int64_t need =
      model::model_weight_bytes(c, st) +
      model::estimate_working_set_bytes(c, st, false, model::forward_shape(layout));
  cuda::default_arena().release_cached();
  size_t free_b = 0, total_b = 0;
  H3RT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t reserve =
      int64_t(free_b) - auto_device_memory_limit(int64_t(free_b), int64_t(total_b));
  // Free memory at which auto, counting the caller's weights as free, gives need + on_device / 2.
  const int64_t target_free = need + on_device / 2 - on_device + reserve;
  void* taken = nullptr;
  H3RT_CUDA_CHECK(cudaMalloc(&taken, size_t(int64_t(free_b) - target_free)));
  DenoiserOptions o;
  o.device = Device::cuda;
  o.device_memory_limit = kDeviceMemoryAuto;
  std::unique_ptr<Denoiser> d;
  std::string error;
  try {
    d = Denoiser::create(weights, o);
  } catch (const Error& e) {
    error = e.what();
  }
  H3RT_CUDA_CHECK(cudaFree(taken));
  ASSERT_TRUE(d) << error;
  const WeightStreaming w = d->weight_streaming();
  EXPECT_TRUE(w.limit_auto);
  EXPECT_FALSE(w.streamed_at_load);
  EXPECT_NEAR(double(w.limit), double(need + on_device / 2), double(int64_t(3) << 20));
  EXPECT_EQ(w.caller_device_bytes, on_device);
  std::vector<float> video(layout.video_rows() * c.video_features(), 0.25f);
  std::vector<float> audio(layout.audio_rows() * c.audio_channels, -0.5f);
  std::vector<float> text(layout.text_len * c.text_dim, 0.125f);
  const TimestepPlan plan = make_timestep_plan(layout, 0.5f, 0.4f);
  const ForwardOutputs out = d->forward({layout, plan, video.data(), audio.data(), text.data()});
  EXPECT_FALSE(d->weight_streaming().streamed);
  EXPECT_EQ(out.video_velocity.size(), size_t(layout.video_rows() * c.video_features()));
}

// ---- partial streaming: the fewest blocks the limit needs stream, the rest stay resident --

// Forwards of `d` on `req` (eager, capture, replay) against `want`.
void expect_forwards(Denoiser& d, const ConstantRequest& req, const ForwardOutputs& want,
                     const std::string& what) {
  for (int rep = 0; rep < 3; ++rep) {
    const ForwardOutputs got = d.forward(req.inputs());
    expect_same_bits(got.video_velocity, want.video_velocity,
                     what + " video " + std::to_string(rep));
    expect_same_bits(got.audio_velocity, want.audio_velocity,
                     what + " audio " + std::to_string(rep));
  }
}

// A limit one byte below the resident request: three of the twelve blocks stream (spread over
// the model), the others stay resident, with the resident bits over eager, captured and replayed
// forwards; a larger request streams more of them (and the first request, asked again, keeps
// those), each with its resident bits.
TEST(WeightStream, PartialStreamingKeepsTheRestResidentBitIdentical) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  const auto weights = state_dict(c, test::fresh_seed());
  DenoiserOptions o;
  o.device = Device::cuda;
  const auto resident = Denoiser::create(weights, o);
  const ConstantRequest small(c), large(c, make_t2va_layout(10, 9, 9, 12, 16));
  const ForwardOutputs want_small = resident->forward(small.inputs());
  const ForwardOutputs want_large = resident->forward(large.inputs());

  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t slot = model::block_slot_layout(c, st).bytes;
  const int64_t w = model::model_weight_bytes(c, st);
  o.device_memory_limit =
      w + model::estimate_working_set_bytes(c, st, false, model::forward_shape(small.layout)) - 1;
  const auto d = Denoiser::create(weights, o);
  EXPECT_FALSE(d->weight_streaming().streamed_at_load);
  expect_forwards(*d, small, want_small, "small");
  WeightStreaming ws = d->weight_streaming();
  EXPECT_TRUE(ws.streamed);
  EXPECT_EQ(ws.streamed_blocks, 3);
  EXPECT_EQ(ws.h2d_bytes_per_step, 3 * slot);
  EXPECT_EQ(ws.resident_weight_bytes, w - 3 * slot);
  EXPECT_LE(ws.planned_device_bytes, o.device_memory_limit);

  const int64_t large_ws =
      model::estimate_working_set_bytes(c, st, false, model::forward_shape(large.layout));
  const int64_t more = 2 + (w + large_ws - o.device_memory_limit + slot - 1) / slot;
  ASSERT_GT(more, 3);
  ASSERT_LE(more, c.layers);
  expect_forwards(*d, large, want_large, "large");
  EXPECT_EQ(d->weight_streaming().streamed_blocks, more);
  expect_forwards(*d, small, want_small, "small again");
  EXPECT_EQ(d->weight_streaming().streamed_blocks, more);  // streamed blocks stay streamed
}

// Half the blocks' weights the caller's CUDA tensors (a partly loaded ComfyUI model): those stay
// resident and the other blocks stream in their place, at load and for a request, with the
// resident bits; a limit that only streaming the caller's blocks could meet is refused, naming
// them.
TEST(WeightStreamLoad, CallerBlocksStayResidentWhileTheOthersStream) {
  H3RT_REQUIRE_GPU();
  const H3Config c = twelve_blocks();
  auto weights = state_dict(c, test::fresh_seed());
  DenoiserOptions o;
  o.device = Device::cuda;
  const ConstantRequest req(c);
  const ForwardOutputs want = Denoiser::create(weights, o)->forward(req.inputs());
  for (auto& [key, t] : weights)  // blocks 0-5: the caller's device tensors
    if (key.rfind("blocks.", 0) == 0 && std::stoi(key.substr(7)) < 6 && key.ends_with(".weight") &&
        t.dim() == 2 && t.dtype() == DType::bf16)
      t = cuda::to_device(t);
  const model::BlockStorage st = model::uniform_storage(c, model::LinearStorage::bf16);
  const int64_t slot = model::block_slot_layout(c, st).bytes;
  const int64_t w = model::model_weight_bytes(c, st);
  const int64_t least = model::estimate_working_set_bytes(c, st, false, {});
  o.device_memory_limit = w + least - 1;  // 3 blocks stream at load
  const auto d = Denoiser::create(weights, o);
  EXPECT_TRUE(d->weight_streaming().streamed_at_load);
  EXPECT_EQ(d->weight_streaming().streamed_blocks, 3);
  expect_forwards(*d, req, want, "caller");
  EXPECT_GE(d->weight_streaming().streamed_blocks, 3);
  EXPECT_LE(d->weight_streaming().streamed_blocks, 6);

  o.device_memory_limit = w + least - 4 * slot - 1;  // 7 blocks: more than the caller leaves
  try {
    Denoiser::create(weights, o);
    ADD_FAILURE() << "a limit that needs the caller's blocks streamed loaded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("6 blocks are the caller's CUDA tensors"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace h3rt
