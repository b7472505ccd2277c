// int8 AdaLN layers, as an unpruned int8 release file stores them (each block's and the final
// layer's adaln_proj.linear, int8_tensorwise with or without convrot): quantize-checkpoint's
// `adaln` layer kind and its own group size, loading, the CPU reference's AdaLN table (the W8A8
// rule with the bf16 bias), the CUDA storage the planner assumes, the errors naming the layer,
// and `h3rt info`'s line for them.
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

// The tiny model with int8 block projections (group `group`) and int8 AdaLN layers (group
// `adaln_group`; 0: plain int8).
std::string quantize_with_adaln(const test::TempDir& dir, int64_t group, int64_t adaln_group,
                                const std::string& name) {
  QuantizeCheckpointOptions o;
  o.format = WeightFormat::int8;
  o.int8_group = group;
  o.adaln_int8_group = adaln_group;
  o.layers = {"qkv", "out", "fc1", "fc2", "adaln"};
  const std::string out = dir.file(name);
  const QuantizeCheckpointReport r = quantize_checkpoint(kWeights, out, o);
  EXPECT_EQ(r.quantized, 12 + 2 + 1);  // projections, two blocks' AdaLN, the final AdaLN
  return out;
}

nlohmann::json marker_of(const SafetensorsFile& f, const std::string& layer) {
  const Tensor m = f.get(layer + ".comfy_quant");
  return nlohmann::json::parse(std::string(m.ptr<char>(), m.numel()));
}

// The AdaLN table the CPU forward computes from M bf16 rows of silu(temb): exactly the W8A8
// rule of h3rt/int8.h with the stored bias, bf16-valued.
void expect_table_is_w8a8(const LinearWeight& lw) {
  const int64_t M = 3;
  std::vector<float> x(M * lw.in);
  for (size_t i = 0; i < x.size(); ++i) x[i] = round_bf16(std::sin(0.61f * i) * (1 + i % 5));
  const Tensor xt(x.data(), DType::f32, {M, lw.in});
  ASSERT_NE(lw.bias_data.data(), nullptr);
  const Tensor want =
      int8_linear(int8_quantize_rows(xt, lw.int8_group), lw.data, lw.scale, &lw.bias_data);
  const FloatVec got = model::apply_linear(lw, x.data(), M, true);
  const std::vector<float> w = want.to_f32();
  ASSERT_EQ(got.size(), w.size());
  EXPECT_EQ(std::memcmp(got.data(), w.data(), w.size() * 4), 0) << lw.name;
  for (float v : w) ASSERT_EQ(round_bf16(v), v) << lw.name << ": not bf16-valued";
}

TEST(Int8Adaln, QuantizeCheckpointQuantizesEveryAdalnLayer) {
  test::TempDir dir("h3rt_int8_adaln");
  const std::string out = quantize_with_adaln(dir, 64, 16, "a.safetensors");
  const SafetensorsFile in = SafetensorsFile::open(kWeights), q = SafetensorsFile::open(out);
  for (const std::string layer : {"blocks.1.adaln_proj.linear", "final_layer.adaln_proj.linear"}) {
    const Int8Rows want = int8_quantize_rows(in.get(layer + ".weight"), 16);
    const Tensor got = q.get(layer + ".weight");
    ASSERT_EQ(got.nbytes(), want.q.nbytes()) << layer;
    EXPECT_EQ(std::memcmp(got.data(), want.q.data(), got.nbytes()), 0) << layer;
    EXPECT_EQ(marker_of(q, layer),
              (nlohmann::json{
                  {"format", "int8_tensorwise"}, {"convrot", true}, {"convrot_groupsize", 16}}));
    EXPECT_EQ(q.get(layer + ".bias").dtype(), DType::bf16) << "the bias is copied unchanged";
  }
  EXPECT_EQ(marker_of(q, "blocks.1.mlp.fc1")["convrot_groupsize"], 64);
  const H3Model m = load_model(out);
  for (const BlockWeights& b : m.weights.blocks) {
    EXPECT_EQ(b.adaln.format, WeightFormat::int8);
    EXPECT_EQ(b.adaln.int8_group, 16);
    EXPECT_EQ(model::upload_storage(m.config, b).adaln, model::LinearStorage::int8);
    expect_table_is_w8a8(b.adaln);
  }
  EXPECT_EQ(m.weights.final_adaln.format, WeightFormat::int8);
  expect_table_is_w8a8(m.weights.final_adaln);
}

TEST(Int8Adaln, PlainInt8AdalnLoadsWithoutRotation) {
  test::TempDir dir("h3rt_int8_adaln");
  const std::string out = quantize_with_adaln(dir, 0, 0, "plain.safetensors");
  const H3Model m = load_model(out);
  EXPECT_EQ(m.weights.blocks[0].adaln.format, WeightFormat::int8);
  EXPECT_EQ(m.weights.blocks[0].adaln.int8_group, 0);
  EXPECT_EQ(m.weights.final_adaln.int8_group, 0);
  expect_table_is_w8a8(m.weights.blocks[0].adaln);
  expect_table_is_w8a8(m.weights.final_adaln);
}

// The W8A8 AdaLN's forward stays near the same file's forward with those layers dequantized (as
// ForwardStaysNearItsDequantizedWeights does for the projections): within 2x the bf16 error.
TEST(Int8Adaln, ForwardStaysNearItsDequantizedAdaln) {
  test::TempDir dir("h3rt_int8_adaln");
  const std::string out = quantize_with_adaln(dir, 64, 16, "a.safetensors");
  const test::GoldenInputs& g = test::golden_inputs();
  H3Model dense = load_model(out);
  for (LinearWeight* l : {&dense.weights.blocks[0].adaln, &dense.weights.blocks[1].adaln,
                          &dense.weights.final_adaln}) {
    dense_weight(*l);
    l->format = WeightFormat::f32;
  }
  const ForwardOutputs ref = forward_cpu(dense, g.inputs(), Precision::fp32);
  const ForwardOutputs w8a8 = forward_cpu(load_model(out), g.inputs(), Precision::fp32);
  const ForwardOutputs bf16 = forward_cpu(dense, g.inputs(), Precision::bf16);
  const double ev = test::rel_l2(w8a8.video_velocity, ref.video_velocity);
  const double bv = test::rel_l2(bf16.video_velocity, ref.video_velocity);
  std::printf("[ measured ] int8 AdaLN rel L2 video %.4g; bf16 %.4g\n", ev, bv);
  EXPECT_GT(ev, 0.0);
  EXPECT_LT(ev, 2 * bv);
  EXPECT_LT(test::rel_l2(w8a8.audio_velocity, ref.audio_velocity),
            2 * test::rel_l2(bf16.audio_velocity, ref.audio_velocity));
}

TEST(Int8Adaln, ErrorsNameTheLayer) {
  test::TempDir dir("h3rt_int8_adaln");
  QuantizeCheckpointOptions o;
  o.format = WeightFormat::int8;
  o.int8_group = 64;
  o.layers = {"qkv", "adaln"};
  // The tiny model's AdaLN input is 96 wide: 64 does not divide it.
  std::string e = error_of([&] { quantize_checkpoint(kWeights, dir.file("x.safetensors"), o); });
  EXPECT_NE(e.find("blocks.0.adaln_proj.linear"), std::string::npos) << e;
  o.format = WeightFormat::fp8_scaled;
  e = error_of([&] { quantize_checkpoint(kWeights, dir.file("y.safetensors"), o); });
  EXPECT_NE(e.find("'adaln' is quantized to int8 only"), std::string::npos) << e;
  // A file whose marker asks for a group that does not divide Tm: named at load.
  const std::string good = quantize_with_adaln(dir, 64, 16, "a.safetensors");
  const SafetensorsFile f = SafetensorsFile::open(good);
  NamedTensors t;
  const std::string bad = "blocks.1.adaln_proj.linear.comfy_quant";
  const std::string text =
      nlohmann::json{{"format", "int8_tensorwise"}, {"convrot", true}, {"convrot_groupsize", 64}}
          .dump();
  Tensor m = Tensor::zeros(DType::u8, {static_cast<int64_t>(text.size())});
  std::memcpy(m.data(), text.data(), text.size());
  for (const auto& entry : f.entries())
    t.emplace_back(entry.name, entry.name == bad ? m : f.get(entry.name));
  write_safetensors(dir.file("bad.safetensors"), t, f.metadata());
  e = error_of([&] { load_model(dir.file("bad.safetensors")); });
  EXPECT_NE(e.find("blocks.1.adaln_proj.linear"), std::string::npos) << e;
}

TEST(Int8Adaln, CliQuantizeCheckpointAndInfo) {
  test::TempDir dir("h3rt_int8_adaln");
  const std::string out = dir.file("q.safetensors");
  CliRun r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + out +
                     " --format int8_convrot --group-size 64 --adaln-group-size 16 --layers "
                     "qkv,out,fc1,fc2,adaln");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("15 layers -> int8_convrot"), std::string::npos) << r.output;
  r = run_cli("info " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* group : {"block AdaLN: int8_convrot G=16 x2 -> CUDA: int8 W8A8 GEMM",
                            "final AdaLN: int8_convrot G=16 x1 -> CUDA: int8 W8A8 GEMM"})
    EXPECT_NE(r.output.find(group), std::string::npos) << group << "\n" << r.output;
  r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + dir.file("p.safetensors") +
              " --format int8 --layers adaln");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("3 layers -> int8"), std::string::npos) << r.output;
  r = run_cli("info " + dir.file("p.safetensors"));
  EXPECT_NE(r.output.find("block AdaLN: int8 x2 -> CUDA: int8 W8A8 GEMM"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace h3rt
