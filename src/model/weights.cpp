// Checkpoint loading: key specs, validation, the per-layer format hook, qkv row reordering.
#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "h3rt/check.h"
#include "h3rt/safetensors.h"

namespace h3rt::model {

namespace {

using Specs = std::vector<WeightSpec>;

void add_linear(Specs& s, const std::string& name, int64_t out, int64_t in, bool bias, DType t) {
  s.push_back({name + ".weight", {out, in}, t});
  if (bias) s.push_back({name + ".bias", {out}, t});
}

// Attention, MLP and the two norms: the part a refiner block and a transformer block share.
void add_block_core(Specs& s, const std::string& p, const H3Config& c) {
  const DType b = DType::bf16;
  s.push_back({p + "norm1.weight", {c.hidden}, b});
  s.push_back({p + "norm2.weight", {c.hidden}, b});
  add_linear(s, p + "attn.qkv_proj", 3 * c.inner(), c.hidden, false, b);
  s.push_back({p + "attn.q_norm.weight", {c.head_dim}, b});
  s.push_back({p + "attn.k_norm.weight", {c.head_dim}, b});
  add_linear(s, p + "attn.out_proj", c.hidden, c.inner(), false, b);
  add_linear(s, p + "mlp.fc1", 2 * c.ffn, c.hidden, false, b);
  add_linear(s, p + "mlp.fc2", c.hidden, c.ffn, false, b);
}

}  // namespace

std::vector<WeightSpec> weight_specs(const H3Config& c) {
  const DType f = DType::f32, b = DType::bf16;
  Specs s;
  add_linear(s, "video_patch_proj", c.hidden, c.video_features(), true, f);
  add_linear(s, "audio_patch_proj", c.hidden, c.audio_channels, true, f);
  add_linear(s, "condition_proj", c.hidden, c.text_dim, true, b);
  add_linear(s, "time_embedder.proj_in", c.time_embed_hidden, c.freq_dim, true, f);
  add_linear(s, "time_embedder.proj_out", c.time_embed_dim, c.time_embed_hidden, true, f);
  s.push_back({"rope.inv_freq", {c.rope_freqs}, f});
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    add_block_core(s, "token_refiner.blocks." + std::to_string(i) + ".", c);
  s.push_back({"token_refiner.final_norm.weight", {c.hidden}, b});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    add_block_core(s, p, c);
    add_linear(s, p + "adaln_proj.linear", 18 * c.hidden, c.time_embed_dim, true, b);
  }
  s.push_back({"final_layer.norm.weight", {c.hidden}, b});
  add_linear(s, "final_layer.adaln_proj.linear", 2 * c.hidden, c.time_embed_dim, true, b);
  add_linear(s, "final_layer.video_out", c.video_features(), c.hidden, true, f);
  add_linear(s, "final_layer.audio_out", c.audio_channels, c.hidden, true, f);
  return s;
}

const std::vector<std::string>& quantized_aux_suffixes() {
  static const std::vector<std::string> s = {".weight_scale", ".weight_scale_2", ".input_scale",
                                             ".comfy_quant"};
  return s;
}

WeightFormat detect_linear_format(const TensorSource& src, const std::string& layer) {
  if (auto q = src.find(layer + ".comfy_quant"); q != src.end()) {
    // The marker is a byte tensor holding a small JSON object naming the format.
    const Tensor& t = q->second.tensor;
    std::string text;
    if (t.dtype() == DType::u8 || t.dtype() == DType::i8)
      for (float v : t.to_f32()) text.push_back(static_cast<char>(static_cast<int>(v)));
    return text.find("float8") != std::string::npos ? WeightFormat::fp8_scaled
                                                    : WeightFormat::nvfp4;
  }
  auto w = src.find(layer + ".weight");
  if (w != src.end() && w->second.tensor.dtype() == DType::e4m3) return WeightFormat::fp8_scaled;
  if (w != src.end() && w->second.tensor.dtype() == DType::bf16) return WeightFormat::bf16;
  return WeightFormat::f32;
}

namespace {

// Collects every problem so that one error lists them all.
class Problems {
 public:
  template <typename... A>
  void add(A&&... a) {
    lines_.push_back(detail::concat(std::forward<A>(a)...));
  }
  void throw_if_any(const TensorSource& src) const {
    if (lines_.empty()) return;
    std::set<std::string> files;
    for (const auto& [k, v] : src) files.insert(v.file);
    std::ostringstream os;
    os << "invalid H3 weights (";
    for (auto it = files.begin(); it != files.end(); ++it)
      os << (it == files.begin() ? "" : ", ") << *it;
    os << "): " << lines_.size() << " problem(s)";
    for (const auto& l : lines_) os << "\n  " << l;
    throw Error(os.str());
  }

 private:
  std::vector<std::string> lines_;
};

std::string layer_of(const std::string& key) {
  return key.substr(0, key.rfind('.'));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Exact float32 values of an f32 or bf16 tensor.
FloatVec to_float(const Tensor& t) {
  const std::vector<float> v = t.to_f32();
  return FloatVec(v.begin(), v.end());
}

// Rows [q_0 k_0 v_0 q_1 ...] (blocks of hd rows) -> [q_0 q_1 ...; k_0 ...; v_0 ...].
Tensor per_head_to_thirds(const Tensor& t, int64_t heads, int64_t hd) {
  const Tensor src = t.contiguous_copy();
  Tensor dst = Tensor::zeros(src.dtype(), src.shape());
  const int64_t row_bytes = src.size(1) * dtype_size(src.dtype());
  const int64_t block = hd * row_bytes;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t part = 0; part < 3; ++part)
      std::memcpy(dst.ptr<char>() + (part * heads + h) * block,
                  src.ptr<char>() + (h * 3 + part) * block, block);
  return dst;
}

class Assembler {
 public:
  Assembler(const H3Config& c, const TensorSource& s) : c_(c), src_(s) {}

  void validate() {
    std::set<std::string> expected;
    for (const auto& spec : weight_specs(c_)) {
      expected.insert(spec.key);
      check_spec(spec);
    }
    for (const auto& [key, st] : src_) {
      if (expected.count(key) || is_quantized_aux(key)) continue;
      problems_.add("unexpected key '", key, "' ", shape_str(st.tensor.shape()), " in ", st.file);
    }
    problems_.throw_if_any(src_);
  }

  LinearWeight linear(const std::string& name) const {
    LinearWeight lw;
    lw.name = name;
    const SourceTensor& w = src_.at(name + ".weight");
    lw.format = w.tensor.dtype() == DType::bf16 ? WeightFormat::bf16 : WeightFormat::f32;
    lw.out = w.tensor.size(0);
    lw.in = w.tensor.size(1);
    lw.data = w.tensor;
    if (ends_with(name, ".qkv_proj") && w.qkv_layout == QkvLayout::per_head_interleaved)
      lw.data = per_head_to_thirds(w.tensor, c_.heads, c_.head_dim);
    lw.w = to_float(lw.data);
    if (auto b = src_.find(name + ".bias"); b != src_.end()) {
      lw.bias_data = b->second.tensor;
      lw.b = to_float(lw.bias_data);
    }
    return lw;
  }

  FloatVec vec(const std::string& key) const { return to_float(src_.at(key).tensor); }

 private:
  bool is_quantized_aux(const std::string& key) const {
    for (const auto& s : quantized_aux_suffixes())
      if (ends_with(key, s) && src_.count(key.substr(0, key.size() - s.size()) + ".weight"))
        return true;
    return false;
  }

  void check_spec(const WeightSpec& spec) {
    auto it = src_.find(spec.key);
    if (it == src_.end()) {
      problems_.add("missing key '", spec.key, "' (expected ", shape_str(spec.shape), " ",
                    dtype_name(spec.dtype), ")");
      return;
    }
    const Tensor& t = it->second.tensor;
    if (ends_with(spec.key, ".weight") && spec.shape.size() == 2) {
      const WeightFormat f = detect_linear_format(src_, layer_of(spec.key));
      if (f == WeightFormat::fp8_scaled || f == WeightFormat::nvfp4) {
        problems_.add("layer '", layer_of(spec.key), "' in ", it->second.file, " is stored as ",
                      weight_format_name(f), ", which is not supported yet");
        return;
      }
    }
    if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
      problems_.add("key '", spec.key, "' in ", it->second.file, " has dtype ",
                    dtype_name(t.dtype()), ", expected f32 or bf16");
    if (t.shape() != spec.shape)
      problems_.add("key '", spec.key, "' in ", it->second.file, " has shape ",
                    shape_str(t.shape()), ", expected ", shape_str(spec.shape));
  }

  const H3Config& c_;
  const TensorSource& src_;
  Problems problems_;
};

void fill_core(const Assembler& a, const std::string& p, RefinerBlockWeights& b) {
  b.norm1 = a.vec(p + "norm1.weight");
  b.norm2 = a.vec(p + "norm2.weight");
  b.attn.qkv = a.linear(p + "attn.qkv_proj");
  b.attn.out = a.linear(p + "attn.out_proj");
  b.attn.q_norm = a.vec(p + "attn.q_norm.weight");
  b.attn.k_norm = a.vec(p + "attn.k_norm.weight");
  b.mlp.fc1 = a.linear(p + "mlp.fc1");
  b.mlp.fc2 = a.linear(p + "mlp.fc2");
}

}  // namespace

H3Weights assemble_weights(const H3Config& c, const TensorSource& src) {
  c.validate();
  Assembler a(c, src);
  a.validate();
  H3Weights w;
  w.video_in = a.linear("video_patch_proj");
  w.audio_in = a.linear("audio_patch_proj");
  w.text_in = a.linear("condition_proj");
  w.time_in = a.linear("time_embedder.proj_in");
  w.time_out = a.linear("time_embedder.proj_out");
  w.rope_inv_freq = a.vec("rope.inv_freq");
  w.refiner.resize(c.refiner_layers);
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    fill_core(a, "token_refiner.blocks." + std::to_string(i) + ".", w.refiner[i]);
  w.refiner_norm = a.vec("token_refiner.final_norm.weight");
  w.blocks.resize(c.layers);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    fill_core(a, p, w.blocks[i]);
    w.blocks[i].adaln = a.linear(p + "adaln_proj.linear");
  }
  w.final_norm = a.vec("final_layer.norm.weight");
  w.final_adaln = a.linear("final_layer.adaln_proj.linear");
  w.video_out = a.linear("final_layer.video_out");
  w.audio_out = a.linear("final_layer.audio_out");
  return w;
}

}  // namespace h3rt::model

namespace h3rt {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32:
      return "f32";
    case WeightFormat::bf16:
      return "bf16";
    case WeightFormat::fp8_scaled:
      return "fp8_scaled";
    case WeightFormat::nvfp4:
      return "nvfp4";
  }
  return "?";
}

namespace {

QkvLayout resolve_layout(const SafetensorsFile& f, QkvLayout asked) {
  if (asked != QkvLayout::autodetect) return asked;
  auto it = f.metadata().find("qkv_layout");
  if (it == f.metadata().end()) return QkvLayout::fused_thirds;
  const std::string& v = it->second;
  if (v == "fused_thirds" || v == "fused" || v == "qkv") return QkvLayout::fused_thirds;
  if (v == "per_head_interleaved" || v == "per_head") return QkvLayout::per_head_interleaved;
  H3RT_FAIL(f.path(), ": unknown __metadata__ qkv_layout '", v,
            "' (expected fused_thirds or per_head_interleaved)");
}

// Adds (or replaces) every tensor of `f`; the file object must outlive the tensors' use only
// through their shared mapping, which the views keep alive.
void add_file(model::TensorSource& src, const SafetensorsFile& f, QkvLayout asked) {
  const QkvLayout layout = resolve_layout(f, asked);
  for (const auto& e : f.entries()) src[e.name] = {f.get(e.name), f.path(), layout};
}

H3Model load_with(const std::string& path, const std::optional<H3Config>& config,
                  const LoadOptions& options) {
  const SafetensorsFile main = SafetensorsFile::open(path);
  H3Model m;
  m.config = config ? *config : infer_config(main);
  model::TensorSource src;
  add_file(src, main, options.qkv_layout);
  std::vector<SafetensorsFile> extra;  // kept open while assembling
  for (const auto& o : options.overrides) {
    extra.push_back(SafetensorsFile::open(o.path));
    add_file(src, extra.back(), o.qkv_layout);
  }
  m.weights = model::assemble_weights(m.config, src);
  return m;
}

}  // namespace

H3Model load_model(const std::string& path, const LoadOptions& options) {
  return load_with(path, std::nullopt, options);
}

H3Model load_model(const std::string& path, const H3Config& config, const LoadOptions& options) {
  return load_with(path, config, options);
}

}  // namespace h3rt
