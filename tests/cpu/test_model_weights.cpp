// Checkpoint validation (missing / unexpected / mis-shaped keys in one error), the quantized
// format hook, synthetic weights and the weight-size estimate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "h3rt/formats.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("h3rt_weights_test") {}
};

std::string weights_path() {
  return test::golden_dir() + "/weights.safetensors";
}

NamedTensors all_tensors(const SafetensorsFile& f) {
  NamedTensors t;
  for (const auto& e : f.entries()) t.emplace_back(e.name, f.get(e.name));
  return t;
}

std::string load_error(const std::string& path, const LoadOptions& opt = {}) {
  try {
    load_model(path, H3Config::tiny(), opt);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelWeights, AllKeyProblemsInOneError) {
  const SafetensorsFile f = SafetensorsFile::open(weights_path());
  NamedTensors t;
  for (auto& [name, tensor] : all_tensors(f)) {
    if (name == "blocks.1.mlp.fc2.weight") continue;                                // missing
    if (name == "blocks.0.attn.out_proj.weight") tensor = tensor.slice(1, 0, 200);  // mis-shaped
    if (name == "final_layer.norm.weight") tensor = tensor.reshape({2, 96});        // mis-shaped
    t.emplace_back(name, tensor);
  }
  t.emplace_back("blocks.7.extra.weight", Tensor::zeros(DType::bf16, {4, 4}));  // unexpected
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_safetensors(path, t);
  const std::string msg = load_error(path);
  ASSERT_FALSE(msg.empty()) << "a bad checkpoint loaded";
  EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 problem(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing key 'blocks.1.mlp.fc2.weight' (expected [192, 384] bf16)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("'blocks.0.attn.out_proj.weight' in " + path +
                     " has shape [192, 200], "
                     "expected [192, 256]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("'final_layer.norm.weight' in " + path + " has shape [2, 96], expected [192]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unexpected key 'blocks.7.extra.weight' [4, 4]"), std::string::npos) << msg;
}

TEST(ModelWeights, OverrideKeysMustBeModelKeys) {
  TempDir dir;
  const std::string path = dir.file("override.safetensors");
  write_safetensors(path, {{"blocks.0.attn.qkv_proj.bias", Tensor::zeros(DType::bf16, {768})}});
  LoadOptions opt;
  opt.overrides.push_back({path, QkvLayout::fused_thirds});
  const std::string msg = load_error(weights_path(), opt);
  EXPECT_NE(msg.find("unexpected key 'blocks.0.attn.qkv_proj.bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("override.safetensors"), std::string::npos) << msg;
}

TEST(ModelWeights, QuantizedLayerProblemsAreListedTogether) {
  const SafetensorsFile f = SafetensorsFile::open(weights_path());
  NamedTensors t;
  for (auto& [name, tensor] : all_tensors(f)) {
    if (name == "blocks.0.mlp.fc2.weight") {  // fp8_scaled with a mis-shaped weight_scale
      t.emplace_back(name, tensor_from_f32(tensor.to_f32(), tensor.shape(), DType::e4m3));
      t.emplace_back("blocks.0.mlp.fc2.weight_scale", tensor_from_f32({1.0f, 1.0f}, {2}));
      continue;
    }
    if (name == "blocks.1.attn.out_proj.weight") {  // nvfp4 marker, bf16 weight, no scales
      Tensor marker = Tensor::zeros(DType::u8, {2});
      marker.ptr<char>()[0] = '{';
      marker.ptr<char>()[1] = '}';
      t.emplace_back("blocks.1.attn.out_proj.comfy_quant", marker);
    }
    if (name == "blocks.1.mlp.fc1.weight")  // a marker naming a format we do not load
      t.emplace_back("blocks.1.mlp.fc1.comfy_quant", comfy_quant_marker("int4_awq"));
    t.emplace_back(name, tensor);
  }
  TempDir dir;
  const std::string path = dir.file("quant.safetensors");
  write_safetensors(path, t);
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("key 'blocks.0.mlp.fc2.weight_scale' in " + path +
                     " is f32 [2], expected [] or [1] f32 (fp8_scaled layer 'blocks.0.mlp.fc2')"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("quantization marker of layer 'blocks.1.attn.out_proj' in " + path),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("holds '{}', expected a JSON object with a string \"format\""),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("names format 'int4_awq'; supported: nvfp4, float8_e4m3fn, int8_tensorwise"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("3 problem(s)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("unexpected"), std::string::npos) << "aux tensors belong to their layer\n"
                                                       << msg;
}

TEST(ModelWeights, AuxTensorsOfUnquantizedLayersAreUnexpected) {
  const SafetensorsFile f = SafetensorsFile::open(weights_path());
  NamedTensors t = all_tensors(f);
  t.emplace_back("blocks.0.mlp.fc1.weight_scale", tensor_from_f32({1.0f}, {}));
  t.emplace_back("final_layer.norm.comfy_quant", comfy_quant_marker("nvfp4"));
  TempDir dir;
  const std::string path = dir.file("stray.safetensors");
  write_safetensors(path, t);
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("unexpected key 'blocks.0.mlp.fc1.weight_scale' []"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unexpected key 'final_layer.norm.comfy_quant'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 problem(s)"), std::string::npos) << msg;
}

TEST(ModelWeights, UnknownQkvLayoutMetadataIsRejected) {
  const SafetensorsFile f = SafetensorsFile::open(weights_path());
  TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  write_safetensors(path, all_tensors(f), {{"qkv_layout", "sideways"}});
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("unknown __metadata__ qkv_layout 'sideways'"), std::string::npos) << msg;
}

TEST(ModelWeights, SizeEstimateCountsTheCheckpoint) {
  const SafetensorsFile f = SafetensorsFile::open(weights_path());
  int64_t params = 0, bytes = 0;
  for (const auto& e : f.entries()) {
    params += shape_numel(e.shape);
    bytes += e.end - e.begin;
  }
  const WeightBytes est = estimate_weight_bytes(H3Config::tiny());
  EXPECT_EQ(est.params, params);
  EXPECT_EQ(est.stored_bytes, bytes);
  EXPECT_EQ(est.cpu_bytes, bytes + 4 * params);
  // The release is a 33B-parameter model (README / guide): 32-34e9 parameters.
  const WeightBytes h3 = estimate_weight_bytes(H3Config::h3());
  EXPECT_GT(h3.params, 32'000'000'000);
  EXPECT_LT(h3.params, 34'000'000'000);
}

TEST(ModelWeights, SyntheticIsDeterministicAndRuns) {
  const H3Config c = H3Config::tiny();
  const H3Model a = make_synthetic_model(c, 7), b = make_synthetic_model(c, 7);
  const H3Model other = make_synthetic_model(c, 8);
  const auto& wa = a.weights.blocks[1].mlp.fc1.w;
  EXPECT_EQ(wa, b.weights.blocks[1].mlp.fc1.w);
  EXPECT_NE(wa, other.weights.blocks[1].mlp.fc1.w);
  for (float v : wa) ASSERT_EQ(v, round_bf16(v)) << "bf16-stored weights hold bf16 values";
  EXPECT_EQ(a.weights.blocks[1].mlp.fc1.format, WeightFormat::bf16);
  EXPECT_EQ(a.weights.video_in.format, WeightFormat::f32);
  const float bound = 1.0f / std::sqrt(static_cast<float>(c.hidden));
  for (float v : wa) ASSERT_LE(std::abs(v), bound * 1.01f);

  // A small packed sequence: 3 text, 2x2 audio, one frame of 2x2 patches.
  SequenceLayout l;
  l.text_indices = {0, 1, 2};
  l.audio_indices = {3, 4, 5, 6};
  l.video_indices = {7, 8, 9, 10};
  l.token_tags = {1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0};
  for (int r = 0; r < 11; ++r)
    l.position_ids.insert(l.position_ids.end(), {double(r), 0.5 * r, -1.0 * r});
  TimestepPlan plan{{0.25f, 0.5f}, {0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0}};
  std::vector<float> video(4 * 96), audio(4 * 32), text(3 * c.text_dim);
  for (size_t i = 0; i < video.size(); ++i) video[i] = std::sin(0.1f * i);
  for (size_t i = 0; i < audio.size(); ++i) audio[i] = std::cos(0.2f * i);
  for (size_t i = 0; i < text.size(); ++i) text[i] = round_bf16(std::sin(0.3f * i));
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    const ForwardOutputs o = forward_cpu(a, {l, plan, video.data(), audio.data(), text.data()}, p);
    ASSERT_EQ(o.video_velocity.size(), video.size());
    ASSERT_EQ(o.audio_velocity.size(), audio.size());
    double norm = 0;
    for (float v : o.video_velocity) {
      ASSERT_TRUE(std::isfinite(v));
      norm += v * v;
    }
    EXPECT_GT(norm, 0.0);
  }
}

}  // namespace
}  // namespace h3rt

namespace h3rt {
namespace {

// Config inference on shapes the fuzz target found crashing (regressions): a video projection
// with no input features divided by zero, a block index beyond int64 escaped as
// std::out_of_range; both are now errors naming the file.
TEST(ModelWeights, InferenceRejectsDegenerateShapesAndIndices) {
  const SafetensorsFile f = SafetensorsFile::open(weights_path());
  TempDir dir;
  auto modified = [&](const std::string& key, const Tensor& t) {
    NamedTensors all = all_tensors(f);
    bool replaced = false;
    for (auto& [name, tensor] : all)
      if (name == key) tensor = t, replaced = true;
    if (!replaced) all.emplace_back(key, t);
    const std::string path = dir.file("m.safetensors");
    write_safetensors(path, all);
    try {
      load_model(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string msg = modified("video_patch_proj.weight", Tensor::zeros(DType::f32, {192, 0}));
  EXPECT_NE(msg.find("video_patch_proj has 0 input features, expected 4 x latent channels"),
            std::string::npos)
      << msg;
  msg = modified("blocks.123456789012345678901234.norm1.weight", Tensor::zeros(DType::bf16, {192}));
  EXPECT_NE(msg.find("unexpected key 'blocks.123456789012345678901234.norm1.weight'"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace h3rt
