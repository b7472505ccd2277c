// Checkpoint loading: key specs, validation, the per-layer format hook, qkv row reordering.
#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/nvfp4_layout.h"
#include "h3rt/check.h"
#include "h3rt/device.h"
#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/nvfp4.h"
#include "h3rt/quantize.h"
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
  if (c.adaln_curve()) {
    s.push_back({"adaln_t_table", {c.adaln_curve_grid, c.adaln_curve_rank}, f});
  } else {
    add_linear(s, "time_embedder.proj_in", c.time_embed_hidden, c.freq_dim, true, f);
    add_linear(s, "time_embedder.proj_out", c.time_embed_dim, c.time_embed_hidden, true, f);
  }
  const DType adaln = c.adaln_curve() ? f : b;  // the curve form computes in float32
  s.push_back({"rope.inv_freq", {c.rope_freqs}, f});
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    add_block_core(s, "token_refiner.blocks." + std::to_string(i) + ".", c);
  s.push_back({"token_refiner.final_norm.weight", {c.hidden}, b});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    add_block_core(s, p, c);
    add_linear(s, p + "adaln_proj.linear", 18 * c.hidden, c.adaln_in(), true, adaln);
  }
  s.push_back({"final_layer.norm.weight", {c.hidden}, b});
  add_linear(s, "final_layer.adaln_proj.linear", 2 * c.hidden, c.adaln_in(), true, adaln);
  add_linear(s, "final_layer.video_out", c.pdd_heads * c.video_features(), c.hidden, true, f);
  add_linear(s, "final_layer.audio_out", c.pdd_heads * c.audio_channels, c.hidden, true, f);
  return s;
}

bool is_adaln_curve_key(const H3Config& c, const std::string& key) {
  return c.adaln_curve() &&
         (key == "adaln_t_table" || key.find("adaln_proj.linear.") != std::string::npos);
}

bool is_gate_compress_key(const H3Config& c, const std::string& key) {
  const std::string head = "blocks.", mid = ".attn.to_gate_compress.";
  if (key.rfind(head, 0) != 0) return false;
  const size_t dot = key.find('.', head.size());
  if (dot == std::string::npos || key.compare(dot, mid.size(), mid) != 0) return false;
  const std::string num = key.substr(head.size(), dot - head.size());
  return !num.empty() && num.size() < 10 &&
         num.find_first_not_of("0123456789") == std::string::npos && std::stoll(num) < c.layers;
}

const std::vector<std::string>& quantized_aux_suffixes() {
  static const std::vector<std::string> s = {".weight_scale", ".weight_scale_2", ".input_scale",
                                             ".comfy_quant"};
  return s;
}

namespace {

// A layer's "<layer>.comfy_quant" marker: absent, or present with its format name, or present
// but unreadable (`problem` says why).
struct Marker {
  bool present = false;
  std::string format;
  std::string problem;
  nlohmann::json json;  // the parsed object
};

// A field of a marker, at the top level or under "params" (both forms occur in ComfyUI files).
const nlohmann::json* marker_field(const Marker& m, const char* name) {
  if (m.json.contains(name)) return &m.json[name];
  if (m.json.contains("params") && m.json["params"].is_object() && m.json["params"].contains(name))
    return &m.json["params"][name];
  return nullptr;
}

// Whether a marker asks "full_precision_matrix_mult": true.
bool full_precision_marker(const Marker& m) {
  const nlohmann::json* f = marker_field(m, "full_precision_matrix_mult");
  return f && f->is_boolean() && f->get<bool>();
}

// The convrot group size an int8 marker asks for: 0 without "convrot", else
// "convrot_groupsize" (default 256). Sets `problem` for malformed fields.
int64_t int8_group(const Marker& m, std::string* problem) {
  const nlohmann::json* on = marker_field(m, "convrot");
  if (!on || (on->is_boolean() && !on->get<bool>())) return 0;
  if (!on->is_boolean()) {
    *problem = "has \"convrot\": " + on->dump() + ", expected true or false";
    return 0;
  }
  const nlohmann::json* g = marker_field(m, "convrot_groupsize");
  if (!g) return kConvrotDefaultGroup;
  if (!g->is_number_integer() || !convrot_group_valid(g->get<int64_t>())) {
    *problem = "has \"convrot_groupsize\": " + g->dump() + ", expected a power of 4 (e.g. 256)";
    return 0;
  }
  return g->get<int64_t>();
}

Marker read_marker(const TensorSource& src, const std::string& layer) {
  auto q = src.find(layer + ".comfy_quant");
  if (q == src.end()) return {};
  Marker m;
  m.present = true;
  const Tensor& t = q->second.tensor;
  if ((t.dtype() != DType::u8 && t.dtype() != DType::i8) || t.dim() != 1) {
    m.problem = detail::concat("has dtype ", dtype_name(t.dtype()), " and shape ",
                               shape_str(t.shape()), ", expected u8 [n] JSON bytes");
    return m;
  }
  const Tensor bytes = t.contiguous_copy();
  const std::string text(bytes.ptr<char>(), static_cast<size_t>(bytes.numel()));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("format") && j["format"].is_string()) {
    m.format = j["format"].get<std::string>();
    m.json = j;
  } else
    m.problem = "holds '" + text + "', expected a JSON object with a string \"format\"";
  return m;
}

}  // namespace

WeightFormat detect_linear_format(const TensorSource& src, const std::string& layer) {
  const Marker m = read_marker(src, layer);
  if (m.format == kComfyNvfp4) return WeightFormat::nvfp4;
  if (m.format == kComfyFp8) return WeightFormat::fp8_scaled;
  if (m.format == kComfyInt8) return WeightFormat::int8;
  auto w = src.find(layer + ".weight");
  if (w != src.end() && w->second.tensor.dtype() == DType::e4m3) return WeightFormat::fp8_scaled;
  if (w != src.end() && w->second.tensor.dtype() == DType::bf16) return WeightFormat::bf16;
  return WeightFormat::f32;
}

std::string linear_format_label(const TensorSource& src, const std::string& layer) {
  const WeightFormat f = detect_linear_format(src, layer);
  if (f != WeightFormat::int8) return weight_format_name(f);
  std::string problem;
  const int64_t g = int8_group(read_marker(src, layer), &problem);
  return g > 0 ? "int8_convrot G=" + std::to_string(g) : "int8";
}

bool full_precision_layer(const TensorSource& src, const std::string& layer) {
  return full_precision_marker(read_marker(src, layer));
}

Tensor host_copy(const Tensor& t, const std::string& name, const char* why) {
  H3RT_CHECK(t.is_contiguous(), "tensor '", name, "': a non-contiguous device tensor");
  Tensor h = Tensor::zeros(t.dtype(), t.shape());
  copy_to_host(h.data(), t.data(), static_cast<size_t>(t.nbytes()), 0);
  std::fprintf(stderr, "h3rt: warning: '%s' (%s, device memory) copied to the host: %s\n",
               name.c_str(), dtype_name(t.dtype()), why);
  return h;
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

float scalar(const Tensor& t) {
  return t.to_f32().at(0);
}

// e4m3(w) * s for every element (fp8_scaled).
FloatVec dequantize_fp8(const Tensor& w, float s) {
  const std::vector<float> v = w.to_f32();
  FloatVec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] * s;
  return out;
}

FloatVec dequantize_nvfp4(const Tensor& q, const Tensor& scales, float g) {
  auto packed = [](const Tensor& t) { return t.is_contiguous() ? t : t.contiguous_copy(); };
  const Tensor d = nvfp4_dequantize(packed(q), packed(scales), g);
  return FloatVec(d.ptr<float>(), d.ptr<float>() + d.numel());
}

class Assembler {
 public:
  Assembler(const H3Config& c, const TensorSource& s, bool dense_float)
      : c_(c), src_(s), dense_float_(dense_float) {}

  void validate() {
    std::set<std::string> expected;
    for (const auto& spec : weight_specs(c_)) {
      expected.insert(spec.key);
      if (ends_with(spec.key, ".weight") && spec.shape.size() == 2 &&
          !is_adaln_curve_key(c_, spec.key))
        linear_layers_.insert(layer_of(spec.key));
    }
    for (const auto& spec : weight_specs(c_)) {
      if (is_adaln_curve_key(c_, spec.key))
        validate_curve_tensor(spec);
      else
        check_spec(spec);
    }
    for (const auto& [key, st] : src_) {
      // VSA builds' gate projections: accepted, unused by the dense forward.
      if (expected.count(key) || is_quantized_aux(key) || is_gate_compress_key(c_, key)) continue;
      problems_.add("unexpected key '", key, "' ", shape_str(st.tensor.shape()), " in ", st.file);
    }
    problems_.throw_if_any(src_);
  }

  LinearWeight linear(const std::string& name) const {
    LinearWeight lw;
    lw.name = name;
    const SourceTensor& w = src_.at(name + ".weight");
    lw.format = detect_linear_format(src_, name);
    lw.out = w.tensor.size(0);
    lw.in = w.tensor.size(1) * (lw.format == WeightFormat::nvfp4 ? 2 : 1);
    lw.data = w.tensor;
    if (ends_with(name, ".qkv_proj") && w.qkv_layout == QkvLayout::per_head_interleaved)
      lw.data = per_head_to_thirds(w.tensor, c_.heads, c_.head_dim);  // not nvfp4 (validated)
    const Marker marker = read_marker(src_, name);
    lw.full_precision = lw.quantized() && full_precision_marker(marker);
    if (lw.full_precision && lw.format != WeightFormat::fp8_scaled)
      std::fprintf(stderr,
                   "h3rt: warning: layer '%s' (%s) asks full_precision_matrix_mult; h3rt runs "
                   "it quantized (ComfyUI multiplies it dequantized)\n",
                   name.c_str(), weight_format_name(lw.format));
    if (auto s = src_.find(name + ".input_scale");
        s != src_.end() && lw.quantized() &&
        !(lw.full_precision && lw.format == WeightFormat::fp8_scaled))
      lw.input_scale = s->second.tensor;
    switch (lw.format) {  // quantized: dense values only on demand (dense_weight)
      case WeightFormat::nvfp4:
        lw.scale = src_.at(name + ".weight_scale").tensor;
        lw.scale_2 = src_.at(name + ".weight_scale_2").tensor;
        break;
      case WeightFormat::fp8_scaled:  // a plain e4m3 cast (no marker, no scale): scale 1
        if (auto s = src_.find(name + ".weight_scale"); s != src_.end())
          lw.scale = s->second.tensor;
        else
          lw.scale = tensor_from_f32({1.0f}, {});
        break;
      case WeightFormat::int8: {
        std::string unused;
        lw.scale = src_.at(name + ".weight_scale").tensor;
        lw.int8_group = int8_group(marker, &unused);
        break;
      }
      default:  // bf16 in device memory, or dense copies not wanted: dense_weight on demand
        if (lw.data.device() == Device::cpu && dense_float_) lw.w = to_float(lw.data);
    }
    if (auto b = src_.find(name + ".bias"); b != src_.end()) {
      lw.bias_data = b->second.tensor;
      lw.b = to_float(lw.bias_data);
    }
    return lw;
  }

  FloatVec vec(const std::string& key) const { return to_float(src_.at(key).tensor); }

  // A curve-form AdaLN layer: float values as stored (f32, bf16 or f16), computed in float32.
  LinearWeight curve_linear(const std::string& name) const {
    LinearWeight lw;
    lw.name = name;
    lw.format = WeightFormat::f32;
    lw.data = src_.at(name + ".weight").tensor;
    lw.out = lw.data.size(0);
    lw.in = lw.data.size(1);
    if (dense_float_) lw.w = to_float(lw.data);
    lw.bias_data = src_.at(name + ".bias").tensor;
    lw.b = to_float(lw.bias_data);
    return lw;
  }

 private:
  // The curve table and curve-form AdaLN layers: never quantized; f32, bf16 or f16 (the
  // published pruned files store the small AdaLN projections as f16).
  void validate_curve_tensor(const WeightSpec& spec) {
    auto it = src_.find(spec.key);
    if (it == src_.end()) {
      problems_.add("missing key '", spec.key, "' (expected ", shape_str(spec.shape),
                    " f32, bf16 or f16: curve-form AdaLN, adaln_t_table [", c_.adaln_curve_grid,
                    ", ", c_.adaln_curve_rank, "])");
      return;
    }
    const Tensor& t = it->second.tensor;
    if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16)
      problems_.add("key '", spec.key, "' in ", it->second.file, " has dtype ",
                    dtype_name(t.dtype()), ", expected f32, bf16 or f16 (curve-form AdaLN)");
    if (t.shape() != spec.shape)
      problems_.add("key '", spec.key, "' in ", it->second.file, " has shape ",
                    shape_str(t.shape()), ", expected ", shape_str(spec.shape),
                    " (curve-form AdaLN, adaln_t_table [", c_.adaln_curve_grid, ", ",
                    c_.adaln_curve_rank, "])");
  }

  // Aux tensors belong to a linear layer that is quantized (or marked, whatever the marker's
  // problem), and only the ones its format uses; anything else is unexpected.
  bool is_quantized_aux(const std::string& key) const {
    for (const auto& s : quantized_aux_suffixes()) {
      if (!ends_with(key, s)) continue;
      const std::string layer = key.substr(0, key.size() - s.size());
      if (!linear_layers_.count(layer) || !src_.count(layer + ".weight")) return false;
      if (s == ".comfy_quant") return true;
      const Marker m = read_marker(src_, layer);
      const WeightFormat f = detect_linear_format(src_, layer);
      if (f == WeightFormat::nvfp4) return true;
      if (f == WeightFormat::fp8_scaled) return s != ".weight_scale_2";
      if (f == WeightFormat::int8) return s == ".weight_scale";
      return m.present;  // its marker's problem is reported instead
    }
    return false;
  }

  void check_spec(const WeightSpec& spec) {
    auto it = src_.find(spec.key);
    if (it == src_.end()) {
      problems_.add("missing key '", spec.key, "' (expected ", shape_str(spec.shape), " ",
                    dtype_name(spec.dtype), ")");
      return;
    }
    if (linear_layers_.count(layer_of(spec.key)) && ends_with(spec.key, ".weight")) {
      check_linear(spec, it->second);
      return;
    }
    check_plain(spec, it->second);
  }

  void check_plain(const WeightSpec& spec, const SourceTensor& st) {
    const Tensor& t = st.tensor;
    if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
      problems_.add("key '", spec.key, "' in ", st.file, " has dtype ", dtype_name(t.dtype()),
                    ", expected f32 or bf16",
                    t.dtype() == DType::u8 ? " (an nvfp4 layer needs a comfy_quant marker or a "
                                             "_quantization_metadata entry)"
                                           : "");
    if (t.shape() != spec.shape)
      problems_.add("key '", spec.key, "' in ", st.file, " has shape ", shape_str(t.shape()),
                    ", expected ", shape_str(spec.shape));
  }

  void check_linear(const WeightSpec& spec, const SourceTensor& w) {
    const std::string layer = layer_of(spec.key);
    Marker m = read_marker(src_, layer);
    const std::string& marker_file = m.present ? src_.at(layer + ".comfy_quant").file : w.file;
    if (m.present && m.problem.empty() && m.format != kComfyNvfp4 && m.format != kComfyFp8 &&
        m.format != kComfyInt8)
      m.problem = "names format '" + m.format + "'; supported: " + kComfyNvfp4 + ", " + kComfyFp8 +
                  ", " + kComfyInt8;
    if (m.format == kComfyInt8) int8_group(m, &m.problem);
    if (!m.problem.empty()) {
      problems_.add("quantization marker of layer '", layer, "' in ", marker_file,
                    " (comfy_quant tensor or _quantization_metadata entry) ", m.problem);
      return;
    }
    switch (detect_linear_format(src_, layer)) {
      case WeightFormat::nvfp4:
        return check_nvfp4(spec, w, layer);
      case WeightFormat::fp8_scaled:
        return check_fp8(spec, w, layer, m.present);
      case WeightFormat::int8:
        return check_int8(spec, w, layer, int8_group(m, &m.problem));
      default:
        return check_plain(spec, w);
    }
  }

  void check_nvfp4(const WeightSpec& spec, const SourceTensor& w, const std::string& layer) {
    const int64_t n = spec.shape[0], k = spec.shape[1];
    const std::string what = " (nvfp4 layer '" + layer + "')";
    if (k % nvfp4::kBlock != 0) {
      problems_.add("layer '", layer, "' in ", w.file, " is stored as nvfp4 but its ", k,
                    " input features are not a multiple of 16");
      return;
    }
    if (ends_with(layer, ".qkv_proj") && w.qkv_layout == QkvLayout::per_head_interleaved)
      problems_.add("layer '", layer, "' in ", w.file,
                    " is nvfp4 with per-head-interleaved qkv "
                    "rows; only fused [q; k; v] rows are supported for quantized qkv_proj");
    check_tensor(spec.key, w.file, {n, k / 2}, {DType::u8}, "u8", what);
    check_tensor(layer + ".weight_scale", w.file, {nvfp4::scale_rows(n), nvfp4::scale_cols(k)},
                 {DType::e4m3, DType::u8}, "e4m3 (or u8)", what);
    check_scalar(layer + ".weight_scale_2", w.file, true, false, what);
    check_scalar(layer + ".input_scale", w.file, false, true, what);
  }

  // fp8: an e4m3 weight with its weight_scale; without a comfy_quant marker the scale may be
  // absent, a plain cast (ComfyUI's weight_dtype fp8_e4m3fn, community fp8 files): scale 1, as
  // ComfyUI upcasts it.
  void check_fp8(const WeightSpec& spec, const SourceTensor& w, const std::string& layer,
                 bool marked) {
    const std::string what = " (fp8_scaled layer '" + layer + "')";
    check_tensor(spec.key, w.file, spec.shape, {DType::e4m3}, "e4m3", what);
    check_scalar(layer + ".weight_scale", w.file, marked, false, what);
    check_scalar(layer + ".input_scale", w.file, false, true, what);
  }

  // int8_tensorwise: i8 weight of the spec's shape, a positive finite f32 weight_scale per row
  // ([n, 1] or [n]) or per tensor ([] or [1]); with convrot the group must divide the inputs.
  void check_int8(const WeightSpec& spec, const SourceTensor& w, const std::string& layer,
                  int64_t group) {
    const int64_t n = spec.shape[0], k = spec.shape[1];
    const std::string what = " (int8 layer '" + layer + "')";
    if (group > 0 && k % group != 0)
      problems_.add("layer '", layer, "' in ", w.file, " is int8_convrot with group size ", group,
                    ", which does not divide its ", k, " input features");
    check_tensor(spec.key, w.file, spec.shape, {DType::i8}, "i8", what);
    auto s = src_.find(layer + ".weight_scale");
    if (s == src_.end()) {
      problems_.add("missing key '", layer, ".weight_scale' in ", w.file, " (expected [", n,
                    ", 1] f32)", what);
      return;
    }
    const Tensor& t = s->second.tensor;
    const Shape& sh = t.shape();
    const bool shape_ok = (t.numel() == 1 && t.dim() <= 1) || sh == Shape{n} || sh == Shape{n, 1};
    if (t.dtype() != DType::f32 || !shape_ok) {
      problems_.add("key '", layer, ".weight_scale' in ", s->second.file, " is ",
                    dtype_name(t.dtype()), " ", shape_str(sh), ", expected f32 [", n, ", 1] (or [",
                    n, "], [], [1])", what);
      return;
    }
    for (float v : t.to_f32())
      if (!std::isfinite(v) || v <= 0.0f) {
        problems_.add("key '", layer, ".weight_scale' in ", s->second.file, " holds ", v,
                      ", expected finite values > 0", what);
        return;
      }
  }

  // `key` (reported missing against `file`, the layer's weight file) must have `shape` and one
  // of `dtypes`.
  void check_tensor(const std::string& key, const std::string& file, const Shape& shape,
                    std::initializer_list<DType> dtypes, const char* dtypes_text,
                    const std::string& what) {
    auto it = src_.find(key);
    if (it == src_.end()) {
      problems_.add("missing key '", key, "' in ", file, " (expected ", shape_str(shape), " ",
                    dtypes_text, ")", what);
      return;
    }
    const Tensor& t = it->second.tensor;
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end())
      problems_.add("key '", key, "' in ", it->second.file, " has dtype ", dtype_name(t.dtype()),
                    ", expected ", dtypes_text, what);
    if (t.shape() != shape)
      problems_.add("key '", key, "' in ", it->second.file, " has shape ", shape_str(t.shape()),
                    ", expected ", shape_str(shape), what);
  }

  // An f32 scalar (shape [] or [1]), finite and >= 0 (> 0 when `positive`).
  void check_scalar(const std::string& key, const std::string& file, bool required, bool positive,
                    const std::string& what) {
    auto it = src_.find(key);
    if (it == src_.end()) {
      if (required)
        problems_.add("missing key '", key, "' in ", file, " (expected [] or [1] f32)", what);
      return;
    }
    const Tensor& t = it->second.tensor;
    if (t.dtype() != DType::f32 || t.numel() != 1 || t.dim() > 1) {
      problems_.add("key '", key, "' in ", it->second.file, " is ", dtype_name(t.dtype()), " ",
                    shape_str(t.shape()), ", expected [] or [1] f32", what);
      return;
    }
    const float v = scalar(t);
    if (!std::isfinite(v) || v < 0.0f || (positive && v == 0.0f))
      problems_.add("key '", key, "' in ", it->second.file, " holds ", v, ", expected a finite ",
                    positive ? "value > 0" : "value >= 0", what);
  }

  const H3Config& c_;
  const TensorSource& src_;
  bool dense_float_ = true;
  std::set<std::string> linear_layers_;  // key prefixes of the 2-D ".weight" specs
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

H3Weights assemble_weights(const H3Config& c, const TensorSource& src, bool dense_float) {
  c.validate();
  Assembler a(c, src, dense_float);
  a.validate();
  H3Weights w;
  w.video_in = a.linear("video_patch_proj");
  w.audio_in = a.linear("audio_patch_proj");
  w.text_in = a.linear("condition_proj");
  if (c.adaln_curve()) {
    w.adaln_t_table = a.vec("adaln_t_table");
  } else {
    w.time_in = a.linear("time_embedder.proj_in");
    w.time_out = a.linear("time_embedder.proj_out");
  }
  w.rope_inv_freq = a.vec("rope.inv_freq");
  w.refiner.resize(c.refiner_layers);
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    fill_core(a, "token_refiner.blocks." + std::to_string(i) + ".", w.refiner[i]);
  w.refiner_norm = a.vec("token_refiner.final_norm.weight");
  w.blocks.resize(c.layers);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    fill_core(a, p, w.blocks[i]);
    w.blocks[i].adaln = c.adaln_curve() ? a.curve_linear(p + "adaln_proj.linear")
                                        : a.linear(p + "adaln_proj.linear");
  }
  w.final_norm = a.vec("final_layer.norm.weight");
  w.final_adaln = c.adaln_curve() ? a.curve_linear("final_layer.adaln_proj.linear")
                                  : a.linear("final_layer.adaln_proj.linear");
  w.video_out = a.linear("final_layer.video_out");
  w.audio_out = a.linear("final_layer.audio_out");
  return w;
}

}  // namespace h3rt::model

namespace h3rt {

const FloatVec& dense_weight(const LinearWeight& lw) {
  if (!lw.w.empty() || lw.out * lw.in == 0) return lw.w;
  if (lw.data.device() == Device::cuda && lw.format == WeightFormat::bf16) {
    lw.w = model::to_float(
        model::host_copy(lw.data, lw.name + ".weight", "this layer computes from float32 values"));
    return lw.w;
  }
  if (lw.data.device() == Device::cuda && lw.format == WeightFormat::fp8_scaled) {
    // fp8 without a static input scale runs dequantized to bf16 (h3rt's copy on the device).
    lw.w = model::dequantize_fp8(
        model::host_copy(lw.data, lw.name + ".weight",
                         "fp8 without input_scale runs dequantized (fp8_activations dynamic "
                         "runs it as stored)"),
        model::scalar(lw.scale));
    return lw.w;
  }
  H3RT_CHECK(lw.data.device() == Device::cpu, "layer '", lw.name,
             "': its weights are in device memory, but this use needs them densely on the host "
             "(the CPU reference, or a ",
             weight_format_name(lw.format),
             " layer outside the block projections); pass that layer's tensors in host memory");
  switch (lw.format) {
    case WeightFormat::nvfp4:
      lw.w = model::dequantize_nvfp4(lw.data, lw.scale, model::scalar(lw.scale_2));
      break;
    case WeightFormat::fp8_scaled:
      lw.w = model::dequantize_fp8(lw.data, model::scalar(lw.scale));
      break;
    case WeightFormat::int8: {
      const Tensor d = int8_dequantize_weight(lw.data, lw.scale, lw.int8_group);
      lw.w = FloatVec(d.ptr<float>(), d.ptr<float>() + d.numel());
      break;
    }
    default:
      lw.w = model::to_float(lw.data);
  }
  return lw.w;
}

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
    case WeightFormat::int8:
      return "int8";
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

// The layer -> entry mapping of __metadata__ "_quantization_metadata" (empty when absent).
nlohmann::json quantization_metadata(const SafetensorsFile& f) {
  auto it = f.metadata().find("_quantization_metadata");
  if (it == f.metadata().end()) return nlohmann::json::object();
  auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  H3RT_CHECK(j.is_object(), f.path(),
             ": __metadata__ _quantization_metadata is not a JSON object: ", it->second);
  if (j.contains("layers")) {
    H3RT_CHECK(j["layers"].is_object(), f.path(),
               ": __metadata__ _quantization_metadata \"layers\" is not a JSON object");
    return j["layers"];
  }
  j.erase("format_version");
  return j;
}

}  // namespace

namespace model {

void add_source_file(TensorSource& src, const SafetensorsFile& f, QkvLayout asked) {
  const QkvLayout layout = resolve_layout(f, asked);
  for (const auto& e : f.entries()) src[e.name] = {f.get(e.name), f.path(), layout};
  const nlohmann::json layers = quantization_metadata(f);
  for (const auto& [layer, entry] : layers.items()) {
    if (f.contains(layer + ".comfy_quant")) continue;
    // The marker holds the entry's JSON as is, so an entry without a string "format" is
    // reported by the assembly together with every other problem.
    const std::string text = entry.dump();
    Tensor marker = Tensor::zeros(DType::u8, {static_cast<int64_t>(text.size())});
    std::memcpy(marker.data(), text.data(), text.size());
    src[layer + ".comfy_quant"] = {marker, f.path(), layout};
  }
}

}  // namespace model

namespace {

H3Model load_with(const std::string& path, const std::optional<H3Config>& config,
                  const LoadOptions& options) {
  const MemoryScope scope("the weights of " + path);
  const SafetensorsFile main = SafetensorsFile::open(path);
  H3Model m;
  m.config = config ? *config : infer_config(main);
  model::TensorSource src;
  model::add_source_file(src, main, options.qkv_layout);
  std::vector<SafetensorsFile> extra;  // kept open while assembling
  for (const auto& o : options.overrides) {
    extra.push_back(SafetensorsFile::open(o.path));
    model::add_source_file(src, extra.back(), o.qkv_layout);
  }
  m.weights = model::assemble_weights(m.config, src, options.dense_float_copies);
  return m;
}

}  // namespace

H3Model load_model(const std::string& path, const LoadOptions& options) {
  return load_with(path, std::nullopt, options);
}

H3Model load_model(const std::string& path, const H3Config& config, const LoadOptions& options) {
  return load_with(path, config, options);
}

H3Model load_model(const std::map<std::string, Tensor>& tensors, const LoadOptions& options,
                   const std::string& origin) {
  H3RT_CHECK(options.overrides.empty(), origin, ": override files apply to a checkpoint file only");
  const QkvLayout layout =
      options.qkv_layout == QkvLayout::autodetect ? QkvLayout::fused_thirds : options.qkv_layout;
  model::TensorSource src;
  const H3Config config = infer_config(tensors, origin);  // shapes only
  for (const auto& [name, t] : tensors) {
    // Quantized weight bytes and bf16 linear weights may stay in device memory (a CUDA model
    // uses them in place; the loader reads only their shape and dtype); everything else is
    // read on the host. bf16 that must be read here anyway is copied (one warning each).
    const bool weight = model::ends_with(name, ".weight") && t.is_contiguous() && t.dim() == 2;
    const bool weight_bytes =
        (t.dtype() == DType::i8 || t.dtype() == DType::u8 || t.dtype() == DType::e4m3) && weight;
    const bool bf16_weight = t.dtype() == DType::bf16 && weight;
    H3RT_CHECK(t.device() == Device::cpu || weight_bytes || bf16_weight, origin, ": tensor '", name,
               "' is in device memory; only contiguous int8/uint8/fp8 and 2-D bf16 '.weight' "
               "tensors may be, the rest is read from host memory");
    Tensor v = t.is_contiguous() ? t : t.contiguous_copy();
    if (t.device() == Device::cuda && bf16_weight) {
      if (model::is_adaln_curve_key(config, name))
        v = model::host_copy(t, name, "the curve-form AdaLN computes from float32 values");
      else if (layout == QkvLayout::per_head_interleaved &&
               model::ends_with(name, ".qkv_proj.weight"))
        v = model::host_copy(t, name, "per-head qkv rows are reordered on the host");
    }
    src[name] = {v, origin, layout};
  }
  H3Model m;
  m.config = config;
  m.weights = model::assemble_weights(m.config, src, options.dense_float_copies);
  return m;
}

}  // namespace h3rt
