// The reusable forward session against the one-shot forward_cuda: bit-identical velocities over
// a sequence of steps whose rows, timesteps, table height and text change, eagerly and replayed
// from CUDA graphs.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/runtime.h"
#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#include "model/synthetic_gemm_cuda.h"

namespace h3rt {
namespace {

struct Step {
  float t_video, t_audio;
  bool new_text;
  bool expect_graph;  // with graphs on: replayed (the table height M was seen before)
};

std::vector<float> normal(size_t n, std::mt19937_64& g, bool bf16) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = bf16 ? round_bf16(d(g)) : d(g);
  return v;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void expect_same_bits(const FloatVec& got, const FloatVec& want, const char* what, int step) {
  ASSERT_EQ(got.size(), want.size()) << what << " step " << step;
  size_t differ = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(want[i]) && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << what << " step " << step << ": first difference at " << first;
}

// How each call names the next call's timesteps (ForwardInputs::next_timesteps).
enum class Ahead { none, right, wrong };

// NVFP4 block projections: -1 none; 0 with activation scales computed per call; > 0 with that
// static input scale (the producers then encode the GEMM inputs).
void run_steps(bool cuda_graph, float nvfp4_input_scale = -1.0f, Ahead ahead = Ahead::none) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + (cuda_graph ? ", graphs" : ", eager") +
               ", nvfp4 input scale " + std::to_string(nvfp4_input_scale));
  std::mt19937_64 g(seed);
  const H3Config c = H3Config::tiny();
  model::DeviceModel dev = model::make_synthetic_device_model(c, seed);
  if (nvfp4_input_scale >= 0.0f) {
    for (model::DeviceBlock& b : dev.blocks)
      for (model::DeviceLinear* l : {&b.qkv, &b.out, &b.fc1, &b.fc2})
        model::convert_linear_to_nvfp4(*l, nvfp4_input_scale, nullptr);
    ASSERT_TRUE(dev.has_nvfp4());
  }
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  model::ForwardSessionOptions o;
  o.cuda_graph = cuda_graph;
  model::ForwardSessionCuda session(dev, layout, o);

  // M = 2, 2 (other values), 1, 1 (new text), 2 (audio before video in the sorted timesteps).
  const std::vector<Step> steps = {{0.3f, 0.631579f, true, false},
                                   {0.45f, 0.8f, false, true},
                                   {0.5f, 0.5f, false, false},
                                   {0.6f, 0.6f, true, true},
                                   {0.9f, 0.2f, false, true}};
  std::vector<TimestepPlan> plans;
  for (const Step& st : steps) plans.push_back(make_timestep_plan(layout, st.t_video, st.t_audio));
  const std::vector<float> elsewhere = {0.123f, 0.456f};  // timesteps no call uses
  std::vector<float> text;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& st = steps[i];
    if (st.new_text) text = normal(layout.text_len * c.text_dim, g, true);
    const std::vector<float> video = normal(layout.video_rows() * c.video_features(), g, false);
    const std::vector<float> audio = normal(layout.audio_rows() * c.audio_channels, g, false);
    const TimestepPlan& plan = plans[i];
    ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
    if (ahead == Ahead::right && i + 1 < steps.size()) in.next_timesteps = &plans[i + 1].timestep;
    if (ahead == Ahead::wrong) in.next_timesteps = &elsewhere;
    const ForwardOutputs got = session.forward(in);
    const model::ForwardStepTimes& t = session.last_times();
    // Every step's timesteps differ from the previous step's: with the right look-ahead each
    // step after the first takes its time embedding from it.
    EXPECT_EQ(t.temb_ahead, ahead == Ahead::right && i > 0) << "step " << i;
    EXPECT_EQ(t.graph, cuda_graph && st.expect_graph) << "step " << i;
    EXPECT_EQ(t.text_refined, st.new_text) << "step " << i;
    const ForwardOutputs want = model::forward_cuda(dev, in);
    expect_same_bits(got.video_velocity, want.video_velocity, "video", int(i));
    expect_same_bits(got.audio_velocity, want.audio_velocity, "audio", int(i));
  }
  EXPECT_EQ(session.graph_enabled(), cuda_graph);
  EXPECT_EQ(session.graph_count(), cuda_graph ? 2 : 0);
  if (cuda_graph) EXPECT_GE(session.graph_nodes(), c.layers * (model::kBlockLaunches + 1));
}

TEST(ForwardSession, EagerStepsBitIdenticalToForwardCuda) {
  run_steps(false);
}

TEST(ForwardSession, GraphStepsBitIdenticalToForwardCuda) {
  run_steps(true);
}

// The NVFP4 paths inside a captured step: the two-pass activation quantizer (workspace counters,
// atomics) and the producers writing NVFP4, each replayed bit-identically to eager launches.
TEST(ForwardSession, Nvfp4GraphStepsBitIdenticalToForwardCuda) {
  run_steps(true, 0.0f);
  run_steps(true, 16.0f / 2688.0f);
}

// The time embedding computed one call ahead (full-form AdaLN: the host time MLP) gives the same
// bits as computing it in the call; a look-ahead naming timesteps that never come changes nothing.
TEST(ForwardSession, TimeEmbeddingLookAheadBitIdentical) {
  run_steps(true, -1.0f, Ahead::right);
  run_steps(false, -1.0f, Ahead::wrong);
}

// Chained blocks (block_cuda.h BlockChain: each block's gate_mlp residual added in the next
// block's norm1) give the bits of the blocks run one by one, for every block GEMM format (each
// format's norm1 writes its own fused input), with both attention kernels, eager and replayed.
TEST(ForwardSession, ChainedBlocksBitIdenticalToUnchained) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const H3Config c = H3Config::tiny();
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  const std::vector<float> text = normal(layout.text_len * c.text_dim, g, true);
  const int cc = cuda::current_device_cc();
  const bool sage = cc == 90 || cc == 120 || cc == 121;
  for (SyntheticGemm f :
       {SyntheticGemm::bf16, SyntheticGemm::fp8, SyntheticGemm::int8, SyntheticGemm::nvfp4}) {
    const model::DeviceModel dev = model::make_synthetic_gemm_model(c, seed, f, 64);
    for (bool graph : {false, true}) {
      model::ForwardSessionOptions on;
      on.cuda_graph = graph;
      if (sage && f == SyntheticGemm::int8) on.attention = ops::AttentionKernel::sage_8bit;
      model::ForwardSessionOptions off = on;
      off.chain_blocks = false;
      model::ForwardSessionCuda chained(dev, layout, on), single(dev, layout, off);
      for (int i = 0; i < 3; ++i) {
        const std::string what = std::string(synthetic_gemm_name(f)) + (graph ? " graph" : "");
        const std::vector<float> video = normal(layout.video_rows() * c.video_features(), g, false);
        const std::vector<float> audio = normal(layout.audio_rows() * c.audio_channels, g, false);
        const TimestepPlan plan = make_timestep_plan(layout, 0.2f + 0.3f * i, 0.5f);
        const ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
        const ForwardOutputs a = chained.forward(in), b = single.forward(in);
        expect_same_bits(a.video_velocity, b.video_velocity, (what + " video").c_str(), i);
        expect_same_bits(a.audio_velocity, b.audio_velocity, (what + " audio").c_str(), i);
      }
    }
  }
}

TEST(ForwardSession, RejectsAnotherLayout) {
  H3RT_REQUIRE_GPU();
  const H3Config c = H3Config::tiny();
  model::DeviceModel dev = model::make_synthetic_device_model(c, 7);
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  const SequenceLayout other = make_t2va_layout(10, 9, 7, 8, 16);
  model::ForwardSessionCuda session(dev, layout);
  const TimestepPlan plan = make_timestep_plan(other, 0.3f, 0.6f);
  std::vector<float> video(other.video_rows() * c.video_features()),
      audio(other.audio_rows() * c.audio_channels), text(other.text_len * c.text_dim);
  EXPECT_THROW(session.forward({other, plan, video.data(), audio.data(), text.data()}), Error);
}

}  // namespace
}  // namespace h3rt
