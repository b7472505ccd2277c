// Dynamic fp8 activations on the CPU reference: the fp8_quantize op's scale rule, apply_linear's
// dynamic path against a straightforward computation (fresh random data), the all-zero input,
// which layers set_fp8_activations selects, and the tiny model's forward with the option on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>

#include "golden_inputs.h"
#include "h3rt/formats.h"
#include "h3rt/model.h"
#include "h3rt/quantize.h"
#include "h3rt/safetensors.h"
#include "model/forward_internal.h"
#include "ops/fp8_quantize/fp8_quantize.h"
#include "test_util.h"
#include "variant_files.h"

namespace h3rt {
namespace {

uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// Values of very different magnitudes per row, as real activations.
std::vector<float> random_rows(int64_t rows, int64_t cols, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_real_distribution<float> lg(-3.0f, 3.0f);
  std::vector<float> v(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(lg(g));
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = round_bf16(d(g) * s);
  }
  return v;
}

// An fp8_scaled layer [out, in] as quantize-checkpoint writes it, with the dynamic path on.
LinearWeight fp8_layer(int64_t out, int64_t in, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> wv(out * in);
  for (float& x : wv) x = d(g);
  const NamedTensors q = quantize_linear_fp8("l", tensor_from_f32(wv, {out, in}, DType::bf16));
  LinearWeight lw;
  lw.name = "l";
  lw.format = WeightFormat::fp8_scaled;
  lw.out = out;
  lw.in = in;
  lw.data = q[0].second;
  lw.scale = q[1].second;
  const float ws = lw.scale.to_f32()[0];
  const std::vector<float> codes = lw.data.to_f32();
  lw.w.resize(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) lw.w[i] = codes[i] * ws;
  lw.fp8_dynamic_activations = true;
  return lw;
}

TEST(Fp8Dynamic, QuantizeCpuScaleRuleAndStridedRows) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 7, cols = 13, ld = 16;
  std::vector<float> x = random_rows(rows, ld, g);
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld; ++c) {
      if (c >= cols)
        x[r * ld + c] = 1e6f;  // padding: must not count
      else
        amax = std::max(amax, std::fabs(x[r * ld + c]));
    }
  std::vector<uint8_t> q(rows * ld, 0xaa);
  float s = -1.0f, got_amax = -1.0f;
  ops::fp8_quantize_dynamic_cpu({.x = x.data(),
                                 .q = q.data(),
                                 .rows = rows,
                                 .cols = cols,
                                 .x_row_stride = ld,
                                 .q_row_stride = ld,
                                 .scale = &s,
                                 .amax = &got_amax});
  EXPECT_EQ(got_amax, amax);
  EXPECT_EQ(s, amax / 448.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld; ++c) {
      const uint8_t want = c < cols ? f32_to_e4m3_satfinite(x[r * ld + c] / s) : 0xaa;
      ASSERT_EQ(q[r * ld + c], want) << "row " << r << " col " << c;
    }
  // The largest element lands on the e4m3 maximum: the scale uses the full range.
  float top = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) top = std::max(top, std::fabs(e4m3_to_f32(q[r * ld + c])));
  EXPECT_EQ(top, 448.0f);
}

TEST(Fp8Dynamic, QuantizeCpuAllZeroUsesScaleOne) {
  const std::vector<float> x(3 * 8, 0.0f);
  std::vector<uint8_t> q(x.size(), 0xaa);
  float s = -1.0f, amax = -1.0f;
  ops::fp8_quantize_dynamic_cpu(
      {.x = x.data(), .q = q.data(), .rows = 3, .cols = 8, .scale = &s, .amax = &amax});
  EXPECT_EQ(amax, 0.0f);
  EXPECT_EQ(s, 1.0f);
  for (uint8_t v : q) EXPECT_EQ(v, 0);
  EXPECT_EQ(ops::fp8_dynamic_scale(0.0f), 1.0f);
}

// apply_linear's dynamic path equals the rule computed longhand: amax over the call's whole
// activation, s = amax / 448, x' = e4m3(x / s) * s, then the product with the dequantized weight
// (double accumulation, rounded once). It also equals the fp8-GEMM form (x8 . w8) * s * w_scale
// up to float rounding of the two products.
TEST(Fp8Dynamic, ApplyLinearMatchesLonghand) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  const int64_t rows = 9, in = 48, out = 20;
  LinearWeight lw = fp8_layer(out, in, g);
  std::normal_distribution<float> bd(0.0f, 0.3f);
  lw.b.resize(out);
  for (float& v : lw.b) v = bd(g);
  const std::vector<float> x = random_rows(rows, in, g);

  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float s = amax / 448.0f;
  std::vector<float> x8(x.size()), xd(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x8[i] = e4m3_to_f32(f32_to_e4m3_satfinite(x[i] / s));
    xd[i] = x8[i] * s;
  }
  const std::vector<float> w8 = lw.data.to_f32();
  const float ws = lw.scale.to_f32()[0];
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    const FloatVec y = model::apply_linear(lw, x.data(), rows, bf16);
    ASSERT_EQ(y.size(), size_t(rows * out));
    int64_t differ = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0.0, gemm = 0.0, mag = 0.0;
        for (int64_t i = 0; i < in; ++i) {
          acc += double(xd[r * in + i]) * lw.w[o * in + i];
          gemm += double(x8[r * in + i]) * w8[o * in + i];
          mag += std::fabs(double(x8[r * in + i]) * w8[o * in + i]);
        }
        const float want = float(acc + lw.b[o]);
        const float got = y[r * out + o];
        differ += test::bits(got) != test::bits(bf16 ? round_bf16(want) : want);
        const double fp8_form = gemm * (double(s) * ws) + lw.b[o];
        const double tol =
            1e-6 * (mag * s * ws + std::fabs(lw.b[o])) + (bf16 ? std::fabs(fp8_form) / 128 : 0.0);
        EXPECT_NEAR(got, fp8_form, tol) << r << ", " << o;
      }
    EXPECT_EQ(differ, 0);
  }
  // Not the unquantized product (the default path): the activations did go through e4m3.
  const FloatVec dynamic = model::apply_linear(lw, x.data(), rows, false);
  lw.fp8_dynamic_activations = false;
  EXPECT_NE(model::apply_linear(lw, x.data(), rows, false), dynamic);
}

TEST(Fp8Dynamic, ApplyLinearAllZeroInputGivesBias) {
  std::mt19937_64 g(fresh_seed());
  LinearWeight lw = fp8_layer(8, 16, g);
  lw.b = FloatVec(8, 0.25f);
  const std::vector<float> x(3 * 16, 0.0f);
  const FloatVec y = model::apply_linear(lw, x.data(), 3, false);
  ASSERT_EQ(y.size(), 24u);
  for (float v : y) EXPECT_EQ(v, 0.25f);
}

TEST(Fp8Dynamic, ApplyLinearRejectsNonFiniteScale) {
  std::mt19937_64 g(fresh_seed());
  LinearWeight lw = fp8_layer(8, 16, g);
  std::vector<float> x(2 * 16, 1.0f);
  x[5] = INFINITY;
  EXPECT_THROW(model::apply_linear(lw, x.data(), 2, false), Error);
}

// Only fp8_scaled block projections without input_scale are switched; static switches back.
TEST(Fp8Dynamic, SetFp8ActivationsSelectsProjectionsWithoutInputScale) {
  H3Model m = make_synthetic_model(H3Config::tiny(), 3);
  EXPECT_EQ(set_fp8_activations(m, Fp8Activations::dynamic), 0);  // all bf16
  m.weights.blocks[0].attn.qkv.format = WeightFormat::fp8_scaled;
  m.weights.refiner[0].mlp.fc2.format = WeightFormat::fp8_scaled;
  m.weights.blocks[1].mlp.fc1.format = WeightFormat::fp8_scaled;
  m.weights.blocks[1].mlp.fc1.input_scale = tensor_from_f32({0.1f}, {});
  m.weights.text_in.format = WeightFormat::fp8_scaled;  // not a block projection
  EXPECT_EQ(set_fp8_activations(m, Fp8Activations::dynamic), 2);
  EXPECT_TRUE(m.weights.blocks[0].attn.qkv.fp8_dynamic_activations);
  EXPECT_TRUE(m.weights.refiner[0].mlp.fc2.fp8_dynamic_activations);
  EXPECT_FALSE(m.weights.blocks[1].mlp.fc1.fp8_dynamic_activations);
  EXPECT_FALSE(m.weights.blocks[0].attn.out.fp8_dynamic_activations);
  EXPECT_FALSE(m.weights.text_in.fp8_dynamic_activations);
  EXPECT_EQ(set_fp8_activations(m, Fp8Activations::static_scale), 0);
  EXPECT_FALSE(m.weights.blocks[0].attn.qkv.fp8_dynamic_activations);
}

double rel_l2(const FloatVec& a, const FloatVec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// The tiny model's forward from an fp8_scaled checkpoint (no input_scale) with dynamic e4m3
// activations: it differs from the default (weight-only fp8) forward, and stays near the
// bf16-weight forward. e4m3 keeps 3 mantissa bits; quantizing the activations adds an error of
// the weights' order (relative RMS ~0.027 per tensor), so the velocity error grows from the
// weight-only ~0.025 by about sqrt(2): measured relative L2 0.0341 video / 0.0395 audio (fp32),
// 0.0346 / 0.0377 (bf16). The bound 0.08 is a ~2x margin; a misplaced scale gives errors of
// order 1.
TEST(Fp8Dynamic, TinyForwardStaysNearTheBf16Forward) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("h3rt_fp8_dynamic_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string weights = test::golden_dir() + "/weights.safetensors";
  const std::string file = (dir / "fp8.safetensors").string();
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::fp8_scaled;
  quantize_checkpoint(weights, file, opt);
  const ForwardInputs in = test::golden_inputs().inputs();
  const ForwardOutputs ref = forward_cpu(load_model(weights), in, Precision::fp32);
  H3Model m = load_model(file);
  const ForwardOutputs weight_only = forward_cpu(m, in, Precision::fp32);
  EXPECT_EQ(set_fp8_activations(m, Fp8Activations::dynamic), 12);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(precision_name(p));
    const ForwardOutputs got = forward_cpu(m, in, p);
    const double ev = rel_l2(got.video_velocity, ref.video_velocity);
    const double ea = rel_l2(got.audio_velocity, ref.audio_velocity);
    std::printf(
        "[ measured ] fp8 dynamic activations, %s: velocity rel L2 vs bf16-weight fp32 "
        "forward: video %.4g, audio %.4g (weight-only fp32: %.4g, %.4g)\n",
        precision_name(p), ev, ea, rel_l2(weight_only.video_velocity, ref.video_velocity),
        rel_l2(weight_only.audio_velocity, ref.audio_velocity));
    EXPECT_GT(rel_l2(got.video_velocity, weight_only.video_velocity), 1e-4)
        << "the activations were not quantized";
    EXPECT_LT(ev, 0.08);
    EXPECT_LT(ea, 0.08);
  }
  fs::remove_all(dir);
}

// "full_precision_matrix_mult": true in an fp8 layer's marker (Comfy-Org's scaled-fp8 convention:
// ComfyUI multiplies dequantized): the layer runs dequantized whatever its input_scale says, and
// never with dynamic activations. The same file without the flag runs the static scale instead.
TEST(Fp8Dynamic, FullPrecisionMarkerRunsTheLayerDequantized) {
  test::TempDir dir("h3rt_fp8_full_precision");
  const std::string weights = test::golden_dir() + "/weights.safetensors";
  const std::string plain = dir.file("fp8.safetensors");
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::fp8_scaled;
  quantize_checkpoint(weights, plain, opt);
  auto variant = [&](const std::string& name, bool flag) {
    EXPECT_GT(test::write_fp8_variant(plain, dir.file(name), 0.02f, flag), 0);
    return dir.file(name);
  };
  const ForwardInputs in = test::golden_inputs().inputs();
  const ForwardOutputs dequantized = forward_cpu(load_model(plain), in, Precision::fp32);
  const ForwardOutputs stat =
      forward_cpu(load_model(variant("static.safetensors", false)), in, Precision::fp32);
  H3Model full = load_model(variant("full.safetensors", true));
  const ForwardOutputs got = forward_cpu(full, in, Precision::fp32);
  test::expect_same_bits(got.video_velocity, dequantized.video_velocity, "video");
  test::expect_same_bits(got.audio_velocity, dequantized.audio_velocity, "audio");
  EXPECT_NE(stat.video_velocity, dequantized.video_velocity) << "input_scale had no effect";
  EXPECT_TRUE(full.weights.blocks[0].attn.qkv.full_precision);
  EXPECT_EQ(set_fp8_activations(full, Fp8Activations::dynamic), 0);
  // `h3rt info` says how each file's projections run.
  const test::CliRun info_full = test::run_cli("info " + dir.file("full.safetensors"));
  EXPECT_NE(info_full.output.find("fp8_scaled x4 -> CUDA: dequantized to bf16 "
                                  "(full_precision_matrix_mult"),
            std::string::npos)
      << info_full.output;
  const test::CliRun info_static = test::run_cli("info " + dir.file("static.safetensors"));
  EXPECT_NE(info_static.output.find("fp8_scaled x4 -> CUDA: fp8 e4m3 GEMM with the static"),
            std::string::npos)
      << info_static.output;
}

// A plain e4m3 cast (no comfy_quant marker, no weight_scale: ComfyUI's weight_dtype fp8_e4m3fn,
// community fp8 files) loads with scale 1, the bits of the same codes with weight_scale 1 stored;
// a marked fp8 layer without its weight_scale stays an error naming the key.
TEST(Fp8Dynamic, PlainFp8CastLoadsWithScaleOne) {
  test::TempDir dir("h3rt_fp8_plain");
  const std::string scaled = dir.file("fp8.safetensors");
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::fp8_scaled;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", scaled, opt);
  const SafetensorsFile f = SafetensorsFile::open(scaled);
  NamedTensors plain, one, unscaled;
  for (const auto& e : f.entries()) {
    const bool marker = e.name.ends_with(".comfy_quant"), scale = e.name.ends_with(".weight_scale");
    if (!marker && !scale) {
      plain.emplace_back(e.name, f.get(e.name));
      one.emplace_back(e.name, f.get(e.name));
    }
    if (!scale) unscaled.emplace_back(e.name, f.get(e.name));
    if (scale) one.emplace_back(e.name, tensor_from_f32({1.0f}, {}));
  }
  write_safetensors(dir.file("plain.safetensors"), plain, f.metadata());
  write_safetensors(dir.file("one.safetensors"), one, f.metadata());
  write_safetensors(dir.file("unscaled.safetensors"), unscaled, f.metadata());
  const ForwardInputs in = test::golden_inputs().inputs();
  const H3Model m = load_model(dir.file("plain.safetensors"));
  EXPECT_EQ(m.weights.blocks[0].attn.qkv.format, WeightFormat::fp8_scaled);
  const ForwardOutputs got = forward_cpu(m, in, Precision::fp32);
  const ForwardOutputs want =
      forward_cpu(load_model(dir.file("one.safetensors")), in, Precision::fp32);
  test::expect_same_bits(got.video_velocity, want.video_velocity, "video");
  test::expect_same_bits(got.audio_velocity, want.audio_velocity, "audio");
  const std::string e = test::error_of([&] { load_model(dir.file("unscaled.safetensors")); });
  EXPECT_NE(e.find("missing key 'blocks.0.attn.qkv_proj.weight_scale'"), std::string::npos) << e;
}

// `h3rt forward --fp8-activations dynamic` on the CPU: the option reaches the model (the output
// differs from the default's and is recorded in the file's metadata); a bad value is refused.
TEST(Fp8Dynamic, CliForwardTakesTheOption) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("h3rt_fp8_dynamic_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string q = (dir / "fp8.safetensors").string();
  QuantizeCheckpointOptions opt;
  opt.format = WeightFormat::fp8_scaled;
  quantize_checkpoint(test::golden_dir() + "/weights.safetensors", q, opt);
  auto run = [&](const std::string& mode, const std::string& out) {
    const std::string cmd = std::string(H3RT_CLI_PATH) + " forward --checkpoint " + q +
                            " --inputs " + test::golden_dir() + "/golden.safetensors --out " + out +
                            " --fp8-activations " + mode + " > /dev/null 2>&1";
    return std::system(cmd.c_str());
  };
  const std::string a = (dir / "static.safetensors").string();
  const std::string b = (dir / "dynamic.safetensors").string();
  ASSERT_EQ(run("static", a), 0);
  ASSERT_EQ(run("dynamic", b), 0);
  EXPECT_NE(run("sometimes", (dir / "bad.safetensors").string()), 0);
  const SafetensorsFile fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  EXPECT_EQ(fb.metadata().at("fp8_activations"), "dynamic");
  EXPECT_EQ(fa.metadata().at("fp8_activations"), "static");
  const std::vector<float> va = fa.get("video_velocity").to_f32();
  const std::vector<float> vb = fb.get("video_velocity").to_f32();
  EXPECT_NE(va, vb);
  for (float v : vb) ASSERT_TRUE(std::isfinite(v));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace h3rt
