// int8_tensorwise / int8_convrot checkpoints on the CPU reference: quantize-checkpoint's output
// against the row quantizer, loading (markers, "params" nesting, plain tensorwise with a scalar
// scale), every malformed marker or scale named with its layer, the tiny model's W8A8 forward
// against the forward of its dequantized weights, and the two CLI verbs end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "golden_inputs.h"
#include "h3rt/int8.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "h3rt/safetensors.h"
#include "model/forward_internal.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::CliRun;
using test::run_cli;

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("h3rt_int8_test") {}
};

namespace fs = std::filesystem;

const std::string kWeights = test::golden_dir() + "/weights.safetensors";
const std::string kGolden = test::golden_dir() + "/golden.safetensors";

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous_copy(), y = b.contiguous_copy();
  return std::memcmp(x.data(), y.data(), static_cast<size_t>(x.nbytes())) == 0;
}

std::string quantize_tiny(const TempDir& dir, int64_t group, const std::string& name) {
  QuantizeCheckpointOptions o;
  o.format = WeightFormat::int8;
  o.int8_group = group;
  const std::string out = dir.file(name);
  const QuantizeCheckpointReport r = quantize_checkpoint(kWeights, out, o);
  EXPECT_EQ(r.quantized, 12);
  return out;
}

// The file's tensors with some replaced or removed, written to `out`.
void rewrite(const std::string& in, const std::string& out,
             const std::map<std::string, Tensor>& replace, const std::set<std::string>& drop = {}) {
  const SafetensorsFile f = SafetensorsFile::open(in);
  NamedTensors t;
  for (const auto& e : f.entries()) {
    if (drop.count(e.name)) continue;
    auto r = replace.find(e.name);
    t.emplace_back(e.name, r == replace.end() ? f.get(e.name) : r->second);
  }
  for (const auto& [k, v] : replace)
    if (!f.contains(k)) t.emplace_back(k, v);
  write_safetensors(out, t, f.metadata());
}

Tensor json_bytes(const nlohmann::json& j) {
  const std::string s = j.dump();
  Tensor t = Tensor::zeros(DType::u8, {static_cast<int64_t>(s.size())});
  std::memcpy(t.data(), s.data(), s.size());
  return t;
}

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Int8Model, QuantizeCheckpointWritesTheRowQuantizerAndLoadsIt) {
  TempDir dir;
  const std::string out = quantize_tiny(dir, 64, "int8.safetensors");
  const SafetensorsFile in = SafetensorsFile::open(kWeights), q = SafetensorsFile::open(out);
  const std::string layer = "blocks.1.mlp.fc2";
  const Int8Rows want = int8_quantize_rows(in.get(layer + ".weight"), 64);
  EXPECT_TRUE(same_bytes(q.get(layer + ".weight"), want.q));
  EXPECT_TRUE(same_bytes(q.get(layer + ".weight_scale"), want.scale));
  const Tensor marker = q.get(layer + ".comfy_quant");
  const auto j = nlohmann::json::parse(std::string(marker.ptr<char>(), marker.numel()));
  EXPECT_EQ(j, (nlohmann::json{
                   {"format", "int8_tensorwise"}, {"convrot", true}, {"convrot_groupsize", 64}}));

  const H3Model m = load_model(out);
  const LinearWeight& fc2 = m.weights.blocks[1].mlp.fc2;
  EXPECT_EQ(fc2.format, WeightFormat::int8);
  EXPECT_EQ(fc2.int8_group, 64);
  EXPECT_TRUE(fc2.quantized());
  // Loading keeps the int8 bytes only; the dense view exists once asked for.
  EXPECT_TRUE(fc2.w.empty()) << "quantized layers carry no dense copy after loading";
  const Tensor d = int8_dequantize_weight(want.q, want.scale, 64);
  ASSERT_EQ(static_cast<int64_t>(dense_weight(fc2).size()), d.numel());
  EXPECT_EQ(std::memcmp(fc2.w.data(), d.data(), d.nbytes()), 0);
  // The dequantized weight is the original up to int8's rounding (step amax/127 per row).
  const std::vector<float> w = in.get(layer + ".weight").to_f32();
  double err = 0, ref = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    err += (fc2.w[i] - w[i]) * double(fc2.w[i] - w[i]);
    ref += double(w[i]) * w[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.02);
  EXPECT_GT(std::sqrt(err / ref), 1e-4) << "no quantization effect";
}

// apply_linear computes the layer exactly as int8_linear does (ComfyUI's W8A8), for convrot and
// for plain tensorwise int8 with one scalar weight scale, nested "params" included.
TEST(Int8Model, ApplyLinearIsTheW8A8Reference) {
  TempDir dir;
  const std::string conv = quantize_tiny(dir, 16, "g16.safetensors");
  const std::string layer = "blocks.0.attn.out_proj";  // [192, 256]
  const SafetensorsFile in = SafetensorsFile::open(kWeights);
  const Int8Rows plain = int8_quantize_rows(in.get(layer + ".weight"), 0);
  float smax = 0;
  for (float s : plain.scale.to_f32()) smax = std::max(smax, s);
  const Tensor scalar = tensor_from_f32({smax}, {});
  const std::string flat = dir.file("plain.safetensors");
  rewrite(conv, flat,
          {{layer + ".weight", plain.q},
           {layer + ".weight_scale", scalar},
           {layer + ".comfy_quant",
            json_bytes({{"format", "int8_tensorwise"}, {"params", {{"convrot", false}}}})}});
  for (const std::string& path : {conv, flat}) {
    SCOPED_TRACE(path);
    const H3Model m = load_model(path);
    const LinearWeight& lw = m.weights.blocks[0].attn.out;
    ASSERT_EQ(lw.format, WeightFormat::int8);
    EXPECT_EQ(lw.int8_group, path == conv ? 16 : 0);
    const int64_t rows = 5;
    std::vector<float> x(rows * lw.in);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (1 + i % 7);
    const Tensor xt(x.data(), DType::f32, {rows, lw.in});
    const Tensor want =
        int8_linear(int8_quantize_rows(xt, lw.int8_group), lw.data, lw.scale, nullptr);
    const FloatVec got = model::apply_linear(lw, x.data(), rows, false);
    const std::vector<float> w = want.to_f32();
    ASSERT_EQ(got.size(), w.size());
    EXPECT_EQ(std::memcmp(got.data(), w.data(), w.size() * 4), 0);
  }
}

// The tiny model with int8_convrot block linears (G = 64) against the same model with those
// layers' dequantized weights run densely (fp32 reference): the difference is the activation's
// int8 rounding alone. A plain bf16 forward's error against the fp32 forward is the FA-rule
// yardstick. Measured (2026-12-01): W8A8 video 0.0071 / audio 0.0075 rel L2; bf16 0.0061 /
// 0.0074 (1.16x / 1.02x). Asserted: W8A8 <= 2x the bf16 error and above 1e-4 (it quantized).
TEST(Int8Model, ForwardStaysNearItsDequantizedWeights) {
  TempDir dir;
  const std::string out = quantize_tiny(dir, 64, "int8.safetensors");
  const test::GoldenInputs& g = test::golden_inputs();
  H3Model dense = load_model(out);
  auto densify = [](RefinerBlockWeights& b) {
    for (LinearWeight* l : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2}) {
      dense_weight(*l);  // the dequantized values, before the layer is relabelled dense
      l->format = WeightFormat::f32;
    }
  };
  for (auto& b : dense.weights.refiner) densify(b);
  for (auto& b : dense.weights.blocks) densify(b);
  const ForwardOutputs ref = forward_cpu(dense, g.inputs(), Precision::fp32);
  const ForwardOutputs w8a8 = forward_cpu(load_model(out), g.inputs(), Precision::fp32);
  const ForwardOutputs bf16 = forward_cpu(dense, g.inputs(), Precision::bf16);
  const double ev = test::rel_l2(w8a8.video_velocity, ref.video_velocity);
  const double ea = test::rel_l2(w8a8.audio_velocity, ref.audio_velocity);
  const double bv = test::rel_l2(bf16.video_velocity, ref.video_velocity);
  const double ba = test::rel_l2(bf16.audio_velocity, ref.audio_velocity);
  std::printf("[ measured ] W8A8 rel L2 video %.4g audio %.4g; bf16 video %.4g audio %.4g\n", ev,
              ea, bv, ba);
  EXPECT_GT(ev, 1e-4);
  EXPECT_LT(ev, 2 * bv);
  EXPECT_LT(ea, 2 * ba);
}

TEST(Int8Model, MalformedLayersAreNamed) {
  TempDir dir;
  const std::string good = quantize_tiny(dir, 64, "int8.safetensors");
  const std::string L = "blocks.0.mlp.fc1";  // [768, 192]
  struct Case {
    std::map<std::string, Tensor> replace;
    std::set<std::string> drop;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{{L + ".comfy_quant", json_bytes({{"format", "int8_tensorwise"}, {"convrot", true}})}},
       {},
       "is int8_convrot with group size 256, which does not divide its 192 input features"},
      {{{L + ".comfy_quant",
         json_bytes(
             {{"format", "int8_tensorwise"}, {"convrot", true}, {"convrot_groupsize", 32}})}},
       {},
       "\"convrot_groupsize\": 32, expected a power of 4"},
      {{{L + ".comfy_quant", json_bytes({{"format", "int4_awq"}})}}, {}, "names format 'int4_awq'"},
      {{{L + ".weight_scale", Tensor::zeros(DType::f32, {192})}},
       {},
       "key 'blocks.0.mlp.fc1.weight_scale'"},
      {{{L + ".weight_scale", tensor_from_f32(std::vector<float>(768, -1.0f), {768, 1})}},
       {},
       "expected finite values > 0"},
      {{}, {L + ".weight_scale"}, "missing key 'blocks.0.mlp.fc1.weight_scale'"},
      {{{L + ".weight", Tensor::zeros(DType::u8, {768, 192})}}, {}, "expected i8"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string bad = dir.file("bad" + std::to_string(i) + ".safetensors");
    rewrite(good, bad, cases[i].replace, cases[i].drop);
    const std::string e = load_error(bad);
    EXPECT_NE(e.find(cases[i].expect), std::string::npos) << e;
    EXPECT_NE(e.find(bad), std::string::npos) << "the file is named: " << e;
    EXPECT_NE(e.find(L), std::string::npos) << "the layer is named: " << e;
  }
}

// `h3rt int8-convrot` on a golden case's w, x, bias reproduces its wq, ws, xq, xs and y, with the
// group size from the option and from the input's metadata.
TEST(Int8Model, CliInt8ConvrotReproducesTheGoldenVectors) {
  TempDir dir;
  const std::string golden =
      test::shared_dir() + "/golden/int8_convrot/m33_k1024_n40_g64.safetensors";
  const SafetensorsFile g = SafetensorsFile::open(golden);
  const std::string in = dir.file("in.safetensors");
  write_safetensors(in, {{"w", g.get("w")}, {"x", g.get("x")}, {"bias", g.get("bias")}},
                    {{"group_size", "64"}});
  for (const std::string& opt : {"", " --group-size 64"}) {
    const std::string out = dir.file("out.safetensors");
    const CliRun r = run_cli("int8-convrot --in " + in + " --out " + out + opt);
    ASSERT_EQ(r.status, 0) << r.output;
    const SafetensorsFile o = SafetensorsFile::open(out);
    for (const char* t : {"wq", "ws", "xq", "xs", "y"})
      EXPECT_TRUE(same_bytes(o.get(t), g.get(t))) << t << opt;
  }
  const CliRun r = run_cli("int8-convrot --in " + in + " --out " + dir.file("x.safetensors") +
                           " --group-size 32");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("group size 32 must be a power of 4 dividing K = 1024"),
            std::string::npos)
      << r.output;
}

TEST(Int8Model, CliQuantizeCheckpointInfoAndForward) {
  TempDir dir;
  const std::string out = dir.file("q.safetensors");
  CliRun r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + out +
                     " --format int8_convrot --group-size 64");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("12 layers -> int8_convrot, 0 kept"), std::string::npos) << r.output;
  r = run_cli("info " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("int8_convrot G=64 12;"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("block projections (qkv, out, fc1, fc2): int8_convrot G=64 x8 -> CUDA: "
                          "int8 W8A8 GEMM"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("refiner projections: int8_convrot G=64 x4"), std::string::npos)
      << r.output;
  r = run_cli("forward --checkpoint " + out + " --inputs " + kGolden + " --out " +
              dir.file("fwd.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  // The default group size 256 does not divide the tiny model's 192 input features.
  r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + dir.file("b.safetensors") +
              " --format int8_convrot");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("token_refiner.blocks.0.attn.qkv_proj"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("b.safetensors")));
}

}  // namespace
}  // namespace h3rt
