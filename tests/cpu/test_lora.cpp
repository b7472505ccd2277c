// LoRA files and their merge (h3rt/lora.h) against dense math written out here: the bf16/f32
// merge bit for bit in the documented order, int8_convrot/int8 as the layer's quantizer applied
// to the merged dense rotated weight, fp8/nvfp4 requantized, pruned AdaLN layers, unmerge,
// errors naming keys, the Denoiser hook and the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/lora.h"
#include "h3rt/pipeline.h"
#include "h3rt/quantize.h"
#include "test_util.h"
#include "variant_files.h"

namespace h3rt {
namespace {

using test::TempDir;

const std::string kWeights = test::golden_dir() + "/weights.safetensors";

// [rows, cols] values k / 256 - 0.5 (k from an LCG, 0..255): exact in bf16, and every sum of a
// few of them is exact in double (so any summation order gives the same rotation).
Tensor lcg_matrix(int64_t rows, int64_t cols, uint64_t seed, DType dtype = DType::bf16) {
  std::vector<float> v(rows * cols);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<int>(s >> 56)) / 256.0f - 0.5f;
  }
  return tensor_from_f32(v, {rows, cols}, dtype);
}

struct PairFile {
  NamedTensors tensors;
  // up/down in the lora_B/lora_A form under "diffusion_model.<layer>", optional alpha.
  void add(const std::string& module, int64_t out, int64_t in, int64_t rank, uint64_t seed,
           double alpha = -1, const std::string& up = ".lora_B.weight",
           const std::string& down = ".lora_A.weight") {
    tensors.emplace_back(module + up, lcg_matrix(out, rank, seed));
    tensors.emplace_back(module + down, lcg_matrix(rank, in, seed + 1000));
    if (alpha >= 0) tensors.emplace_back(module + ".alpha", tensor_from_f32({float(alpha)}, {}));
  }
  std::string write(const TempDir& dir, const std::string& name) const {
    const std::string p = dir.file(name);
    write_safetensors(p, tensors);
    return p;
  }
};

// Dense math, written independently of the library: D = the FMA chain over r ascending,
// t = scale * D, W + t.
std::vector<float> dense_merged(const std::vector<float>& w, const Tensor& up,
                                const std::vector<float>& down, float scale) {
  const std::vector<float> b = up.to_f32();
  const int64_t out = up.size(0), rank = up.size(1), in = down.size() / rank;
  std::vector<float> m(w);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      float acc = 0.0f;
      for (int64_t r = 0; r < rank; ++r) acc = std::fma(b[o * rank + r], down[r * in + i], acc);
      volatile float t = scale * acc;  // a separate rounding, as documented
      m[o * in + i] = m[o * in + i] + t;
    }
  return m;
}

// A rotated per group of g columns by the explicit matrix H (hadamard_sign / sqrt(g)), in double.
std::vector<float> rotate_by_matrix(const Tensor& a, int64_t g) {
  const std::vector<float> v = a.to_f32();
  const int64_t rows = a.size(0), k = a.size(1);
  const double inv = 1.0 / std::sqrt(double(g));
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t base = 0; base < k; base += g)
      for (int64_t j = 0; j < g; ++j) {
        double s = 0;
        for (int64_t i = 0; i < g; ++i) s += v[r * k + base + i] * hadamard_sign(i, j);
        out[r * k + base + j] = static_cast<float>(s * inv);
      }
  return out;
}

std::vector<float> values(const FloatVec& v) {
  return std::vector<float>(v.begin(), v.end());
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  if (!t.data()) return {};
  const Tensor c = t.contiguous_copy();
  const auto* p = static_cast<const uint8_t*>(c.data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

LinearWeight& layer(H3Model& m, const std::string& name) {
  return *linear_layers(m.weights).at(name);
}

ModelSource source(const std::string& checkpoint) {
  ModelSource s;
  s.checkpoint = checkpoint;
  return s;
}

std::string quantize_tiny(const TempDir& dir, WeightFormat f, int64_t group) {
  QuantizeCheckpointOptions o;
  o.format = f;
  o.int8_group = group;
  const std::string out = dir.file("q.safetensors");
  quantize_checkpoint(kWeights, out, o);
  return out;
}

TEST(Lora, SpecsAndLayerNames) {
  EXPECT_EQ(parse_lora_spec("a.safetensors").strength, 1.0);
  const LoraSpec s = parse_lora_spec("dir/a.safetensors:0.75");
  EXPECT_EQ(s.path, "dir/a.safetensors");
  EXPECT_EQ(s.strength, 0.75);
  EXPECT_EQ(parse_lora_spec("c:/x/a.safetensors").path, "c:/x/a.safetensors");  // not a number
  EXPECT_EQ(parse_lora_spec("a:-1.5e-1").strength, -0.15);
  EXPECT_NE(test::error_of([] { parse_lora_spec("a:inf"); }).find("not a finite number"),
            std::string::npos);
  // A tail that is no number after an existing file (and the whole is no file): a bad strength,
  // said so, rather than "cannot open" on the whole argument.
  for (const std::string tail : {":abc", ":", ":1e400"}) {
    const std::string e = test::error_of([&] { parse_lora_spec(kWeights + tail); });
    EXPECT_NE(e.find("after the file is not a strength"), std::string::npos) << tail << ": " << e;
  }
  EXPECT_EQ(parse_lora_spec("no_such_dir/a.safetensors:abc").path, "no_such_dir/a.safetensors:abc");
  EXPECT_EQ(h3_linear_layer("blocks.3.attn.qkv_proj"), "blocks.3.attn.qkv_proj");
  EXPECT_EQ(h3_linear_layer("blocks_12_mlp_fc2"), "blocks.12.mlp.fc2");
  EXPECT_EQ(h3_linear_layer("token_refiner_blocks_0_attn_out_proj"),
            "token_refiner.blocks.0.attn.out_proj");
  EXPECT_EQ(h3_linear_layer("final_layer_adaln_proj_linear"), "final_layer.adaln_proj.linear");
  EXPECT_EQ(h3_linear_layer("time_embedder_proj_in"), "time_embedder.proj_in");
  EXPECT_EQ(h3_linear_layer("blocks.3.attn.q_norm"), "");
  EXPECT_EQ(h3_linear_layer("blocks.x.mlp.fc1"), "");
}

// Every ComfyUI key form resolves to the layer; alpha and strength make the scale.
TEST(Lora, KeyFormsAlphaAndScale) {
  TempDir dir;
  PairFile f;
  f.add("diffusion_model.blocks.0.attn.qkv_proj", 768, 192, 4, 1, 3.0);
  f.add("lora_unet_blocks_1_mlp_fc2", 192, 384, 2, 2, -1, ".lora_up.weight", ".lora_down.weight");
  f.add("token_refiner.blocks.0.mlp.fc1", 768, 192, 8, 3, 8.0, ".lora_B", ".lora_A");
  f.add("diffusion_model.final_layer.video_out", 96, 192, 1, 4, -1, ".lora.up.weight",
        ".lora.down.weight");
  const Lora l = read_lora({f.write(dir, "l.safetensors"), 0.5});
  ASSERT_EQ(l.pairs.size(), 4u);
  std::map<std::string, const LoraPair*> by;
  for (const auto& p : l.pairs) by[p.target] = &p;
  ASSERT_EQ(by.size(), 4u);
  const LoraPair& qkv = *by.at("blocks.0.attn.qkv_proj");
  EXPECT_EQ(qkv.rank(), 4);
  EXPECT_EQ(qkv.alpha_key, "diffusion_model.blocks.0.attn.qkv_proj.alpha");
  EXPECT_EQ(qkv.scale(0.5), float(0.5 * (3.0 / 4.0)));
  EXPECT_EQ(by.at("blocks.1.mlp.fc2")->up_key, "lora_unet_blocks_1_mlp_fc2.lora_up.weight");
  EXPECT_EQ(by.at("blocks.1.mlp.fc2")->scale(0.5), 0.5f);  // no alpha: strength alone
  EXPECT_EQ(by.at("token_refiner.blocks.0.mlp.fc1")->down_key,
            "token_refiner.blocks.0.mlp.fc1.lora_A");
  EXPECT_EQ(by.at("final_layer.video_out")->rank(), 1);
  const auto groups = lora_target_groups(l);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].pattern, "blocks.*.attn.qkv_proj");
  EXPECT_EQ(groups[0].blocks, std::vector<int64_t>{0});
}

TEST(Lora, MalformedFilesNameTheirKeys) {
  TempDir dir;
  auto err = [&](const NamedTensors& t) {
    const std::string p = dir.file("bad.safetensors");
    write_safetensors(p, t);
    return test::error_of([&] { read_lora({p, 1.0}); });
  };
  const std::string m = "diffusion_model.blocks.0.mlp.fc1";
  std::string e = err({{m + ".lora_B.weight", lcg_matrix(768, 4, 1)},
                       {m + ".lora_A.weight", lcg_matrix(3, 192, 2)}});
  EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("rank mismatch in module '" + m + "'"), std::string::npos) << e;
  e = err({{m + ".lora_B.weight", lcg_matrix(768, 4, 1)}});
  EXPECT_NE(e.find("has '" + m + ".lora_B.weight' but not the other half"), std::string::npos) << e;
  e = err({{m + ".lora_B.weight", lcg_matrix(768, 4, 1)},
           {m + ".lora_A.weight", lcg_matrix(4, 192, 2)},
           {m + ".alpha", lcg_matrix(1, 2, 3)}});
  EXPECT_NE(e.find("'" + m + ".alpha' is bf16 [1, 2], expected one float value"), std::string::npos)
      << e;
  e = err({{m + ".lora_up.weight", lcg_matrix(768, 4, 1)},
           {m + ".lora_A.weight", lcg_matrix(4, 192, 2)}});
  EXPECT_NE(e.find("mixes the lora_B/lora_A and lora_up/lora_down key forms"), std::string::npos)
      << e;
  e = err({{m + ".lora_B.weight", lcg_matrix(768, 4, 1)},
           {m + ".lora_A.weight", lcg_matrix(4, 192, 2)},
           {"other.tensor", lcg_matrix(1, 1, 1)}});
  EXPECT_NE(e.find("key 'other.tensor' is not a LoRA key"), std::string::npos) << e;
  // Adapter kinds h3rt does not merge are named at merge time, and skippable.
  const std::string p = dir.file("dora.safetensors");
  write_safetensors(p, {{m + ".lora_B.weight", lcg_matrix(768, 4, 1)},
                        {m + ".lora_A.weight", lcg_matrix(4, 192, 2)},
                        {m + ".dora_scale", lcg_matrix(768, 1, 3)}});
  const Lora dora = read_lora({p, 1.0});
  H3Model model = load_model(kWeights);
  e = test::error_of([&] { merge_loras(model, {dora}); });
  EXPECT_NE(e.find("key '" + m + ".dora_scale': DoRA are not supported"), std::string::npos) << e;
  LoraOptions skip;
  skip.skip_unmatched = true;
  const LoraMerge r = merge_loras(model, {dora}, skip);
  EXPECT_EQ(r.report.pairs, 1);
  ASSERT_EQ(r.report.warnings.size(), 1u);
  EXPECT_NE(r.report.warnings[0].find("dora_scale"), std::string::npos);
  e = err({{m + ".lora_B.weight", lcg_matrix(768, 4, 1)},
           {m + ".lora_A.weight", lcg_matrix(4, 192, 2)},
           {"lora_unet_blocks_0_mlp_fc1.lora_B.weight", lcg_matrix(768, 4, 1)},
           {"lora_unet_blocks_0_mlp_fc1.lora_A.weight", lcg_matrix(4, 192, 2)}});
  EXPECT_NE(e.find("both target layer 'blocks.0.mlp.fc1'"), std::string::npos) << e;
}

// bf16 and f32 layers: W' = round(W + scale * D) in the documented order, bit for bit; two
// LoRAs on one layer add in list order; unmerge restores every byte.
TEST(Lora, Bf16AndF32MergeIsTheDenseMathAndUnmergeRestores) {
  TempDir dir;
  PairFile a, b;
  a.add("diffusion_model.blocks.0.attn.qkv_proj", 768, 192, 4, 1, 2.0);
  a.add("diffusion_model.final_layer.video_out", 96, 192, 3, 2, 1.5);  // f32 layer
  b.add("blocks.0.attn.qkv_proj", 768, 192, 2, 3);
  const Lora la = read_lora({a.write(dir, "a.safetensors"), 0.8});
  const Lora lb = read_lora({b.write(dir, "b.safetensors"), -0.3});
  H3Model m = load_model(kWeights);
  const H3Model ref = load_model(kWeights);
  LoraMerge merge = merge_loras(m, {la, lb});
  EXPECT_EQ(merge.report.pairs, 3);
  EXPECT_EQ(merge.report.layers, 2);

  const LinearWeight& q0 = ref.weights.blocks[0].attn.qkv;
  std::vector<float> want = dense_merged(values(dense_weight(q0)), la.pairs[0].up,
                                         la.pairs[0].down.to_f32(), la.pairs[0].scale(0.8));
  want = dense_merged(want, lb.pairs[0].up, lb.pairs[0].down.to_f32(), lb.pairs[0].scale(-0.3));
  for (float& x : want) x = round_bf16(x);
  const LinearWeight& q = layer(m, "blocks.0.attn.qkv_proj");
  EXPECT_EQ(q.data.dtype(), DType::bf16);
  test::expect_same_bits(q.data.to_f32(), want, "qkv data");
  test::expect_same_bits(values(dense_weight(q)), want, "qkv w");

  const LinearWeight& v0 = ref.weights.video_out;
  const std::vector<float> wv = dense_merged(values(dense_weight(v0)), la.pairs[1].up,
                                             la.pairs[1].down.to_f32(), la.pairs[1].scale(0.8));
  EXPECT_EQ(layer(m, "final_layer.video_out").data.dtype(), DType::f32);
  test::expect_same_bits(values(dense_weight(layer(m, "final_layer.video_out"))), wv,
                         "video_out w");
  EXPECT_NE(wv, values(dense_weight(v0)));  // the merge changed it

  unmerge_loras(m, merge);
  H3Model fresh = load_model(kWeights);
  for (const auto& [name, l] : linear_layers(fresh.weights)) {
    const LinearWeight& got = layer(m, name);
    EXPECT_EQ(bytes_of(got.data), bytes_of(l->data)) << name;
    EXPECT_EQ(bytes_of(got.scale), bytes_of(l->scale)) << name;
    test::expect_same_bits(values(dense_weight(got)), values(dense_weight(*l)), name + " w");
  }
}

// int8_convrot (G = 16): the LoRA's A rotated into the stored basis, the delta added to q * s,
// requantized with the layer's row rule: equal to int8_quantize_rows (no rotation) of the merged
// dense rotated weight q*s + scale * B (A H), with A H by the explicit Hadamard matrix.
TEST(Lora, Int8ConvrotMergeIsTheLayerRuleOnTheMergedRotatedWeight) {
  TempDir dir;
  const std::string ck = quantize_tiny(dir, WeightFormat::int8, 16);
  PairFile f;
  f.add("diffusion_model.blocks.0.mlp.fc1", 768, 192, 4, 5, 4.0);
  f.add("lora_unet_blocks_1_mlp_fc2", 192, 384, 6, 6, 3.0, ".lora_up.weight", ".lora_down.weight");
  const Lora l = read_lora({f.write(dir, "l.safetensors"), 1.25});
  H3Model m = load_model(ck);
  const H3Model ref = load_model(ck);
  LoraMerge merge = merge_loras(m, {l});
  for (size_t i = 0; i < l.pairs.size(); ++i) {
    const LoraPair& p = l.pairs[i];
    const LinearWeight& before =
        i == 0 ? ref.weights.blocks[0].mlp.fc1 : ref.weights.blocks[1].mlp.fc2;
    ASSERT_EQ(before.int8_group, 16);
    const std::vector<float> s = int8_row_scales(before.scale, before.out),
                             q = before.data.to_f32();
    std::vector<float> w_rot(q.size());
    for (int64_t r = 0; r < before.out; ++r)
      for (int64_t c = 0; c < before.in; ++c)
        w_rot[r * before.in + c] = q[r * before.in + c] * s[r];
    const std::vector<float> merged =
        dense_merged(w_rot, p.up, rotate_by_matrix(p.down, 16), p.scale(1.25));
    const Int8Rows want = int8_quantize_rows(tensor_from_f32(merged, {before.out, before.in}), 0);
    const LinearWeight& got = layer(m, p.target);
    EXPECT_EQ(got.format, WeightFormat::int8);
    EXPECT_EQ(got.int8_group, 16);
    EXPECT_EQ(bytes_of(got.data), bytes_of(want.q)) << p.target;
    EXPECT_EQ(bytes_of(got.scale), bytes_of(want.scale)) << p.target;
    EXPECT_NE(bytes_of(got.data), bytes_of(before.data)) << p.target;
    const Tensor d = int8_dequantize_weight(want.q, want.scale, 16);
    test::expect_same_bits(values(dense_weight(got)),
                           std::vector<float>(d.ptr<float>(), d.ptr<float>() + d.numel()),
                           p.target + " w");
  }
  unmerge_loras(m, merge);
  EXPECT_EQ(bytes_of(m.weights.blocks[0].mlp.fc1.data),
            bytes_of(ref.weights.blocks[0].mlp.fc1.data));
  EXPECT_EQ(bytes_of(m.weights.blocks[1].mlp.fc2.scale),
            bytes_of(ref.weights.blocks[1].mlp.fc2.scale));
}

// Plain int8 with one scalar scale keeps the tensorwise rule; fp8_scaled and nvfp4 are
// requantized as quantize-checkpoint does.
TEST(Lora, PlainInt8Fp8AndNvfp4AreRequantizedWithTheirRules) {
  TempDir dir;
  PairFile f;
  f.add("diffusion_model.blocks.0.attn.out_proj", 192, 256, 4, 7, 2.0);
  const Lora l = read_lora({f.write(dir, "l.safetensors"), 1.0});
  const LoraPair& p = l.pairs[0];
  const std::string name = "blocks.0.attn.out_proj";
  {  // a scalar-scale int8 layer made here
    const SafetensorsFile src = SafetensorsFile::open(kWeights);
    NamedTensors t;
    for (const auto& e : src.entries())
      if (e.name != name + ".weight") t.emplace_back(e.name, src.get(e.name));
    const Int8Rows q = int8_quantize_tensor(src.get(name + ".weight"));
    t.emplace_back(name + ".weight", q.q);
    t.emplace_back(name + ".weight_scale", q.scale);
    t.emplace_back(name + ".comfy_quant", comfy_quant_marker(kComfyInt8));
    write_safetensors(dir.file("t.safetensors"), t);
    H3Model m = load_model(dir.file("t.safetensors"));
    const LinearWeight before = layer(m, name);
    std::vector<float> w(before.data.numel());
    const float s = before.scale.to_f32()[0];
    const std::vector<float> qv = before.data.to_f32();
    for (size_t i = 0; i < w.size(); ++i) w[i] = qv[i] * s;
    const Int8Rows want = int8_quantize_tensor(
        tensor_from_f32(dense_merged(w, p.up, p.down.to_f32(), p.scale(1.0)), {192, 256}));
    merge_loras(m, {l});
    EXPECT_EQ(layer(m, name).scale.dim(), 0);
    EXPECT_EQ(bytes_of(layer(m, name).data), bytes_of(want.q));
    EXPECT_EQ(bytes_of(layer(m, name).scale), bytes_of(want.scale));
  }
  for (WeightFormat fmt : {WeightFormat::fp8_scaled, WeightFormat::nvfp4}) {
    TempDir d2;
    H3Model m = load_model(quantize_tiny(d2, fmt, 0));
    const LinearWeight& before = layer(m, name);
    ASSERT_EQ(before.format, fmt);
    const Tensor merged = tensor_from_f32(
        dense_merged(values(dense_weight(before)), p.up, p.down.to_f32(), p.scale(1.0)),
        {192, 256});
    const NamedTensors want = fmt == WeightFormat::nvfp4 ? quantize_linear_nvfp4(name, merged)
                                                         : quantize_linear_fp8(name, merged);
    merge_loras(m, {l});
    EXPECT_EQ(bytes_of(layer(m, name).data), bytes_of(want[0].second)) << weight_format_name(fmt);
    EXPECT_EQ(bytes_of(layer(m, name).scale), bytes_of(want[1].second)) << weight_format_name(fmt);
  }
}

// Pruned (curve-form) AdaLN: a LoRA of the curve layer's shape merges (f32); a full-AdaLN or
// time-embedder LoRA is an error naming the keys, or skipped with a warning on request.
TEST(Lora, PrunedAdalnTakesFittingLorasAndNamesMisfits) {
  TempDir dir;
  const std::string ck = dir.file("curve.safetensors");
  test::write_exact_curve_file(ck, 33);
  H3Model m = load_model(ck);
  const H3Model ref = load_model(ck);
  ASSERT_TRUE(m.config.adaln_curve());
  const int64_t k = m.config.adaln_curve_rank, rows = 18 * m.config.hidden;
  PairFile fit, dense;
  fit.add("diffusion_model.blocks.1.adaln_proj.linear", rows, k, 2, 8, 1.0);
  dense.add("diffusion_model.blocks.0.adaln_proj.linear", rows, 96, 2, 9);
  dense.add("diffusion_model.time_embedder.proj_in", 192, 256, 2, 10);
  dense.add("diffusion_model.blocks.0.mlp.fc2", 192, 384, 2, 11);
  const Lora lf = read_lora({fit.write(dir, "fit.safetensors"), 1.0});
  const Lora ld = read_lora({dense.write(dir, "dense.safetensors"), 1.0});
  merge_loras(m, {lf});
  const LoraPair& p = lf.pairs[0];
  test::expect_same_bits(values(dense_weight(m.weights.blocks[1].adaln)),
                         dense_merged(values(dense_weight(ref.weights.blocks[1].adaln)), p.up,
                                      p.down.to_f32(), p.scale(1.0)),
                         "curve adaln");
  const std::string e = test::error_of([&] { merge_loras(m, {ld}); });
  EXPECT_NE(e.find("2 LoRA pair(s) or key(s) do not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("'diffusion_model.blocks.0.adaln_proj.linear.lora_B.weight' [3456, 2]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("does not fit layer 'blocks.0.adaln_proj.linear' [3456, 97]"), std::string::npos)
      << e;
  EXPECT_NE(e.find("targets layer 'time_embedder.proj_in', which this checkpoint does not have"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("pruned curve form"), std::string::npos) << e;
  EXPECT_NE(e.find("dense.safetensors"), std::string::npos) << e;
  LoraOptions skip;
  skip.skip_unmatched = true;
  const LoraMerge r = merge_loras(m, {ld}, skip);
  EXPECT_EQ(r.report.pairs, 1);  // fc2 merged
  ASSERT_EQ(r.report.warnings.size(), 2u);
  EXPECT_NE(r.report.warnings[0].find("skipped LoRA"), std::string::npos);
}

TEST(Lora, UnknownTargetsAndShapesAreNamed) {
  TempDir dir;
  PairFile f;
  f.add("diffusion_model.blocks.7.attn.qkv_proj", 768, 192, 2, 1);
  f.add("diffusion_model.blocks.0.attn.q_norm", 128, 1, 2, 2);
  f.add("diffusion_model.blocks.1.attn.qkv_proj", 768, 190, 2, 3);
  const Lora l = read_lora({f.write(dir, "l.safetensors"), 1.0});
  H3Model m = load_model(kWeights);
  const std::string e = test::error_of([&] { merge_loras(m, {l}); });
  EXPECT_NE(e.find("3 LoRA pair(s) or key(s) do not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("targets layer 'blocks.7.attn.qkv_proj', which this checkpoint does not have"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("module 'diffusion_model.blocks.0.attn.q_norm' names no H3 linear layer"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("does not fit layer 'blocks.1.attn.qkv_proj' [768, 192]"), std::string::npos)
      << e;
}

// A rank-4 LoRA file over the tiny model's blocks.0 qkv and blocks.1 fc1.
std::string qkv_and_fc1_lora(const TempDir& dir) {
  PairFile f;
  f.add("diffusion_model.blocks.0.attn.qkv_proj", 768, 192, 4, 12, 4.0);
  f.add("diffusion_model.blocks.1.mlp.fc1", 768, 192, 4, 13, 4.0);
  return f.write(dir, "l.safetensors");
}

// The Denoiser with DenoiserOptions::loras runs the same forward as a checkpoint holding the
// merged dense weights (bf16 and int8_convrot).
TEST(Lora, DenoiserForwardEqualsTheMergedDenseCheckpoint) {
  TempDir dir;
  const std::string lp = qkv_and_fc1_lora(dir);
  for (const bool int8 : {false, true}) {
    const std::string ck = int8 ? quantize_tiny(dir, WeightFormat::int8, 16) : kWeights;
    H3Model merged = load_model(ck);
    merge_loras(merged, {read_lora({lp, 0.7})});
    const SafetensorsFile src = SafetensorsFile::open(ck);
    NamedTensors t;
    for (const auto& e : src.entries()) t.emplace_back(e.name, src.get(e.name));
    for (auto& [key, tensor] : t)
      for (const char* name : {"blocks.0.attn.qkv_proj", "blocks.1.mlp.fc1"}) {
        const LinearWeight& l = layer(merged, name);
        if (key == std::string(name) + ".weight") tensor = l.data;
        if (key == std::string(name) + ".weight_scale") tensor = l.scale;
      }
    const std::string dense = dir.file(int8 ? "dense_int8.safetensors" : "dense.safetensors");
    write_safetensors(dense, t);

    DenoiserOptions with;
    with.loras = {{lp, 0.7}};
    auto a = Denoiser::create(source(ck), with);
    auto b = Denoiser::create(source(dense));
    EXPECT_EQ(a->lora_report().pairs, 2);
    const Request req = make_request(a->config(), {});
    const auto run = [&](Denoiser& d) {
      return forward_at_sigma(d, req.layout, req.video_rows.data(), req.audio_rows.data(),
                              req.text.data(), 0.6f);
    };
    const ForwardOutputs ya = run(*a), yb = run(*b);
    test::expect_same_bits(values(ya.video_velocity), values(yb.video_velocity), "video");
    test::expect_same_bits(values(ya.audio_velocity), values(yb.audio_velocity), "audio");
    const ForwardOutputs plain = run(*Denoiser::create(source(ck)));
    EXPECT_NE(values(plain.video_velocity), values(ya.video_velocity));
  }
}

// A LoRA's tensors given in memory (LoraSpec::tensors, as the Python API and the ComfyUI node
// pass them) read and merge exactly as the same tensors in a file; they must be host and
// contiguous, messages name the spec's path, and the resume identity covers their bytes.
TEST(Lora, InMemoryTensorsMergeAsTheFile) {
  TempDir dir;
  const std::string lp = qkv_and_fc1_lora(dir);
  const SafetensorsFile file = SafetensorsFile::open(lp);
  auto tensors = std::make_shared<std::map<std::string, Tensor>>();
  std::vector<std::vector<char>> copies;  // owned copies: not views of the file
  for (const auto& e : file.entries()) {
    const Tensor t = file.get(e.name);
    copies.emplace_back(static_cast<const char*>(t.data()),
                        static_cast<const char*>(t.data()) + t.nbytes());
    (*tensors)[e.name] = Tensor(copies.back().data(), t.dtype(), t.shape());
  }
  const LoraSpec mem{"loras[0] (in-memory tensors)", 0.7, tensors};
  const Lora a = read_lora(mem), b = read_lora({lp, 0.7});
  ASSERT_EQ(a.pairs.size(), b.pairs.size());
  for (size_t i = 0; i < a.pairs.size(); ++i) {
    EXPECT_EQ(a.pairs[i].target, b.pairs[i].target);
    EXPECT_EQ(a.pairs[i].scale(0.7), b.pairs[i].scale(0.7));
    EXPECT_EQ(a.pairs[i].up.to_f32(), b.pairs[i].up.to_f32());
  }
  DenoiserOptions from_memory, from_file;
  from_memory.loras = {mem};
  from_file.loras = {{lp, 0.7}};
  auto dm = Denoiser::create(source(kWeights), from_memory);
  auto df = Denoiser::create(source(kWeights), from_file);
  EXPECT_EQ(dm->lora_report().pairs, 2);
  const Request req = make_request(dm->config(), {});
  const auto run = [&](Denoiser& d) {
    return forward_at_sigma(d, req.layout, req.video_rows.data(), req.audio_rows.data(),
                            req.text.data(), 0.6f);
  };
  test::expect_same_bits(values(run(*dm).video_velocity), values(run(*df).video_velocity), "video");
  const std::string id = model_identity(source(kWeights), from_memory);
  EXPECT_NE(id.find("lora in-memory tensors fnv1a64 "), std::string::npos) << id;
  copies[0][0] ^= 1;  // other bytes, another identity
  EXPECT_NE(model_identity(source(kWeights), from_memory), id);

  auto strided = std::make_shared<std::map<std::string, Tensor>>(*tensors);
  const auto two_d = std::find_if(strided->begin(), strided->end(),
                                  [](const auto& kv) { return kv.second.dim() == 2; });
  ASSERT_NE(two_d, strided->end());
  Tensor& up = two_d->second;  // its transpose, as a strided view
  up = Tensor(up.data(), up.dtype(), Shape{up.size(1), up.size(0)}, Shape{1, up.size(1)}, nullptr,
              Device::cpu);
  std::string e = test::error_of([&] { read_lora({"mine", 1.0, strided}); });
  EXPECT_NE(e.find("LoRA mine: tensor '" + two_d->first + "' must be a contiguous host tensor"),
            std::string::npos)
      << e;
  auto bad = std::make_shared<std::map<std::string, Tensor>>(*tensors);
  (*bad)["blocks.0.attn.qkv_proj.oops"] = tensors->begin()->second;
  e = test::error_of([&] { read_lora({"mine", 1.0, bad}); });
  EXPECT_NE(e.find("invalid LoRA mine: 1 problem(s)"), std::string::npos) << e;
}

TEST(Lora, CliInfoAndSample) {
  TempDir dir;
  PairFile f;
  for (int b = 0; b < 2; ++b) {
    f.add("lora_unet_blocks_" + std::to_string(b) + "_attn_qkv_proj", 768, 192, 4, 20 + b, 4.0,
          ".lora_up.weight", ".lora_down.weight");
    f.add("lora_unet_blocks_" + std::to_string(b) + "_adaln_proj_linear", 3456, 96, 4, 30 + b, 2.0,
          ".lora_up.weight", ".lora_down.weight");
  }
  const std::string lp = f.write(dir, "l.safetensors");
  test::CliRun r = test::run_cli("info " + lp);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: 4 pairs; rank 4 (x4); alpha 2 (x2), 4 (x2)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("blocks.*.attn.qkv_proj: 2 layer(s) (blocks 0-1); rank 4 (x2); alpha "
                          "4 (x2)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("blocks.*.adaln_proj.linear: 2 layer(s)"), std::string::npos) << r.output;
  const std::string out = dir.file("o.safetensors");
  r = test::run_cli("sample --checkpoint " + kWeights + " --steps 1 --lora " + lp + ":0.5 --lora " +
                    lp + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: 8 pair(s) merged into 4 layer(s)"), std::string::npos) << r.output;
  const std::string curve = dir.file("curve.safetensors");
  test::write_exact_curve_file(curve, 9);
  r = test::run_cli("forward --checkpoint " + curve + " --inputs " + test::golden_dir() +
                    "/golden.safetensors --out " + out + " --lora " + lp);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("2 LoRA pair(s) or key(s) do not fit"), std::string::npos) << r.output;
  r = test::run_cli("forward --checkpoint " + curve + " --inputs " + test::golden_dir() +
                    "/golden.safetensors --out " + out + " --lora " + lp +
                    " --lora-skip-unmatched");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("h3rt: skipped LoRA"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LoRA: 2 pair(s) merged into 2 layer(s)"), std::string::npos) << r.output;
}

// `h3rt make-lora`: the synthetic turbo-shaped LoRA of the tiny preset is a LoRA file h3rt reads
// (info lists its targets), and `sample --lora` merges every pair into the preset's layers,
// changing the result; the library's pairs are what the file holds.
TEST(Lora, MakeLoraWritesATurboShapedFileThatMerges) {
  TempDir dir;
  const std::string lp = dir.file("turbo.safetensors");
  test::CliRun r = test::run_cli("make-lora --preset tiny --rank 4 --seed 3 --out " + lp);
  ASSERT_EQ(r.status, 0) << r.output;
  const Lora want = make_synthetic_lora(*config_preset("tiny"), 4, 259, 3);
  ASSERT_EQ(want.pairs.size(), 16u);  // 2 blocks x 5, 1 refiner block x 4, condition_proj, final
  const Lora got = read_lora({lp, 1.0});
  ASSERT_EQ(got.pairs.size(), want.pairs.size());
  for (size_t i = 0; i < got.pairs.size(); ++i) {
    const LoraPair& g = got.pairs[i];
    const auto w = std::find_if(want.pairs.begin(), want.pairs.end(),
                                [&](const LoraPair& p) { return p.target == g.target; });
    ASSERT_NE(w, want.pairs.end()) << g.target;
    EXPECT_EQ(g.alpha, 4.0) << g.target;
    EXPECT_EQ(g.up.to_f32(), w->up.to_f32()) << g.target;
    EXPECT_EQ(g.down.to_f32(), w->down.to_f32()) << g.target;
  }
  r = test::run_cli("info " + lp);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: 16 pairs; rank 4 (x16)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("blocks.*.mlp.fc1: 2 layer(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("condition_proj"), std::string::npos) << r.output;
  const std::string with = dir.file("with.safetensors"), without = dir.file("without.safetensors");
  const std::string run = "sample --width 64 --height 64 --frames 5 --text-tokens 3 --steps 1 ";
  r = test::run_cli(run + "--lora " + lp + " --out " + with);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: 16 pair(s) merged into 16 layer(s)"), std::string::npos)
      << r.output;
  ASSERT_EQ(test::run_cli(run + "--out " + without).status, 0);
  EXPECT_NE(SafetensorsFile::open(with).get("video_latents").to_f32(),
            SafetensorsFile::open(without).get("video_latents").to_f32());
}

}  // namespace
}  // namespace h3rt
