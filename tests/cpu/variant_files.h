// Variants of the golden tiny checkpoint for the curve-form AdaLN and PDD head-bank tests,
// built here from their definitions (independently of prune-adaln). Shared by CPU and GPU tests.
#pragma once

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "h3rt/model.h"
#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "ops/swiglu/swiglu.h"
#include "ops/time_embedding/time_embedding.h"
#include "test_util.h"

namespace h3rt::test {

inline std::string golden_weights() {
  return golden_dir() + "/weights.safetensors";
}

// silu(time_embedder(t)) of a full-form model, float32 [t.size(), Tm].
inline std::vector<float> silu_temb(const H3Model& m, const std::vector<float>& t) {
  const H3Config& c = m.config;
  const int64_t n = static_cast<int64_t>(t.size());
  std::vector<float> sinusoid(n * c.freq_dim), temb(n * c.time_embed_dim);
  const H3Weights& w = m.weights;
  ops::time_embedding_cpu({t.data(), w.time_in.w.data(), w.time_in.b.data(), w.time_out.w.data(),
                           w.time_out.b.data(), sinusoid.data(), temb.data(), n, c.freq_dim,
                           c.time_embed_hidden, c.time_embed_dim});
  for (float& v : temb) v = ops::silu(v);
  return temb;
}

inline bool is_adaln_key(const std::string& k) {
  return k.rfind("time_embedder.", 0) == 0 || k.find("adaln_proj.linear.") != std::string::npos;
}

// The exact-basis curve form of the golden weights: T[i] = [silu(TE(t_i)), 1] with
// t_i = i / (grid - 1), W' = [W | b], b' = 0 (AdaLN tensors stored as `dtype`).
inline void write_exact_curve_file(const std::string& path, int64_t grid,
                                   DType dtype = DType::f32) {
  const H3Model full = load_model(golden_weights());
  const int64_t D = full.config.time_embed_dim, K = D + 1;
  std::vector<float> t(grid);
  for (int64_t i = 0; i < grid; ++i) t[i] = static_cast<float>(double(i) / double(grid - 1));
  const std::vector<float> g = silu_temb(full, t);
  std::vector<float> table(grid * K);
  for (int64_t i = 0; i < grid; ++i) {
    std::copy_n(g.begin() + i * D, D, table.begin() + i * K);
    table[i * K + D] = 1.0f;
  }
  const SafetensorsFile f = SafetensorsFile::open(golden_weights());
  NamedTensors out;
  for (const auto& e : f.entries())
    if (!is_adaln_key(e.name)) out.emplace_back(e.name, f.get(e.name));
  out.emplace_back("adaln_t_table", tensor_from_f32(table, {grid, K}));
  auto add = [&](const std::string& name, const LinearWeight& l) {
    std::vector<float> w(l.out * K);
    for (int64_t o = 0; o < l.out; ++o) {
      std::copy_n(l.w.begin() + o * D, D, w.begin() + o * K);
      w[o * K + D] = l.b[o];
    }
    out.emplace_back(name + ".weight", tensor_from_f32(w, {l.out, K}, dtype));
    out.emplace_back(name + ".bias",
                     tensor_from_f32(std::vector<float>(l.out, 0.0f), {l.out}, dtype));
  };
  for (size_t i = 0; i < full.weights.blocks.size(); ++i)
    add("blocks." + std::to_string(i) + ".adaln_proj.linear", full.weights.blocks[i].adaln);
  add("final_layer.adaln_proj.linear", full.weights.final_adaln);
  write_safetensors(path, out);
}

// The golden weights with a PDD head bank of n heads: head 0 is the golden head, heads 1..n-1
// offsets u * scale with u in [-1, 1) from a fixed LCG (weights and biases).
inline void write_pdd_file(const std::string& path, int64_t n, float scale = 0.05f) {
  const SafetensorsFile f = SafetensorsFile::open(golden_weights());
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto u = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(state >> 40) / double(1ull << 23) - 1.0);
  };
  NamedTensors out;
  for (const auto& e : f.entries()) {
    if (e.name.rfind("final_layer.video_out.", 0) != 0 &&
        e.name.rfind("final_layer.audio_out.", 0) != 0) {
      out.emplace_back(e.name, f.get(e.name));
      continue;
    }
    std::vector<float> v = f.get(e.name).to_f32();
    const size_t head = v.size();
    for (int64_t j = 1; j < n; ++j)
      for (size_t i = 0; i < head; ++i) v.push_back(u() * scale);
    Shape s = e.shape;
    s[0] *= n;
    out.emplace_back(e.name, tensor_from_f32(v, s));
  }
  write_safetensors(path, out);
}

// The golden weights as owned host tensors (a state dict for Denoiser::create), element `index`
// of `key` replaced by `value` (stored in the tensor's dtype): NaN/Inf injection.
inline std::map<std::string, Tensor> golden_weights_with(const std::string& key, int64_t index,
                                                         float value) {
  const SafetensorsFile f = SafetensorsFile::open(golden_weights());
  std::map<std::string, Tensor> t;
  for (const auto& e : f.entries()) t[e.name] = f.get(e.name).contiguous_copy();
  Tensor& w = t.at(key);
  std::vector<float> v = w.to_f32();
  v.at(static_cast<size_t>(index)) = value;
  w = tensor_from_f32(v, w.shape(), w.dtype());
  return t;
}

// A small request: 64 x 64 pixels, 5 frames, 3 stand-in text tokens (8 video, 18 audio rows).
inline Request small_request(const H3Config& c) {
  RequestOptions r;
  r.width = 64;
  r.height = 64;
  r.frames = 5;
  r.text_tokens = 3;
  return make_request(c, r);
}

// `src` (a quantize-checkpoint fp8_scaled file) with a static input_scale beside every marked
// layer, and, when `full_precision`, the marker {"format": "float8_e4m3fn",
// "full_precision_matrix_mult": true} (Comfy-Org's scaled-fp8 convention). Returns the layers.
inline int write_fp8_variant(const std::string& src, const std::string& dst, float input_scale,
                             bool full_precision) {
  const SafetensorsFile f = SafetensorsFile::open(src);
  const std::string text =
      nlohmann::json{{"format", "float8_e4m3fn"}, {"full_precision_matrix_mult", true}}.dump();
  const std::string suffix = ".comfy_quant";
  NamedTensors t;
  int layers = 0;
  for (const auto& e : f.entries()) {
    if (!e.name.ends_with(suffix)) {
      t.emplace_back(e.name, f.get(e.name));
      continue;
    }
    ++layers;
    t.emplace_back(e.name.substr(0, e.name.size() - suffix.size()) + ".input_scale",
                   tensor_from_f32({input_scale}, {}));
    Tensor m = f.get(e.name);
    if (full_precision) {
      m = Tensor::zeros(DType::u8, {static_cast<int64_t>(text.size())});
      std::memcpy(m.data(), text.data(), text.size());
    }
    t.emplace_back(e.name, m);
  }
  write_safetensors(dst, t, f.metadata());
  return layers;
}

}  // namespace h3rt::test
