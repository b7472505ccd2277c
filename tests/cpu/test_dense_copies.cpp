// LoadOptions::dense_float_copies = false (what the CUDA backend loads with): float layers carry
// no f32 copy after loading, a finite check or a LoRA merge, and every value computed from them
// is the one a model loaded with dense copies computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "golden_inputs.h"
#include "h3rt/formats.h"
#include "h3rt/lora.h"
#include "h3rt/model.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

std::string weights_path() {
  return test::golden_dir() + "/weights.safetensors";
}

H3Model load(const std::string& path, bool dense) {
  LoadOptions o;
  o.dense_float_copies = dense;
  return load_model(path, H3Config::tiny(), o);
}

bool float_layer(const LinearWeight& l) {
  return !l.quantized() && l.out * l.in > 0;
}

TEST(DenseCopies, FloatLayersLoadWithoutF32AndComputeTheSame) {
  H3Model lazy = load(weights_path(), false);
  H3Model dense = load(weights_path(), true);
  const auto lazy_layers = linear_layers(lazy.weights);
  auto dense_layers = linear_layers(dense.weights);
  int checked = 0;
  for (const auto& [name, l] : lazy_layers) {
    if (!float_layer(*l)) continue;
    EXPECT_TRUE(l->w.empty()) << name << " has an f32 copy after loading";
    const FloatVec& want = dense_layers.at(name)->w;
    ASSERT_FALSE(want.empty()) << name;
    EXPECT_EQ(dense_weight(*l), want) << name;  // on demand: the same values
    FloatVec().swap(l->w);
    ++checked;
  }
  EXPECT_GT(checked, 20);
  const test::GoldenInputs& g = test::golden_inputs();
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    const ForwardOutputs a = forward_cpu(lazy, g.inputs(), p);
    const ForwardOutputs b = forward_cpu(dense, g.inputs(), p);
    EXPECT_EQ(a.video_velocity, b.video_velocity);
    EXPECT_EQ(a.audio_velocity, b.audio_velocity);
  }
}

TEST(DenseCopies, FiniteCheckReadsStoredValuesAndKeepsNoCopy) {
  const SafetensorsFile f = SafetensorsFile::open(weights_path());
  NamedTensors t;
  for (const auto& e : f.entries()) {
    Tensor v = f.get(e.name);
    if (e.name == "blocks.1.mlp.fc2.weight") {
      v = v.contiguous_copy();
      const uint16_t nan = 0x7fc0;  // bf16 quiet NaN
      std::memcpy(v.ptr<uint16_t>() + 3 * v.size(1) + 5, &nan, 2);
    }
    t.emplace_back(e.name, v);
  }
  test::TempDir dir("h3rt_dense_copies_test");
  const std::string path = dir.file("nan.safetensors");
  write_safetensors(path, t);
  H3Model m = load(path, false);
  try {
    check_weights_finite(m);
    FAIL() << "a NaN in a bf16 weight loaded without dense copies passed the check";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blocks.1.mlp.fc2.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NaN at [3, 5]"), std::string::npos) << msg;
  }
  for (const auto& [name, l] : linear_layers(m.weights))
    if (float_layer(*l)) EXPECT_TRUE(l->w.empty()) << name << " kept a copy from the check";
}

TEST(DenseCopies, LoraMergeKeepsNoCopyAndMergesTheSameValues) {
  const Lora lora = make_synthetic_lora(H3Config::tiny(), 4, 40, 3);
  H3Model lazy = load(weights_path(), false);
  H3Model dense = load(weights_path(), true);
  LoraMerge a = merge_loras(lazy, {lora});
  const LoraMerge b = merge_loras(dense, {lora});
  ASSERT_EQ(a.report.layers, b.report.layers);
  ASSERT_GT(a.report.layers, 0);
  auto dense_layers = linear_layers(dense.weights);
  for (const auto& [name, l] : linear_layers(lazy.weights)) {
    if (!float_layer(*l)) continue;
    EXPECT_TRUE(l->w.empty()) << name << " has an f32 copy after the merge";
    EXPECT_EQ(dense_weight(*l), dense_layers.at(name)->w) << name;
    FloatVec().swap(l->w);
  }
  for (const LinearWeight& saved : a.saved)
    if (float_layer(saved)) EXPECT_TRUE(saved.w.empty()) << saved.name << " (saved original)";
  unmerge_loras(lazy, a);
  const H3Model fresh = load(weights_path(), true);
  const auto fresh_layers = linear_layers(const_cast<H3Weights&>(fresh.weights));
  for (const auto& [name, l] : linear_layers(lazy.weights))
    if (float_layer(*l)) EXPECT_EQ(dense_weight(*l), fresh_layers.at(name)->w) << name;
}

}  // namespace
}  // namespace h3rt

namespace h3rt {
namespace {

// `h3rt bench load`: the CUDA backend's load holds no f32 copies (the cpu one holds twice the
// bf16 bytes of the float layers in f32), and every field is reported.
TEST(DenseCopies, BenchLoadShowsTheHostMemoryEachBackendTakes) {
  const std::string w = test::golden_dir() + "/weights.safetensors";
  nlohmann::json r[2];
  const char* backends[] = {"cpu", "cuda"};
  for (int i = 0; i < 2; ++i) {
    const test::CliRun run =
        test::run_cli(std::string("bench load ") + w + " --backend " + backends[i], false);
    ASSERT_EQ(run.status, 0) << run.output;
    r[i] = nlohmann::json::parse(run.output.substr(run.output.find('{')));
    EXPECT_EQ(r[i].at("backend"), backends[i]);
    for (const char* k : {"peak_rss_bytes", "file_bytes"})
      EXPECT_GT(r[i].at(k).get<double>(), 0.0) << k;
    for (const char* k : {"load_s", "read_s"})  // timings: reported, not judged here
      EXPECT_TRUE(r[i].at(k).is_number()) << k;
  }
  EXPECT_EQ(r[0].at("read_checksum"), r[1].at("read_checksum"));
  const int64_t file = r[0].at("file_bytes");
  EXPECT_GT(r[0].at("peak_heap_bytes").get<int64_t>(),
            r[1].at("peak_heap_bytes").get<int64_t>() + file)
      << r[0].dump() << r[1].dump();
  // --gather: the file source's copy over every stored byte, from disk (cuda) and warm.
  for (const char* backend : backends) {
    const test::CliRun run =
        test::run_cli(std::string("bench load --gather ") + w + " --backend " + backend, false);
    ASSERT_EQ(run.status, 0) << run.output;
    const nlohmann::json g = nlohmann::json::parse(run.output.substr(run.output.find('{')));
    EXPECT_GT(g.at("gather_bytes").get<int64_t>(), file / 2) << g.dump();
    EXPECT_LE(g.at("gather_bytes").get<int64_t>(), file) << g.dump();
    EXPECT_TRUE(g.at("gather_warm_gbps").is_number()) << g.dump();
    EXPECT_EQ(g.at("gather_cold_gbps").is_null(), std::string(backend) == "cpu") << g.dump();
  }
  const test::CliRun bad = test::run_cli("bench load " + w + " --backend gpu");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--backend"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace h3rt
