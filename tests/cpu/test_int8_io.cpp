// int8 layers around the blocks (quantize-checkpoint's `io` kind: video_patch_proj,
// audio_patch_proj, condition_proj and, without a PDD bank, the output heads): loading, the CPU
// reference's W8A8 rule on their float32 and bf16 rows, the forward against the same file with
// those layers dequantized, the planner's int8 activation buffers, errors naming the layer, and
// `h3rt info`'s line for them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "golden_inputs.h"
#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "h3rt/safetensors.h"
#include "model/forward_internal.h"
#include "model/weight_stream_plan.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::CliRun;
using test::error_of;
using test::run_cli;

const std::string kWeights = test::golden_dir() + "/weights.safetensors";

// The tiny model with its io layers int8 (group `group`: 16 divides 96, 32, 64 and 192).
std::string quantize_io(const test::TempDir& dir, int64_t group, const std::string& name) {
  QuantizeCheckpointOptions o;
  o.format = WeightFormat::int8;
  o.int8_group = 64;
  o.io_int8_group = group;
  o.layers = {"io"};
  const std::string out = dir.file(name);
  const QuantizeCheckpointReport r = quantize_checkpoint(kWeights, out, o);
  EXPECT_EQ(r.quantized, 5);  // two patch projections, condition_proj, two heads
  return out;
}

// The layer on M float32 rows that are not bf16 values: the W8A8 rule of h3rt/int8.h on the rows
// rounded to bf16, with the stored bias, bf16-valued, whatever precision the forward asks for.
void expect_w8a8(const LinearWeight& lw) {
  const int64_t M = 5;
  std::vector<float> x(M * lw.in);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (1 + i % 7) + 1e-4f;
  const Tensor xt(x.data(), DType::f32, {M, lw.in});
  const Tensor* bias = lw.bias_data.data() ? &lw.bias_data : nullptr;
  const Tensor want = int8_linear(int8_quantize_rows(xt, lw.int8_group), lw.data, lw.scale, bias);
  const std::vector<float> w = want.to_f32();
  for (bool round : {false, true}) {
    const FloatVec got = model::apply_linear(lw, x.data(), M, round);
    ASSERT_EQ(got.size(), w.size());
    EXPECT_EQ(std::memcmp(got.data(), w.data(), w.size() * 4), 0) << lw.name;
  }
  for (float v : w) ASSERT_EQ(round_bf16(v), v) << lw.name << ": not bf16-valued";
}

TEST(Int8Io, QuantizeCheckpointQuantizesTheLayersAroundTheBlocks) {
  test::TempDir dir("h3rt_int8_io");
  const std::string out = quantize_io(dir, 16, "io.safetensors");
  const SafetensorsFile q = SafetensorsFile::open(out);
  for (const std::string layer : {"video_patch_proj", "audio_patch_proj", "condition_proj",
                                  "final_layer.video_out", "final_layer.audio_out"}) {
    const Tensor m = q.get(layer + ".comfy_quant");
    EXPECT_EQ(nlohmann::json::parse(std::string(m.ptr<char>(), m.numel())),
              (nlohmann::json{
                  {"format", "int8_tensorwise"}, {"convrot", true}, {"convrot_groupsize", 16}}))
        << layer;
  }
  EXPECT_FALSE(q.contains("blocks.0.attn.qkv_proj.comfy_quant")) << "io alone leaves the blocks";
  const H3Model m = load_model(out);
  const H3Weights& w = m.weights;
  for (const LinearWeight* l : {&w.video_in, &w.audio_in, &w.text_in, &w.video_out, &w.audio_out}) {
    EXPECT_EQ(l->format, WeightFormat::int8) << l->name;
    EXPECT_EQ(l->int8_group, 16) << l->name;
    expect_w8a8(*l);
  }
  EXPECT_TRUE(model::int8_io_layers(w));
  EXPECT_FALSE(model::int8_io_layers(load_model(kWeights).weights));
}

// The W8A8 io layers' forward against the same file with them dequantized: the error is
// measured and printed, and bounded by 3x the bf16 forward's (the patch projections quantize the
// latents themselves, so this is looser than the AdaLN layers' 2x).
TEST(Int8Io, ForwardStaysNearItsDequantizedLayers) {
  test::TempDir dir("h3rt_int8_io");
  const std::string out = quantize_io(dir, 16, "io.safetensors");
  const test::GoldenInputs& g = test::golden_inputs();
  H3Model dense = load_model(out);
  H3Weights& w = dense.weights;
  for (LinearWeight* l : {&w.video_in, &w.audio_in, &w.text_in, &w.video_out, &w.audio_out}) {
    dense_weight(*l);
    l->format = WeightFormat::f32;
  }
  const ForwardOutputs ref = forward_cpu(dense, g.inputs(), Precision::fp32);
  const ForwardOutputs w8a8 = forward_cpu(load_model(out), g.inputs(), Precision::fp32);
  const ForwardOutputs bf16 = forward_cpu(dense, g.inputs(), Precision::bf16);
  const double ev = test::rel_l2(w8a8.video_velocity, ref.video_velocity);
  const double bv = test::rel_l2(bf16.video_velocity, ref.video_velocity);
  const double ea = test::rel_l2(w8a8.audio_velocity, ref.audio_velocity);
  const double ba = test::rel_l2(bf16.audio_velocity, ref.audio_velocity);
  std::printf("[ measured ] int8 io layers rel L2 video %.4g (bf16 %.4g), audio %.4g (bf16 %.4g)\n",
              ev, bv, ea, ba);
  EXPECT_GT(ev, 0.0);
  EXPECT_LT(ev, 3 * bv);
  EXPECT_LT(ea, 3 * ba);
}

// The forward holds the int8 activation buffers when only the io layers are int8: the planner
// counts them (rows x the widest int8 input, their scales, the GEMM's int32 rows).
TEST(Int8Io, PlannerCountsTheInt8ActivationBuffers) {
  const H3Config c = H3Config::h3();
  model::BlockStorage s = model::uniform_storage(c, model::LinearStorage::bf16);
  model::ForwardShape f;
  f.rows = 15499;
  const int64_t plain = model::estimate_working_set_bytes(c, s, true, f);
  s.int8_io = true;
  const int64_t io = model::estimate_working_set_bytes(c, s, true, f);
  EXPECT_GE(io - plain, f.rows * model::int8_activation_width(c) + f.rows * 4);
  EXPECT_EQ(model::int8_activation_width(c), c.ffn);  // H3's widest input is fc2's
  H3Config wide_text = H3Config::tiny();
  wide_text.text_dim = 4 * wide_text.ffn;
  EXPECT_EQ(model::int8_activation_width(wide_text), wide_text.text_dim);
}

TEST(Int8Io, ErrorsNameTheLayer) {
  test::TempDir dir("h3rt_int8_io");
  QuantizeCheckpointOptions o;
  o.format = WeightFormat::int8;
  o.int8_group = 64;  // video_patch_proj reads 96 features: 64 does not divide them
  o.layers = {"io"};
  std::string e = error_of([&] { quantize_checkpoint(kWeights, dir.file("x.safetensors"), o); });
  EXPECT_NE(e.find("video_patch_proj"), std::string::npos) << e;
  o.format = WeightFormat::fp8_scaled;
  e = error_of([&] { quantize_checkpoint(kWeights, dir.file("y.safetensors"), o); });
  EXPECT_NE(e.find("'io' is quantized to int8 only"), std::string::npos) << e;
  o.format = WeightFormat::int8;
  o.layers = {"in"};
  e = error_of([&] { quantize_checkpoint(kWeights, dir.file("z.safetensors"), o); });
  EXPECT_NE(e.find("adaln or io"), std::string::npos) << e;
}

TEST(Int8Io, CliQuantizeCheckpointAndInfo) {
  test::TempDir dir("h3rt_int8_io");
  const std::string out = dir.file("q.safetensors");
  CliRun r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + out +
                     " --format int8_convrot --group-size 64 --io-group-size 16 --layers "
                     "qkv,out,fc1,fc2,io");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("17 layers -> int8_convrot"), std::string::npos) << r.output;
  r = run_cli("info " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const char* want =
      "input and output layers (patch projections, condition_proj, heads): int8_convrot G=16 x5 "
      "-> CUDA: int8 W8A8 GEMM";
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + dir.file("p.safetensors") +
              " --format int8_convrot --layers io");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("video_patch_proj"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace h3rt
