// Quantized checkpoints on the CPU reference: quantize-checkpoint round trips (nvfp4, fp8_scaled)
// against the packer bit for bit, the tiny model's forward with quantized weights against its
// bf16-weight forward, ComfyUI's _quantization_metadata markers, aux-tensor validation, the
// activation paths of apply_linear, and the CLI verb end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "golden_inputs.h"
#include "h3rt/formats.h"
#include "h3rt/model.h"
#include "h3rt/nvfp4.h"
#include "h3rt/quantize.h"
#include "h3rt/safetensors.h"
#include "model/forward_internal.h"
#include "ops/linear/linear.h"
#include "test_util.h"

namespace h3rt {
namespace {

using test::CliRun;
using test::run_cli;

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("h3rt_quant_test") {}
};

namespace fs = std::filesystem;

const std::string kWeights = test::golden_dir() + "/weights.safetensors";
const std::string kGolden = test::golden_dir() + "/golden.safetensors";

// The 12 quantizable layers of the tiny model (1 refiner block + 2 blocks, 4 linears each).
std::vector<std::string> big_linears() {
  std::vector<std::string> out;
  for (const std::string p : {"token_refiner.blocks.0.", "blocks.0.", "blocks.1."})
    for (const char* s : {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"})
      out.push_back(p + s);
  return out;
}

const LinearWeight& find_linear(const H3Weights& w, const std::string& layer) {
  auto core = [&](const RefinerBlockWeights& b, const std::string& rest) -> const LinearWeight& {
    if (rest == "attn.qkv_proj") return b.attn.qkv;
    if (rest == "attn.out_proj") return b.attn.out;
    if (rest == "mlp.fc1") return b.mlp.fc1;
    return b.mlp.fc2;
  };
  const std::string r = "token_refiner.blocks.0.";
  if (layer.rfind(r, 0) == 0) return core(w.refiner[0], layer.substr(r.size()));
  const int64_t i = layer[7] - '0';  // "blocks.<i>."
  return core(w.blocks[i], layer.substr(9));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous_copy(), y = b.contiguous_copy();
  return std::memcmp(x.data(), y.data(), static_cast<size_t>(x.nbytes())) == 0;
}

bool same_bits(const FloatVec& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The golden weights with a little __metadata__ (to check that it is preserved), quantized.
struct Quantized {
  TempDir dir;
  std::string input = dir.file("bf16.safetensors");
  std::string output;
  std::map<std::string, std::string> metadata = {{"qkv_layout", "fused_thirds"},
                                                 {"producer", "h3rt test"}};
  Quantized(WeightFormat format, const std::string& name) : output(dir.file(name)) {
    const SafetensorsFile f = SafetensorsFile::open(kWeights);
    NamedTensors t;
    for (const auto& e : f.entries()) t.emplace_back(e.name, f.get(e.name));
    write_safetensors(input, t, metadata);
    QuantizeCheckpointOptions o;
    o.format = format;
    const QuantizeCheckpointReport r = quantize_checkpoint(input, output, o);
    EXPECT_EQ(r.quantized, 12);
    EXPECT_EQ(r.kept, 0);
  }
};

// Every tensor of `in` but the replaced ".weight"s is in `out` byte for byte; metadata equal.
void expect_rest_unchanged(const std::string& in, const std::string& out,
                           const std::set<std::string>& replaced) {
  const SafetensorsFile a = SafetensorsFile::open(in), b = SafetensorsFile::open(out);
  EXPECT_EQ(a.metadata(), b.metadata());
  int copied = 0;
  for (const auto& e : a.entries()) {
    if (replaced.count(e.name)) continue;
    ASSERT_TRUE(b.contains(e.name)) << e.name;
    EXPECT_TRUE(same_bytes(a.get(e.name), b.get(e.name))) << e.name;
    ++copied;
  }
  EXPECT_EQ(copied, static_cast<int>(a.entries().size() - replaced.size()));
}

std::set<std::string> weight_keys() {
  std::set<std::string> s;
  for (const auto& l : big_linears()) s.insert(l + ".weight");
  return s;
}

TEST(QuantizedModel, Nvfp4CheckpointDequantizesToThePackerBitExactly) {
  Quantized q(WeightFormat::nvfp4, "nvfp4.safetensors");
  expect_rest_unchanged(q.input, q.output, weight_keys());
  const SafetensorsFile orig = SafetensorsFile::open(kWeights);
  const SafetensorsFile file = SafetensorsFile::open(q.output);
  const H3Model m = load_model(q.output);
  const H3Model ref = load_model(kWeights);
  for (const auto& layer : big_linears()) {
    SCOPED_TRACE(layer);
    const Tensor w = orig.get(layer + ".weight");
    const float g = nvfp4_global_scale(w, Nvfp4ScaleRule::kF32Divide);
    const Nvfp4Tensor p = nvfp4_quantize(w, g);
    const Tensor d = nvfp4_dequantize(p.qdata, p.scales, g);
    const LinearWeight& lw = find_linear(m.weights, layer);
    EXPECT_EQ(lw.format, WeightFormat::nvfp4);
    EXPECT_EQ(lw.out, w.size(0));
    EXPECT_EQ(lw.in, w.size(1));
    EXPECT_TRUE(lw.w.empty()) << "quantized layers carry no dense copy after loading";
    EXPECT_TRUE(same_bits(dense_weight(lw), d.to_f32()));
    EXPECT_TRUE(same_bytes(lw.data, p.qdata));
    EXPECT_EQ(file.get(layer + ".weight_scale").dtype(), DType::e4m3);
    EXPECT_EQ(std::memcmp(lw.scale.data(), p.scales.data(), p.scales.nbytes()), 0);
    EXPECT_EQ(lw.scale_2.to_f32(), std::vector<float>{g});
    EXPECT_EQ(lw.scale_2.dim(), 0);
    EXPECT_EQ(lw.input_scale.data(), nullptr);
    // Quantization happened: the values moved.
    EXPECT_NE(dense_weight(lw), find_linear(ref.weights, layer).w);
  }
  EXPECT_EQ(m.weights.blocks[1].adaln.format, WeightFormat::bf16);
  EXPECT_EQ(m.weights.blocks[1].adaln.w, ref.weights.blocks[1].adaln.w);
  EXPECT_EQ(m.weights.video_out.w, ref.weights.video_out.w);
}

TEST(QuantizedModel, Fp8CheckpointDequantizesBitExactly) {
  Quantized q(WeightFormat::fp8_scaled, "fp8.safetensors");
  expect_rest_unchanged(q.input, q.output, weight_keys());
  const SafetensorsFile orig = SafetensorsFile::open(kWeights);
  const H3Model m = load_model(q.output);
  for (const auto& layer : big_linears()) {
    SCOPED_TRACE(layer);
    const std::vector<float> w = orig.get(layer + ".weight").to_f32();
    float amax = 0;
    for (float v : w) amax = std::max(amax, std::fabs(v));
    const float s = amax / 448.0f;
    std::vector<float> d(w.size());
    for (size_t i = 0; i < w.size(); ++i) d[i] = e4m3_to_f32(f32_to_e4m3_satfinite(w[i] / s)) * s;
    const LinearWeight& lw = find_linear(m.weights, layer);
    EXPECT_EQ(lw.format, WeightFormat::fp8_scaled);
    EXPECT_EQ(lw.data.dtype(), DType::e4m3);
    EXPECT_EQ(lw.scale.to_f32(), std::vector<float>{s});
    EXPECT_TRUE(lw.w.empty()) << "quantized layers carry no dense copy after loading";
    EXPECT_TRUE(same_bits(dense_weight(lw), d));
    EXPECT_NE(std::vector<float>(lw.w.begin(), lw.w.end()), w);
  }
}

// ---- forward with quantized weights ------------------------------------------------------

// sqrt(sum (a - b)^2 / sum b^2), asserting every value of `a` is finite.
double rel_l2(const FloatVec& a, const FloatVec& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_TRUE(std::isfinite(a[i])) << i;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct VelocityError {
  double video = 0, audio = 0;
};

VelocityError forward_error(const std::string& quantized, Precision p) {
  const test::GoldenInputs& g = test::golden_inputs();
  const ForwardOutputs ref = forward_cpu(load_model(kWeights), g.inputs(), Precision::fp32);
  const ForwardOutputs got = forward_cpu(load_model(quantized), g.inputs(), p);
  VelocityError e{rel_l2(got.video_velocity, ref.video_velocity),
                  rel_l2(got.audio_velocity, ref.audio_velocity)};
  std::printf(
      "[ measured ] %s precision %s: velocity rel L2 vs bf16-weight fp32 forward: video "
      "%.4g, audio %.4g\n",
      fs::path(quantized).filename().c_str(), precision_name(p), e.video, e.audio);
  return e;
}

// NVFP4 W4A4. e2m1 keeps one mantissa bit under a 16-wide e4m3 block scale: the relative step is
// ~2^-3 of the block amax, and on the tiny weights dequant(quant(W)) has a relative RMS error of
// 0.095 (measured, every big linear). One W4A4 product adds two such independent errors
// (sqrt(2) * 0.095 = 0.13); the unquantized residual paths keep the velocity error at that level:
// measured relative L2 0.116 video / 0.130 audio (fp32), 0.117 / 0.133 (bf16). The bound 2^-2 is
// a ~1.9x margin; a misplaced scale or code gives errors of order 1.
TEST(QuantizedModel, Nvfp4ForwardStaysNearTheBf16Forward) {
  Quantized q(WeightFormat::nvfp4, "nvfp4.safetensors");
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(precision_name(p));
    const VelocityError e = forward_error(q.output, p);
    EXPECT_GT(e.video, 0.01) << "no quantization effect: were the weights/activations quantized?";
    EXPECT_GT(e.audio, 0.01);
    EXPECT_LT(e.video, 0.25);
    EXPECT_LT(e.audio, 0.25);
  }
}

// fp8_scaled without input_scale quantizes the weights only: e4m3 keeps 3 mantissa bits, a
// relative RMS error near 2^-5.2 = 0.027 per tensor (measured 0.0266 on the tiny weights).
// Measured velocity relative L2 (fp32): 0.0245 video, 0.0259 audio; the bound 0.05 is a ~1.9x
// margin and fails on any error beyond fp8's own rounding.
TEST(QuantizedModel, Fp8ForwardStaysNearTheBf16Forward) {
  Quantized q(WeightFormat::fp8_scaled, "fp8.safetensors");
  const VelocityError e = forward_error(q.output, Precision::fp32);
  EXPECT_GT(e.video, 0.002) << "no quantization effect";
  EXPECT_GT(e.audio, 0.002);
  EXPECT_LT(e.video, 0.05);
  EXPECT_LT(e.audio, 0.05);
}

// ---- _quantization_metadata --------------------------------------------------------------
// The nvfp4 file rewritten without comfy_quant tensors, its layers named in __metadata__.
std::string metadata_variant(const Quantized& q, const std::string& name, bool layers_key) {
  const SafetensorsFile f = SafetensorsFile::open(q.output);
  NamedTensors t;
  nlohmann::json layers = nlohmann::json::object();
  for (const auto& e : f.entries()) {
    const std::string suffix = ".comfy_quant";
    if (e.name.ends_with(suffix)) {
      layers[e.name.substr(0, e.name.size() - suffix.size())] = {{"format", "nvfp4"}};
      continue;
    }
    t.emplace_back(e.name, f.get(e.name));
  }
  EXPECT_EQ(layers.size(), 12u);
  nlohmann::json meta =
      layers_key ? nlohmann::json{{"format_version", "1.0"}, {"layers", layers}} : layers;
  std::map<std::string, std::string> md = f.metadata();
  md["_quantization_metadata"] = meta.dump();
  const std::string path = q.dir.file(name);
  write_safetensors(path, t, md);
  return path;
}

TEST(QuantizedModel, QuantizationMetadataLoadsLikeComfyQuantTensors) {
  Quantized q(WeightFormat::nvfp4, "nvfp4.safetensors");
  const H3Model a = load_model(q.output);
  for (bool layers_key : {true, false}) {
    SCOPED_TRACE(layers_key ? "{\"layers\": {...}}" : "bare mapping");
    const H3Model b = load_model(metadata_variant(q, "meta.safetensors", layers_key));
    for (const auto& layer : big_linears()) {
      const LinearWeight &x = find_linear(a.weights, layer), &y = find_linear(b.weights, layer);
      EXPECT_EQ(y.format, WeightFormat::nvfp4) << layer;
      EXPECT_EQ(dense_weight(x), dense_weight(y)) << layer;
      EXPECT_TRUE(same_bytes(x.scale, y.scale)) << layer;
    }
  }
}

// ---- validation --------------------------------------------------------------------------
std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantizedModel, BadAuxTensorsAreAllReportedWithExpectedShapes) {
  Quantized q(WeightFormat::nvfp4, "nvfp4.safetensors");
  const SafetensorsFile f = SafetensorsFile::open(q.output);
  NamedTensors t;
  for (const auto& e : f.entries()) {
    Tensor x = f.get(e.name);
    if (e.name == "blocks.0.attn.qkv_proj.weight_scale_2") continue;        // missing
    if (e.name == "blocks.1.mlp.fc1.weight_scale") x = x.slice(0, 0, 640);  // 768 rows
    if (e.name == "blocks.0.mlp.fc2.weight") x = x.slice(1, 0, 96);         // in 384 -> 192
    if (e.name == "token_refiner.blocks.0.attn.out_proj.weight_scale_2")    // bf16 scalar
      x = tensor_from_f32(x.to_f32(), {1}, DType::bf16);
    t.emplace_back(e.name, x);
  }
  t.emplace_back("blocks.1.attn.out_proj.input_scale", tensor_from_f32({0.0f}, {}));
  const std::string path = q.dir.file("bad.safetensors");
  write_safetensors(path, t);
  const std::string msg = load_error(path);
  ASSERT_FALSE(msg.empty()) << "a bad checkpoint loaded";
  for (const std::string& want :
       {std::string("5 problem(s)"),
        "missing key 'blocks.0.attn.qkv_proj.weight_scale_2' in " + path +
            " (expected [] or [1] f32) (nvfp4 layer 'blocks.0.attn.qkv_proj')",
        "key 'blocks.1.mlp.fc1.weight_scale' in " + path +
            " has shape [640, 12], expected [768, 12] (nvfp4 layer 'blocks.1.mlp.fc1')",
        "key 'blocks.0.mlp.fc2.weight' in " + path +
            " has shape [192, 96], expected [192, 192] (nvfp4 layer 'blocks.0.mlp.fc2')",
        "key 'token_refiner.blocks.0.attn.out_proj.weight_scale_2' in " + path +
            " is bf16 [1], expected [] or [1] f32",
        "key 'blocks.1.attn.out_proj.input_scale' in " + path +
            " holds 0, expected a finite value > 0"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << "\n" << msg;
}

TEST(QuantizedModel, Fp8LayerRejectsNvfp4OnlyAuxAndMissingScale) {
  Quantized q(WeightFormat::fp8_scaled, "fp8.safetensors");
  const SafetensorsFile f = SafetensorsFile::open(q.output);
  NamedTensors t;
  for (const auto& e : f.entries())
    if (e.name != "blocks.1.mlp.fc2.weight_scale") t.emplace_back(e.name, f.get(e.name));
  t.emplace_back("blocks.0.mlp.fc1.weight_scale_2", tensor_from_f32({1.0f}, {}));
  const std::string path = q.dir.file("bad_fp8.safetensors");
  write_safetensors(path, t);
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("missing key 'blocks.1.mlp.fc2.weight_scale' in " + path +
                     " (expected [] or [1] f32) (fp8_scaled layer 'blocks.1.mlp.fc2')"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unexpected key 'blocks.0.mlp.fc1.weight_scale_2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 problem(s)"), std::string::npos) << msg;
}

// ---- activation paths --------------------------------------------------------------------
std::vector<float> random_values(size_t n, uint32_t seed, float amp) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = amp * (static_cast<float>(s >> 8) / 8388608.0f - 1.0f);
  }
  return v;
}

FloatVec plain_linear(const LinearWeight& lw, const std::vector<float>& x, int64_t rows) {
  FloatVec y(rows * lw.out);
  ops::linear_cpu(
      {.x = x.data(),
       .w = dense_weight(lw).data(),
       .y = y.data(),
       .rows = rows,
       .in = lw.in,
       .out = lw.out});
  return y;
}

TEST(QuantizedModel, ApplyLinearQuantizesNvfp4Activations) {
  const int64_t rows = 5, in = 64, out = 24;
  const Tensor w = tensor_from_f32(random_values(out * in, 1, 0.2f), {out, in}, DType::bf16);
  const NamedTensors packed = quantize_linear_nvfp4("l", w);
  LinearWeight lw;
  lw.name = "l";
  lw.format = WeightFormat::nvfp4;
  lw.out = out;
  lw.in = in;
  const float gw = packed[2].second.to_f32()[0];
  const Tensor dw = nvfp4_dequantize(packed[0].second, packed[1].second, gw);
  lw.w.assign(dw.ptr<float>(), dw.ptr<float>() + dw.numel());
  std::vector<float> x = random_values(rows * in, 2, 3.0f);
  x[7] = 40.0f;  // one outlier: a coarse tensor scale for the others

  auto reference = [&](float g) {
    const Tensor xt = tensor_from_f32(x, {rows, in});
    const Nvfp4Tensor q = nvfp4_quantize(xt, g);
    return plain_linear(lw, nvfp4_dequantize(q.qdata, q.scales, g).to_f32(), rows);
  };
  const float g_dyn =
      nvfp4_global_scale(tensor_from_f32(x, {rows, in}), Nvfp4ScaleRule::kBf16Activation);
  const FloatVec dynamic = model::apply_linear(lw, x.data(), rows, false);
  EXPECT_EQ(dynamic, reference(g_dyn));
  EXPECT_NE(dynamic, plain_linear(lw, x, rows)) << "the activations were not quantized";

  lw.input_scale = tensor_from_f32({g_dyn * 0.25f}, {});  // static: clips the outlier
  const FloatVec fixed = model::apply_linear(lw, x.data(), rows, false);
  EXPECT_EQ(fixed, reference(g_dyn * 0.25f));
  EXPECT_NE(fixed, dynamic);
}

TEST(QuantizedModel, ApplyLinearFp8UsesInputScaleOnlyWhenPresent) {
  const int64_t rows = 3, in = 32, out = 8;
  LinearWeight lw;
  lw.name = "l";
  lw.format = WeightFormat::fp8_scaled;
  lw.out = out;
  lw.in = in;
  const std::vector<float> wv = random_values(out * in, 3, 0.5f);
  lw.w.assign(wv.begin(), wv.end());
  const std::vector<float> x = random_values(rows * in, 4, 2.0f);
  EXPECT_EQ(model::apply_linear(lw, x.data(), rows, false), plain_linear(lw, x, rows));
  const float s = 0.01f;
  lw.input_scale = tensor_from_f32({s}, {});
  std::vector<float> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = e4m3_to_f32(f32_to_e4m3_satfinite(x[i] / s)) * s;
  EXPECT_NE(xq, x);
  EXPECT_EQ(model::apply_linear(lw, x.data(), rows, false), plain_linear(lw, xq, rows));
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(QuantizedModel, CliQuantizesInfoShowsLayersAndForwardRuns) {
  TempDir dir;
  const std::string out = dir.file("q.safetensors");
  CliRun r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + out +
                     " --format nvfp4 --keep-bf16 blocks.1.mlp.fc2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, " -> nvfp4\n"), 11u) << r.output;
  EXPECT_EQ(count_of(r.output, "[12/12] blocks.1.mlp.fc2 [192, 384] bf16: kept"), 1u) << r.output;
  EXPECT_NE(r.output.find("11 layers -> nvfp4, 1 kept"), std::string::npos) << r.output;
  EXPECT_EQ(find_linear(load_model(out).weights, "blocks.1.mlp.fc2").format, WeightFormat::bf16);

  r = run_cli("info " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("linear layers by format: bf16 5; f32 6; nvfp4 11;"), std::string::npos)
      << r.output;

  const std::string fwd = dir.file("fwd.safetensors");
  r = run_cli("forward --checkpoint " + out + " --inputs " + kGolden + " --out " + fwd);
  ASSERT_EQ(r.status, 0) << r.output;
  for (double v : SafetensorsFile::open(fwd).get("video_velocity").to_f64())
    ASSERT_TRUE(std::isfinite(v));

  r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + dir.file("f.safetensors") +
              " --format fp8 --layers fc1,fc2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, " -> fp8_scaled\n"), 6u) << r.output;
}

TEST(QuantizedModel, CliRejectsBadRequestsInOneLine) {
  TempDir dir;
  const std::string out = dir.file("q.safetensors");
  CliRun r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + out +
                     " --format nvfp4 --keep-bf16 blocks.9");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("keep entry 'blocks.9' matches none"), std::string::npos) << r.output;
  EXPECT_EQ(count_of(r.output, "\n"), 1u) << r.output;
  EXPECT_FALSE(fs::exists(out));

  // A quantized file is not quantized again.
  ASSERT_EQ(
      run_cli("quantize-checkpoint --in " + kWeights + " --out " + out + " --format fp8").status,
      0);
  r = run_cli("quantize-checkpoint --in " + out + " --out " + dir.file("qq.safetensors") +
              " --format nvfp4");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("is already quantized"), std::string::npos) << r.output;

  r = run_cli("quantize-checkpoint --in " + kWeights + " --out " + out + " --format int4");
  EXPECT_NE(r.status, 0) << r.output;
}

}  // namespace
}  // namespace h3rt
