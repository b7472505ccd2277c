// Dynamic fp8 activations on the GPU: the fp8_quantize op bit-exact against its CPU reference
// (fresh random data, awkward shapes, strided and misaligned rows, all-zero input, CUDA-graph
// replays on new data), and the tiny model's forward from an fp8_scaled checkpoint without
// input_scale with the option on: GPU against the CPU reference, and graph steps bit-identical
// to eager ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "../cpu/variant_files.h"
#include "cuda_test_util.h"
#include "h3rt/layout.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "model/forward_session_cuda.h"
#include "model/model_cuda.h"
#include "ops/fp8_quantize/fp8_quantize.h"

namespace h3rt {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Case {
  int64_t rows, cols, x_ld, q_ld, x_offset;  // x_offset: elements before x (misalignment)
};

// The device buffers of one case: x (padding columns hold large values that must not count),
// q, scale, amax and the workspace, all poisoned.
struct Buffers {
  Case c;
  test::Bf16Data x;
  Tensor dx, dq, dscale, damax, dws;
  ops::Fp8QuantizeCudaParams params() const {
    ops::Fp8QuantizeCudaParams p;
    p.x = test::dptr<__nv_bfloat16>(dx) + c.x_offset;
    p.q = test::dptr<__nv_fp8_e4m3>(dq);
    p.rows = c.rows;
    p.cols = c.cols;
    p.x_row_stride = c.x_ld;
    p.q_row_stride = c.q_ld;
    p.scale = test::dptr<float>(dscale);
    p.amax = test::dptr<float>(damax);
    p.workspace = dws.data();
    return p;
  }
};

test::Bf16Data random_input(const Case& c, std::mt19937_64& g) {
  test::Bf16Data x = test::random_rows_bf16(c.rows, c.x_ld, g);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t k = c.cols; k < c.x_ld; ++k) {
      x.bits[r * c.x_ld + k] = f32_to_bf16(3e4f);
      x.f[r * c.x_ld + k] = bf16_to_f32(x.bits[r * c.x_ld + k]);
    }
  return x;
}

void upload_input(Buffers& b) {
  std::vector<uint16_t> bits(b.c.x_offset, 0);
  bits.insert(bits.end(), b.x.bits.begin(), b.x.bits.end());
  b.dx = test::upload(bits, DType::bf16, {int64_t(bits.size())});
}

Buffers make_buffers(const Case& c, std::mt19937_64& g) {
  Buffers b;
  b.c = c;
  b.x = random_input(c, g);
  upload_input(b);
  b.dq = test::device_buffer(DType::u8, {std::max<int64_t>(c.rows * c.q_ld, 1)});
  b.dscale = test::device_buffer(DType::f32, {1});
  b.damax = test::device_buffer(DType::f32, {1});
  b.dws = cuda::device_empty(DType::u8, {int64_t(ops::fp8_quantize_workspace_bytes())});
  H3RT_CUDA_CHECK(cudaMemset(b.dws.data(), 0x7f, b.dws.nbytes()));  // huge floats if read stale
  return b;
}

// The device results against fp8_quantize_dynamic_cpu on the same values, bit for bit; q's
// padding columns stay unwritten.
void expect_matches_cpu(const Buffers& b) {
  const Case& c = b.c;
  std::vector<uint8_t> want(c.rows * c.q_ld, 0xff);
  float s = 0.0f, amax = 0.0f;
  ops::fp8_quantize_dynamic_cpu({.x = b.x.f.data(),
                                 .q = want.data(),
                                 .rows = c.rows,
                                 .cols = c.cols,
                                 .x_row_stride = c.x_ld,
                                 .q_row_stride = c.q_ld,
                                 .scale = &s,
                                 .amax = &amax});
  const auto got_s = test::download<float>(b.dscale);
  const auto got_amax = test::download<float>(b.damax);
  EXPECT_EQ(bits_of(got_amax[0]), bits_of(amax)) << got_amax[0] << " vs " << amax;
  EXPECT_EQ(bits_of(got_s[0]), bits_of(s)) << got_s[0] << " vs " << s;
  const auto got_q = test::download<uint8_t>(b.dq);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (got_q[i] != want[i] && bad++ == 0) first = int64_t(i);
  EXPECT_EQ(bad, 0) << "first differing byte " << first;
}

void run_case(const Case& c, std::mt19937_64& g) {
  SCOPED_TRACE("rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + " x_ld " +
               std::to_string(c.x_ld) + " q_ld " + std::to_string(c.q_ld) + " x_offset " +
               std::to_string(c.x_offset));
  Buffers b = make_buffers(c, g);
  ASSERT_EQ(ops::fp8_quantize_dynamic_cuda(b.params(), nullptr), cudaSuccess);
  expect_matches_cpu(b);
}

TEST(Fp8Quantize, BitExactWithCpuReferenceOnAwkwardShapes) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const std::vector<Case> cases = {
      {1, 8, 8, 8, 0},              // one row, one vector
      {3, 24, 24, 24, 0},           // fewer rows than threads' work
      {131, 5376, 5376, 5376, 0},   // release hidden width
      {2, 14336, 14336, 14336, 0},  // release ffn width, few rows: long rows per CTA
      {1029, 136, 136, 136, 0},     // more rows than amax CTAs (grid-stride, 1024 partials)
      {4099, 8, 8, 8, 0},           // many short rows
      {77, 40, 48, 56, 0},          // strided x and q rows (padding must not count / be written)
      {5, 13, 13, 13, 0},           // cols not a multiple of 8: element-wise kernels
      {9, 24, 27, 30, 0},           // odd strides: element-wise kernels
      {17, 16, 16, 16, 1},          // x misaligned by one element: element-wise kernels
  };
  for (const Case& c : cases) run_case(c, g);
}

TEST(Fp8Quantize, AllZeroInputUsesScaleOne) {
  H3RT_REQUIRE_GPU();
  std::mt19937_64 g(test::fresh_seed());
  for (const Case& c : {Case{33, 64, 64, 64, 0}, Case{3, 5, 5, 5, 0}}) {
    Buffers b = make_buffers(c, g);
    std::fill(b.x.bits.begin(), b.x.bits.end(), uint16_t(0));
    std::fill(b.x.f.begin(), b.x.f.end(), 0.0f);
    upload_input(b);
    ASSERT_EQ(ops::fp8_quantize_dynamic_cuda(b.params(), nullptr), cudaSuccess);
    EXPECT_EQ(test::download<float>(b.dscale)[0], 1.0f);
    EXPECT_EQ(test::download<float>(b.damax)[0], 0.0f);
    for (uint8_t v : test::download<uint8_t>(b.dq)) ASSERT_EQ(v, 0);
  }
}

// Captured once, replayed on new data in the same buffers (including an all-zero tensor): every
// replay recomputes amax and s; nothing persists from the capture or an earlier replay.
TEST(Fp8Quantize, GraphReplaysRecomputeTheScale) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const Case c{300, 1024, 1024, 1024, 0};
  Buffers b = make_buffers(c, g);
  cuda::Stream s;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  H3RT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  ASSERT_EQ(ops::fp8_quantize_dynamic_cuda(b.params(), s), cudaSuccess);
  H3RT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  H3RT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    SCOPED_TRACE("replay " + std::to_string(rep));
    b.x = random_input(c, g);
    if (rep == 1) {
      std::fill(b.x.bits.begin(), b.x.bits.end(), uint16_t(0));
      std::fill(b.x.f.begin(), b.x.f.end(), 0.0f);
    }
    // On the graph's stream: s is non-blocking, so a legacy-stream cudaMemset (asynchronous for
    // device memory) could land after the replay's writes (seen once on an H100: every q byte
    // 0xff, amax and scale right).
    H3RT_CUDA_CHECK(
        cudaMemcpyAsync(b.dx.data(), b.x.bits.data(), b.dx.nbytes(), cudaMemcpyHostToDevice, s));
    H3RT_CUDA_CHECK(cudaMemsetAsync(b.dq.data(), 0xff, b.dq.nbytes(), s));
    H3RT_CUDA_CHECK(cudaGraphLaunch(exec, s));
    s.synchronize();
    expect_matches_cpu(b);
  }
  H3RT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  H3RT_CUDA_CHECK(cudaGraphDestroy(graph));
}

// ---- the model with dynamic fp8 activations -----------------------------------------------

// The golden tiny weights quantized to fp8_scaled (block projections, no input_scale), loaded
// with dynamic activations: all 12 projections on the fp8 GEMM path without a static scale.
H3Model load_fp8_dynamic() {
  const std::string file = ::testing::TempDir() + "/h3rt_fp8_dynamic.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::fp8_scaled;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  H3Model host = load_model(file);
  EXPECT_EQ(set_fp8_activations(host, Fp8Activations::dynamic), 12);
  return host;
}

using test::Err;
using test::error;

// GPU forward vs the CPU fp32 forward of the same model and option, within the bounds of the
// other quantized-checkpoint forward tests: mean error <= 2x, max <= 3x the CPU bf16 forward's.
TEST(Fp8Quantize, DynamicFp8CheckpointForwardTracksCpuReference) {
  H3RT_REQUIRE_GPU();
  const H3Model host = load_fp8_dynamic();
  model::DeviceModel dev = model::upload_model(host);
  ASSERT_TRUE(dev.has_fp8());
  for (const model::DeviceBlock& blk : dev.blocks)
    for (const model::DeviceLinear* l : {&blk.qkv, &blk.out, &blk.fc1, &blk.fc2})
      EXPECT_TRUE(l->fp8_dynamic());
  const ForwardInputs in = test::golden_inputs().inputs();
  const ForwardOutputs ref = forward_cpu(host, in, Precision::fp32);
  const ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16);
  const ForwardOutputs gpu = model::forward_cuda(dev, in);
  for (int k = 0; k < 2; ++k) {
    const FloatVec& r = k ? ref.audio_velocity : ref.video_velocity;
    const Err c = error(k ? cpu.audio_velocity : cpu.video_velocity, r);
    const Err g = error(k ? gpu.audio_velocity : gpu.video_velocity, r);
    std::printf("fp8 dynamic %s: gpu max/mean %.4g/%.4g, cpu bf16 %.4g/%.4g\n",
                k ? "audio" : "video", g.max_abs, g.mean_abs, c.max_abs, c.mean_abs);
    EXPECT_GT(c.mean_abs, 0.0);
    EXPECT_LE(g.mean_abs, 2.0 * c.mean_abs);
    EXPECT_LE(g.max_abs, 3.0 * c.max_abs);
  }
  // The default (static) upload of the same checkpoint dequantizes instead: a different result.
  H3Model plain = host;
  set_fp8_activations(plain, Fp8Activations::static_scale);
  model::DeviceModel dev_plain = model::upload_model(plain);
  EXPECT_FALSE(dev_plain.has_fp8());
  EXPECT_NE(model::forward_cuda(dev_plain, in).video_velocity, gpu.video_velocity);
}

// "full_precision_matrix_mult" fp8 layers with an input_scale upload dequantized, as layers without
// one: the same GPU forward bit for bit; without the flag the static scale gives fp8 GEMMs.
TEST(Fp8Quantize, FullPrecisionFp8LayersRunDequantizedOnTheGpu) {
  H3RT_REQUIRE_GPU();
  test::TempDir dir("h3rt_fp8_full_precision_cuda");
  const std::string plain = dir.file("fp8.safetensors");
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::fp8_scaled;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", plain, opt);
  ASSERT_GT(test::write_fp8_variant(plain, dir.file("full.safetensors"), 0.02f, true), 0);
  ASSERT_GT(test::write_fp8_variant(plain, dir.file("static.safetensors"), 0.02f, false), 0);
  model::DeviceModel dev_plain = model::upload_model(load_model(plain));
  model::DeviceModel dev_full = model::upload_model(load_model(dir.file("full.safetensors")));
  model::DeviceModel dev_static = model::upload_model(load_model(dir.file("static.safetensors")));
  EXPECT_FALSE(dev_full.has_fp8());
  EXPECT_TRUE(dev_static.has_fp8());
  const ForwardInputs in = test::golden_inputs().inputs();
  const ForwardOutputs want = model::forward_cuda(dev_plain, in);
  const ForwardOutputs got = model::forward_cuda(dev_full, in);
  test::expect_same_bits(got.video_velocity, want.video_velocity, "video");
  test::expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");
}

// Graph-captured steps (amax + quantize inside the capture) bit-identical to eager forwards.
TEST(Fp8Quantize, DynamicFp8GraphStepsBitIdenticalToEager) {
  H3RT_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const H3Model host = load_fp8_dynamic();
  const H3Config& c = host.config;
  model::DeviceModel dev = model::upload_model(host);
  const SequenceLayout layout = make_t2va_layout(10, 9, 7, 8, 12);
  model::ForwardSessionOptions o;
  o.cuda_graph = true;
  model::ForwardSessionCuda session(dev, layout, o);
  std::normal_distribution<float> d(0.0f, 1.0f);
  auto normal = [&](size_t n, bool bf16) {
    std::vector<float> v(n);
    for (float& x : v) x = bf16 ? round_bf16(d(g)) : d(g);
    return v;
  };
  const std::vector<float> text = normal(layout.text_len * c.text_dim, true);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // Inputs of growing magnitude: each step's activation scales differ from the captured ones.
    std::vector<float> video = normal(layout.video_rows() * c.video_features(), false);
    for (float& v : video) v *= float(1 + 2 * step);
    const std::vector<float> audio = normal(layout.audio_rows() * c.audio_channels, false);
    const TimestepPlan plan = make_timestep_plan(layout, 0.3f + 0.2f * step, 0.6f);
    const ForwardInputs in{layout, plan, video.data(), audio.data(), text.data()};
    const ForwardOutputs got = session.forward(in);
    EXPECT_EQ(session.last_times().graph, step > 0);
    const ForwardOutputs want = model::forward_cuda(dev, in);
    ASSERT_EQ(got.video_velocity.size(), want.video_velocity.size());
    ASSERT_EQ(got.audio_velocity.size(), want.audio_velocity.size());
    EXPECT_EQ(std::memcmp(got.video_velocity.data(), want.video_velocity.data(),
                          got.video_velocity.size() * 4),
              0);
    EXPECT_EQ(std::memcmp(got.audio_velocity.data(), want.audio_velocity.data(),
                          got.audio_velocity.size() * 4),
              0);
  }
  EXPECT_TRUE(session.graph_enabled());
}

}  // namespace
}  // namespace h3rt
