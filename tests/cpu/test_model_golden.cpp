// The CPU reference forward against the tiny golden set (../shared/golden/h3_tiny): fp32 vs the
// float64 reference and the fp32 intermediates, bf16 vs float64 within twice the reference's
// own bf16 error (from manifest.json), and the raw per-head qkv layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "golden_inputs.h"
#include "h3rt/formats.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

using Golden = test::GoldenInputs;
const Golden& golden() {
  return test::golden_inputs();
}

const H3Model& golden_model() {
  static const H3Model m = load_model(test::golden_dir() + "/weights.safetensors");
  return m;
}

nlohmann::json manifest() {
  std::ifstream f(test::golden_dir() + "/manifest.json");
  return nlohmann::json::parse(f);
}

struct Err {
  double max_abs = 0, mean_abs = 0, ref_max = 0;
  double rel() const { return max_abs / ref_max; }
};

template <typename A>
Err compare(const A& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  Err e;
  const size_t n = std::min(got.size(), ref.size());
  for (size_t i = 0; i < n; ++i) {
    const double d = std::abs(double(got[i]) - ref[i]);
    e.max_abs = std::max(e.max_abs, d);
    e.mean_abs += d;
    e.ref_max = std::max(e.ref_max, std::abs(ref[i]));
  }
  e.mean_abs /= std::max<size_t>(n, 1);
  return e;
}

using Captured = std::map<std::string, std::vector<float>>;

ForwardOutputs run(const H3Model& m, Precision p, Captured* cap = nullptr) {
  const Probe probe = [cap](const std::string& name, const float* d, const Shape& s) {
    cap->emplace(name, std::vector<float>(d, d + shape_numel(s)));
  };
  return forward_cpu(m, golden().inputs(), p, cap ? &probe : nullptr);
}

TEST(GoldenModel, ConfigInferredFromCheckpoint) {
  const H3Config& c = golden_model().config;
  const nlohmann::json mc = manifest()["config"];
  EXPECT_EQ(c.hidden, mc["hidden_size"]);
  EXPECT_EQ(c.heads, mc["num_attention_heads"]);
  EXPECT_EQ(c.head_dim, mc["attention_head_dim"]);
  EXPECT_EQ(c.layers, mc["num_layers"]);
  EXPECT_EQ(c.refiner_layers, mc["num_refiner_layers"]);
  EXPECT_EQ(c.ffn, mc["ffn_dim"]);
  EXPECT_EQ(c.text_dim, mc["text_dim"]);
  EXPECT_EQ(c.in_channels, mc["in_channels"]);
  EXPECT_EQ(c.audio_channels, mc["audio_in_channels"]);
  EXPECT_EQ(c.freq_dim, mc["freq_dim"]);
  EXPECT_EQ(c.time_embed_hidden, mc["time_embed_hidden_dim"]);
  EXPECT_EQ(c.time_embed_dim, mc["time_embed_dim"]);
  EXPECT_EQ(c.rope_freqs, mc["rope_freq_dim"]);
  // The tiny preset is the golden configuration.
  const H3Config t = H3Config::tiny();
  EXPECT_EQ(t.hidden, c.hidden);
  EXPECT_EQ(t.heads, c.heads);
  EXPECT_EQ(t.layers, c.layers);
  EXPECT_EQ(t.ffn, c.ffn);
  EXPECT_EQ(t.text_dim, c.text_dim);
  EXPECT_EQ(t.time_embed_dim, c.time_embed_dim);
}

TEST(GoldenModel, Fp32MatchesFloat64Reference) {
  Captured cap;
  const ForwardOutputs out = run(golden_model(), Precision::fp32, &cap);
  const Golden& g = golden();
  for (auto [name, got] : {std::pair{"video_velocity", &out.video_velocity},
                           std::pair{"audio_velocity", &out.audio_velocity}}) {
    const Err e = compare(*got, g.f64(std::string("fwd_f64/") + name));
    EXPECT_LE(e.rel(), 1e-5) << name << " max abs " << e.max_abs;
    std::printf("fp32 %s vs f64: max abs %.3g (rel %.3g), mean abs %.3g\n", name, e.max_abs,
                e.rel(), e.mean_abs);
  }
  const Err b0 = compare(cap.at("block0_out"), g.f64("fwd_f64/block0_out"));
  EXPECT_LE(b0.rel(), 1e-5) << "block0_out max abs " << b0.max_abs;
}

TEST(GoldenModel, Fp32IntermediatesMatchFp32Golden) {
  Captured cap;
  run(golden_model(), Precision::fp32, &cap);
  const Golden& g = golden();
  // RoPE tables: float32 angles and cosf/sinf, so at most about one ulp (README section 9).
  for (const char* name : {"rope_cos", "rope_sin"}) {
    const Err e = compare(cap.at(name), g.f64(std::string("fwd_f32/") + name));
    EXPECT_LE(e.max_abs, 1.2e-7) << name;
  }
  EXPECT_EQ(compare(cap.at("adaln_indices"), g.f64("fwd/adaln_indices")).max_abs, 0.0);
  for (const char* name :
       {"time_sinusoid", "temb",          "video_embeds",  "audio_embeds",     "text_proj",
        "text_refined",  "packed_input",  "block0/adaln",  "block0/norm1_out", "block0/q_norm",
        "block0/k_norm", "block0/q_rope", "block0/k_rope", "block0/attn_out",  "block0/norm2_out",
        "block0/ff_out", "block0_out",    "block1_out",    "final_norm_out",   "video_velocity",
        "audio_velocity"}) {
    if (!cap.count(name)) {
      // The velocities are outputs, not probes.
      ASSERT_TRUE(std::string(name).find("velocity") != std::string::npos) << name;
      continue;
    }
    const Err e = compare(cap.at(name), g.f64(std::string("fwd_f32/") + name));
    EXPECT_LE(e.rel(), 1e-5) << name << " max abs " << e.max_abs << " of " << e.ref_max;
  }
}

TEST(GoldenModel, RopeInvFreqFormulaEqualsCheckpoint) {
  const FloatVec& inv = golden_model().weights.rope_inv_freq;
  const H3Model synth = make_synthetic_model(H3Config::tiny(), 1);  // uses the formula
  ASSERT_EQ(inv.size(), synth.weights.rope_inv_freq.size());
  for (size_t i = 0; i < inv.size(); ++i) EXPECT_EQ(inv[i], synth.weights.rope_inv_freq[i]) << i;
}

// bf16 error bound: twice the reference's own bf16 error vs float64 (manifest stats).
TEST(GoldenModel, Bf16WithinTwiceReferenceBf16Error) {
  const nlohmann::json ref = manifest()["stats"]["diffusers_bf16_device_vs_f64"];
  Captured cap;
  const ForwardOutputs out = run(golden_model(), Precision::bf16, &cap);
  const Golden& g = golden();
  for (auto [name, key, got] : {std::tuple{"video_velocity", "video", &out.video_velocity},
                                std::tuple{"audio_velocity", "audio", &out.audio_velocity}}) {
    const Err e = compare(*got, g.f64(std::string("fwd_f64/") + name));
    const double max_bound = 2.0 * ref[key]["max_abs"].get<double>();
    const double mean_bound = 2.0 * ref[key]["mean_abs"].get<double>();
    std::printf("bf16 %s vs f64: max abs %.4g (bound %.4g), mean abs %.4g (bound %.4g)\n", name,
                e.max_abs, max_bound, e.mean_abs, mean_bound);
    EXPECT_LE(e.max_abs, max_bound) << name;
    EXPECT_LE(e.mean_abs, mean_bound) << name;
  }
  // The float32 islands are computed as in fp32 mode.
  for (const char* name : {"time_sinusoid", "temb", "video_embeds", "audio_embeds"}) {
    const Err e = compare(cap.at(name), g.f64(std::string("fwd_bf16/") + name));
    EXPECT_LE(e.rel(), 1e-5) << name;
  }
  // The bf16 stream tracks the reference's own bf16 run: a different GEMM/attention order flips
  // a few roundings (by one bf16 ulp), so the mean difference stays near 5e-4 of the tensor's
  // range (measured); 1e-3 catches a missing or extra rounding point or a wrong formula.
  for (const char* name :
       {"text_proj", "text_refined", "packed_input", "block0/adaln", "block0/norm1_out",
        "block0/q_norm", "block0/k_norm", "block0/attn_out", "block0/norm2_out", "block0/ff_out",
        "block0_out", "block1_out", "final_norm_out"}) {
    const Err e = compare(cap.at(name), g.f64(std::string("fwd_bf16/") + name));
    EXPECT_LE(e.mean_abs, 1e-3 * e.ref_max) << name << " vs fwd_bf16";
  }
  // Every bf16-stream intermediate holds bf16 values.
  for (const char* name :
       {"packed_input", "block0/norm1_out", "block0/attn_out", "block0_out", "final_norm_out"})
    for (float v : cap.at(name)) ASSERT_EQ(v, round_bf16(v)) << name;
}

std::filesystem::path temp_dir(const std::string& tag) {
  auto d =
      std::filesystem::temp_directory_path() / ("h3rt_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

std::vector<const LinearWeight*> qkv_layers(const H3Model& m) {
  std::vector<const LinearWeight*> v;
  for (const auto& b : m.weights.refiner) v.push_back(&b.attn.qkv);
  for (const auto& b : m.weights.blocks) v.push_back(&b.attn.qkv);
  return v;
}

void expect_same_qkv(const H3Model& a, const H3Model& b) {
  const auto qa = qkv_layers(a), qb = qkv_layers(b);
  ASSERT_EQ(qa.size(), qb.size());
  for (size_t i = 0; i < qa.size(); ++i) {
    ASSERT_EQ(qa[i]->w.size(), qb[i]->w.size());
    EXPECT_EQ(std::memcmp(qa[i]->w.data(), qb[i]->w.data(), qa[i]->w.size() * 4), 0) << qa[i]->name;
    const Tensor da = qa[i]->data.contiguous_copy(), db = qb[i]->data.contiguous_copy();
    EXPECT_EQ(da.dtype(), db.dtype());
    EXPECT_EQ(std::memcmp(da.data(), db.data(), da.nbytes()), 0) << qa[i]->name << " (stored)";
  }
}

TEST(GoldenModel, StockPerHeadQkvLoadsToTheSameWeights) {
  const std::string dir = test::golden_dir();
  LoadOptions opt;
  opt.overrides.push_back(
      {dir + "/weights_stock_qkv.safetensors", QkvLayout::per_head_interleaved});
  const H3Model stock = load_model(dir + "/weights.safetensors", opt);
  expect_same_qkv(golden_model(), stock);

  // The layout named in the file's metadata is honoured by autodetect.
  const auto tmp = temp_dir("stockqkv");
  const SafetensorsFile f = SafetensorsFile::open(dir + "/weights_stock_qkv.safetensors");
  NamedTensors all;
  for (const auto& e : f.entries()) all.emplace_back(e.name, f.get(e.name));
  const std::string tagged = (tmp / "stock_tagged.safetensors").string();
  write_safetensors(tagged, all, {{"qkv_layout", "per_head_interleaved"}});
  LoadOptions auto_opt;
  auto_opt.overrides.push_back({tagged, QkvLayout::autodetect});
  expect_same_qkv(golden_model(), load_model(dir + "/weights.safetensors", auto_opt));
  std::filesystem::remove_all(tmp);
}

// Reading the per-head file as fused thirds gives the same shapes and wrong numbers; the
// forward must show it (README section 9: about 2 in the velocities).
TEST(GoldenModel, StockQkvMisreadAsFusedChangesOutput) {
  const std::string dir = test::golden_dir();
  LoadOptions opt;
  opt.overrides.push_back({dir + "/weights_stock_qkv.safetensors", QkvLayout::fused_thirds});
  const H3Model wrong = load_model(dir + "/weights.safetensors", opt);
  const ForwardOutputs out = run(wrong, Precision::fp32);
  const Err e = compare(out.video_velocity, golden().f64("fwd_f64/video_velocity"));
  EXPECT_GT(e.max_abs, 0.5);
}

}  // namespace
}  // namespace h3rt
