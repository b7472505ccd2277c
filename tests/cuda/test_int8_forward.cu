// The tiny model with int8_convrot block projections (quantize-checkpoint, G = 64) on the GPU:
// the W8A8 path (rotate + quantize each activation row, int8 GEMM) must stay as close to the CPU
// fp32 forward of the same checkpoint as the CPU bf16 forward is (mean error within 2x, max
// within 3x, the rule the other quantized checkpoints' GPU tests use).
// With int8 AdaLN layers too (an unpruned int8 release file's adaln_proj.linear, convrot or
// plain): the weights stay int8 on the device, every AdaLN table is bit-identical with the CPU
// reference's (at the golden M and at every smaller M, 1 included), and the forward (eager,
// graph-replayed, streamed) tracks the CPU as above. The layers around the blocks likewise
// (IoLayersBitExactWithCpu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../cpu/golden_inputs.h"
#include "cuda/runtime.h"
#include "cuda_test_util.h"
#include "h3rt/formats.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "model/adaln_int8_cuda.h"
#include "model/forward_internal.h"
#include "model/forward_session_cuda.h"
#include "model/io_int8_cuda.h"
#include "model/model_cuda.h"
#include "model/weight_stream_cuda.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt {
namespace {

using test::Err;
using test::error;

TEST(Int8Forward, ConvrotCheckpointTracksCpuReference) {
  H3RT_REQUIRE_GPU();
  const std::string file = ::testing::TempDir() + "/h3rt_int8_convrot.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::int8;
  opt.int8_group = 64;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  const ForwardInputs in = test::golden_inputs().inputs();
  H3Model host = load_model(file);
  model::DeviceModel dev = model::upload_model(host);
  ASSERT_TRUE(dev.has_int8());
  EXPECT_FALSE(dev.has_fp8());
  EXPECT_EQ(dev.blocks[0].qkv.int8_group, 64);
  const ForwardOutputs ref = forward_cpu(host, in, Precision::fp32);
  const ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16);
  const ForwardOutputs gpu = model::forward_cuda(dev, in);
  for (int k = 0; k < 2; ++k) {
    const FloatVec& r = k ? ref.audio_velocity : ref.video_velocity;
    const Err c = error(k ? cpu.audio_velocity : cpu.video_velocity, r);
    const Err g = error(k ? gpu.audio_velocity : gpu.video_velocity, r);
    std::printf("int8_convrot %s: gpu max/mean %.4g/%.4g, cpu bf16 %.4g/%.4g\n",
                k ? "audio" : "video", g.max_abs, g.mean_abs, c.max_abs, c.mean_abs);
    EXPECT_GT(c.mean_abs, 0.0);
    EXPECT_LE(g.mean_abs, 2.0 * c.mean_abs);
    EXPECT_LE(g.max_abs, 3.0 * c.max_abs);
  }
}

// An int8 AdaLN layer on the device: int8 weight and per-row scales, bf16 bias, no bf16 copy.
void expect_int8_on_device(const model::DeviceLinear& l, int64_t group, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(l.int8());
  EXPECT_EQ(l.w.data(), nullptr) << "a bf16 copy of the int8 AdaLN weight was allocated";
  EXPECT_EQ(l.wi8.dtype(), DType::i8);
  EXPECT_EQ(l.wi8.numel(), l.out * l.in);
  EXPECT_EQ(l.wi8_scale.numel(), l.out);
  EXPECT_EQ(l.int8_group, group);
  EXPECT_EQ(l.b.dtype(), DType::bf16);
}

// One table on the device (adaln_int8_linear, as the session computes it) of the first `rows`
// rows of x, bit for bit against `want` [rows, out].
void expect_table(const model::DeviceLinear& l, const Tensor& x, int64_t rows,
                  const model::AdalnInt8Scratch& scratch, const std::vector<float>& want,
                  const std::string& what) {
  Tensor y = cuda::device_empty(DType::bf16, {rows, l.out});
  cuda::Stream stream;
  model::adaln_int8_linear(l, x.ptr<__nv_bfloat16>(), y.ptr<__nv_bfloat16>(), rows, scratch,
                           stream);
  H3RT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> got = cuda::to_host(y).to_f32();
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << got.size() << " values differ";
}

// The whole forward of `dev`: eager, graph-replayed (twice) and streamed sessions agree bit for
// bit, and the GPU tracks the CPU fp32 forward of `host` as the CPU bf16 one (`cpu`) does (mean
// error within 2x, max within 3x). Returns the streamed copy for further checks.
model::DeviceModel forward_tracks_cpu(const H3Model& host, const model::DeviceModel& dev,
                                      const ForwardInputs& in, const ForwardOutputs& cpu,
                                      const char* what) {
  model::ForwardSessionOptions eager_opt;
  eager_opt.cuda_graph = false;
  model::ForwardSessionCuda eager(dev, in.layout, eager_opt), graph(dev, in.layout);
  const ForwardOutputs gpu = eager.forward(in);
  for (int rep = 0; rep < 2; ++rep) {
    const ForwardOutputs gg = graph.forward(in);
    test::expect_same_bits(gg.video_velocity, gpu.video_velocity, "graph vs eager video");
    test::expect_same_bits(gg.audio_velocity, gpu.audio_velocity, "graph vs eager audio");
  }
  const ForwardOutputs ref = forward_cpu(host, in, Precision::fp32);
  for (int k = 0; k < 2; ++k) {
    const FloatVec& r = k ? ref.audio_velocity : ref.video_velocity;
    const Err e = error(k ? cpu.audio_velocity : cpu.video_velocity, r);
    const Err g = error(k ? gpu.audio_velocity : gpu.video_velocity, r);
    std::printf("%s %s: gpu max/mean %.4g/%.4g, cpu bf16 %.4g/%.4g\n", what, k ? "audio" : "video",
                g.max_abs, g.mean_abs, e.max_abs, e.mean_abs);
    EXPECT_GT(e.mean_abs, 0.0);
    EXPECT_LE(g.mean_abs, 2.0 * e.mean_abs);
    EXPECT_LE(g.max_abs, 3.0 * e.max_abs);
  }
  model::DeviceModel streamed = model::upload_model(host);
  model::stream_block_weights(streamed);
  EXPECT_TRUE(streamed.streamed);
  {  // the session (which refers to `streamed`) ends before the model is returned
    model::ForwardSessionCuda s(streamed, in.layout, eager_opt);
    const ForwardOutputs gs = s.forward(in);
    EXPECT_TRUE(s.last_times().weights_streamed);
    test::expect_same_bits(gs.video_velocity, gpu.video_velocity, "streamed vs resident video");
    test::expect_same_bits(gs.audio_velocity, gpu.audio_velocity, "streamed vs resident audio");
  }
  return streamed;
}

void int8_adaln_tracks_cpu(int64_t group, int64_t adaln_group) {
  const std::string file =
      ::testing::TempDir() + "/h3rt_int8_adaln_" + std::to_string(adaln_group) + ".safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::int8;
  opt.int8_group = group;
  opt.adaln_int8_group = adaln_group;
  opt.layers = {"qkv", "out", "fc1", "fc2", "adaln"};
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  const H3Model host = load_model(file);
  const H3Config& c = host.config;
  model::DeviceModel dev = model::upload_model(host);
  ASSERT_TRUE(dev.has_int8_adaln());
  for (size_t i = 0; i < dev.blocks.size(); ++i)
    expect_int8_on_device(dev.blocks[i].adaln, adaln_group, "block " + std::to_string(i));
  expect_int8_on_device(dev.final_adaln, adaln_group, "final");

  // The CPU reference's block tables ([6, 3M, H] probes) and its AdaLN input.
  const ForwardInputs in = test::golden_inputs().inputs();
  std::map<std::string, std::vector<float>> probed;
  const Probe probe = [&](const std::string& name, const float* d, const Shape& s) {
    probed[name].assign(d, d + shape_numel(s));
  };
  const ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16, &probe);
  const int64_t M = static_cast<int64_t>(in.plan.timestep.size()), H = c.hidden;
  const int64_t Tm = c.adaln_in();
  std::vector<float> x = probed.at("temb");  // silu(temb) rounded to bf16, as both forwards
  for (float& v : x) v = round_bf16(ops::silu(v));
  const Tensor dx = cuda::to_device(tensor_from_f32(x, {M, Tm}, DType::bf16));
  const model::AdalnInt8Scratch scratch = model::make_adaln_int8_scratch(M, Tm, 18 * H);
  for (size_t i = 0; i < dev.blocks.size(); ++i) {
    const std::vector<float>& t = probed.at("block" + std::to_string(i) + "/adaln");
    std::vector<float> want(t.size());  // [6, 3M, H] -> [3M, 6H] = [M, 18H]
    for (int64_t ch = 0; ch < 6; ++ch)
      for (int64_t r = 0; r < 3 * M; ++r)
        for (int64_t j = 0; j < H; ++j) want[(r * 6 + ch) * H + j] = t[(ch * 3 * M + r) * H + j];
    expect_table(dev.blocks[i].adaln, dx, M, scratch, want, "block " + std::to_string(i));
  }
  // The final table as final_layer computes it, and every smaller M (tiny tables: 1 row up).
  for (int64_t rows = M; rows >= 1; --rows) {
    const FloatVec f = model::apply_linear(host.weights.final_adaln, x.data(), rows, true);
    expect_table(dev.final_adaln, dx, rows, scratch, std::vector<float>(f.begin(), f.end()),
                 "final at M = " + std::to_string(rows));
    const FloatVec b = model::apply_linear(host.weights.blocks[1].adaln, x.data(), rows, true);
    expect_table(dev.blocks[1].adaln, dx, rows, scratch, std::vector<float>(b.begin(), b.end()),
                 "block 1 at M = " + std::to_string(rows));
  }

  // The whole forward (eager, graph-replayed, streamed) against the CPU.
  const std::string what = "int8 AdaLN G=" + std::to_string(adaln_group);
  const model::DeviceModel streamed = forward_tracks_cpu(host, dev, in, cpu, what.c_str());
  ASSERT_TRUE(streamed.streamed);
  EXPECT_EQ(streamed.blocks[0].adaln.wi8.device(), Device::cpu) << "the int8 AdaLN streams";
  EXPECT_EQ(streamed.blocks[0].adaln.wi8_scale.device(), Device::cuda) << "its scales stay";
}

// The layers around the blocks stored int8 (quantize-checkpoint --layers io, G = 16; the blocks
// stay bf16, so the int8 activation buffers exist for these layers alone): kept int8 on the
// device, each layer bit-identical with the CPU reference's on the CPU forward's own rows (the
// float32 latents, the bf16 text, the final norm's rows: the heads' result IS the CPU velocity),
// and the forward (eager, graph-replayed, streamed) tracks the CPU as the others do.
TEST(Int8Forward, IoLayersBitExactWithCpu) {
  H3RT_REQUIRE_GPU();
  const std::string file = ::testing::TempDir() + "/h3rt_int8_io.safetensors";
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::int8;
  opt.int8_group = 16;
  opt.layers = {"io"};
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", file, opt);
  const H3Model host = load_model(file);
  const H3Config& c = host.config;
  model::DeviceModel dev = model::upload_model(host);
  EXPECT_FALSE(dev.has_int8());
  ASSERT_TRUE(dev.has_int8_io());
  const std::pair<const model::DeviceLinear*, const char*> io[] = {
      {&dev.video_in, "video_patch_proj"},
      {&dev.audio_in, "audio_patch_proj"},
      {&dev.text_in, "condition_proj"},
      {&dev.video_out, "final_layer.video_out"},
      {&dev.audio_out, "final_layer.audio_out"}};
  for (const auto& [l, name] : io) expect_int8_on_device(*l, 16, name);

  const ForwardInputs in = test::golden_inputs().inputs();
  std::map<std::string, std::vector<float>> probed;
  const Probe probe = [&](const std::string& name, const float* d, const Shape& s) {
    probed[name].assign(d, d + shape_numel(s));
  };
  const ForwardOutputs cpu = forward_cpu(host, in, Precision::bf16, &probe);
  const int64_t S = static_cast<int64_t>(in.layout.token_tags.size()), H = c.hidden;
  const int64_t Nv = in.layout.video_rows(), Na = in.layout.audio_rows(), L = in.layout.text_len;
  model::BlockCudaBuffers b = model::make_block_buffers(
      c, S, 6, false, false, ops::AttentionKernel::flash_bf16, /*int8=*/true);
  cuda::Stream stream;
  using bf16 = __nv_bfloat16;
  auto same = [&](const Tensor& got, const std::vector<float>& want, const std::string& what) {
    H3RT_CUDA_CHECK(cudaStreamSynchronize(stream));
    test::expect_same_bits(cuda::to_host(got).to_f32(), want, what);
  };
  // Patch projections of the float32 latents (CPU: video_embeds / audio_embeds, bf16-valued).
  for (int k = 0; k < 2; ++k) {
    const model::DeviceLinear& l = k ? dev.audio_in : dev.video_in;
    const int64_t n = k ? Na : Nv;
    const float* rows = k ? in.audio_rows : in.video_rows;
    const Tensor x =
        cuda::to_device(tensor_from_f32(std::vector<float>(rows, rows + n * l.in), {n, l.in}));
    Tensor y = cuda::device_empty(DType::bf16, {n, H});
    model::int8_project_f32_in_cuda(l, x.ptr<float>(), b.y.ptr<bf16>(), y.ptr<bf16>(), n,
                                    model::int8_io_activation(b, n, l.in, "test"), stream);
    same(y, probed.at(k ? "audio_embeds" : "video_embeds"), k ? "audio_in" : "video_in");
  }
  // condition_proj of the bf16 text rows (CPU: text_proj).
  std::vector<float> text(in.text, in.text + L * c.text_dim);
  for (float& v : text) v = round_bf16(v);
  const Tensor t = cuda::to_device(tensor_from_f32(text, {L, c.text_dim}, DType::bf16));
  Tensor ty = cuda::device_empty(DType::bf16, {L, H});
  model::int8_project_cuda(dev.text_in, t.ptr<bf16>(), ty.ptr<bf16>(), L,
                           model::int8_io_activation(b, L, c.text_dim, "test"), stream);
  same(ty, probed.at("text_proj"), "condition_proj");
  // The heads of the CPU's final-norm rows: the CPU velocities, bit for bit.
  const std::vector<float>& fn = probed.at("final_norm_out");
  for (int k = 0; k < 2; ++k) {
    const model::DeviceLinear& l = k ? dev.audio_out : dev.video_out;
    const int64_t n = k ? Na : Nv,
                  row0 = k ? in.layout.audio_indices[0] : in.layout.video_indices[0];
    const Tensor x = cuda::to_device(
        tensor_from_f32(std::vector<float>(fn.begin() + row0 * H, fn.begin() + (row0 + n) * H),
                        {n, H}, DType::bf16));
    Tensor y = cuda::device_empty(DType::f32, {n, l.out});
    model::int8_project_f32_out_cuda(l, x.ptr<bf16>(), b.attn.ptr<bf16>(), y.ptr<float>(), n,
                                     model::int8_io_activation(b, n, H, "test"), stream);
    const FloatVec& v = k ? cpu.audio_velocity : cpu.video_velocity;
    same(y, std::vector<float>(v.begin(), v.end()), k ? "audio head" : "video head");
  }

  forward_tracks_cpu(host, dev, in, cpu, "int8 io layers");
}

TEST(Int8Forward, ConvrotAdalnTablesBitExactWithCpu) {
  H3RT_REQUIRE_GPU();
  int8_adaln_tracks_cpu(64, 16);  // the tiny AdaLN input is 96 wide: G = 16
}

TEST(Int8Forward, PlainInt8AdalnTablesBitExactWithCpu) {
  H3RT_REQUIRE_GPU();
  int8_adaln_tracks_cpu(0, 0);
}

}  // namespace
}  // namespace h3rt
