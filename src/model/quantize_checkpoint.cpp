// Quantized checkpoints: the per-layer quantizers (NVFP4 through the host packer, fp8 e4m3
// with a per-tensor scale) and the whole-file transform behind `h3rt quantize-checkpoint`.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/nvfp4.h"
#include "h3rt/quantize.h"
#include "model/weights.h"

namespace h3rt {

namespace {

void check_weight(const std::string& layer, const Tensor& w) {
  H3RT_CHECK(w.dim() == 2 && (w.dtype() == DType::bf16 || w.dtype() == DType::f32), "layer '",
             layer, "': expected a 2-D bf16 or f32 weight, got ", dtype_name(w.dtype()), " ",
             shape_str(w.shape()));
}

Tensor bytes_as(const Tensor& t, DType dtype) {
  Tensor out = Tensor::zeros(dtype, t.shape());
  std::memcpy(out.data(), t.contiguous_copy().data(), static_cast<size_t>(t.nbytes()));
  return out;
}

// Short layer kinds (the CLI's --layers) and their key suffixes inside a block.
const std::map<std::string, std::string>& layer_kinds() {
  static const std::map<std::string, std::string> kinds = {
      {"qkv", "attn.qkv_proj"}, {"out", "attn.out_proj"}, {"fc1", "mlp.fc1"}, {"fc2", "mlp.fc2"}};
  return kinds;
}

// The AdaLN layers ("adaln"): each transformer block's and the final layer's (as an unpruned
// int8 release file stores them); the refiner blocks have none.
constexpr const char* kAdalnSuffix = "adaln_proj.linear";
constexpr const char* kFinalAdaln = "final_layer.adaln_proj.linear";

bool is_adaln(const std::string& layer) {
  return layer.ends_with(kAdalnSuffix);
}

// The layers around the blocks ("io"): the patch projections and condition_proj, then the heads
// (a PDD bank's heads are combined in float32 each step, so a bank is not quantized).
std::vector<std::string> io_layers(const H3Config& c) {
  std::vector<std::string> v = {"video_patch_proj", "audio_patch_proj", "condition_proj"};
  if (c.pdd_heads == 1) v.insert(v.end(), {"final_layer.video_out", "final_layer.audio_out"});
  return v;
}

bool is_io(const H3Config& c, const std::string& layer) {
  const std::vector<std::string> v = io_layers(c);
  return std::find(v.begin(), v.end(), layer) != v.end();
}

// The chosen layers of every refiner block and block, in file order of blocks (the final
// AdaLN last).
std::vector<std::string> chosen_layers(const H3Config& c, const std::vector<std::string>& kinds) {
  std::vector<std::string> suffixes;
  bool adaln = false, io = false;
  for (const auto& k : kinds) {
    if (k == "io") {
      io = true;
      continue;
    }
    if (k == "adaln") {
      H3RT_CHECK(!c.adaln_curve(),
                 "quantize-checkpoint: layer kind 'adaln' needs the full AdaLN (this "
                 "checkpoint has the curve form, whose AdaLN stays float32)");
      adaln = true;
      continue;
    }
    auto it = layer_kinds().find(k);
    H3RT_CHECK(it != layer_kinds().end(), "quantize-checkpoint: unknown layer kind '", k,
               "' (expected qkv, out, fc1, fc2, adaln or io)");
    suffixes.push_back(it->second);
  }
  std::vector<std::string> layers;
  if (io) layers = io_layers(c);
  auto add_block = [&](const std::string& prefix, bool with_adaln) {
    for (const auto& s : suffixes) layers.push_back(prefix + s);
    if (with_adaln) layers.push_back(prefix + kAdalnSuffix);
  };
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    add_block("token_refiner.blocks." + std::to_string(i) + ".", false);
  for (int64_t i = 0; i < c.layers; ++i) add_block("blocks." + std::to_string(i) + ".", adaln);
  if (adaln) layers.push_back(kFinalAdaln);
  return layers;
}

bool kept(const std::string& layer, const std::string& entry) {
  return layer == entry || layer.rfind(entry + ".", 0) == 0;
}

std::string describe(const Tensor& w) {
  return shape_str(w.shape()) + " " + dtype_name(w.dtype());
}

}  // namespace

Tensor comfy_quant_marker(const std::string& format) {
  const std::string text = nlohmann::json{{"format", format}}.dump();
  Tensor t = Tensor::zeros(DType::u8, {static_cast<int64_t>(text.size())});
  std::memcpy(t.data(), text.data(), text.size());
  return t;
}

NamedTensors quantize_linear_nvfp4(const std::string& layer, const Tensor& w) {
  check_weight(layer, w);
  H3RT_CHECK(w.size(1) % 16 == 0, "layer '", layer, "' ", shape_str(w.shape()), " has ", w.size(1),
             " input features; nvfp4 needs a multiple of 16");
  const float g = nvfp4_global_scale(w, Nvfp4ScaleRule::kF32Divide);
  H3RT_CHECK(std::isfinite(g), "layer '", layer, "': the weight holds non-finite values");
  const Nvfp4Tensor q = nvfp4_quantize(w, g);
  return {{layer + ".weight", q.qdata},
          {layer + ".weight_scale", bytes_as(q.scales, DType::e4m3)},
          {layer + ".weight_scale_2", tensor_from_f32({g}, {})},
          {layer + ".comfy_quant", comfy_quant_marker(kComfyNvfp4)}};
}

NamedTensors quantize_linear_fp8(const std::string& layer, const Tensor& w) {
  check_weight(layer, w);
  const float amax = abs_max(w);
  H3RT_CHECK(std::isfinite(amax), "layer '", layer, "': the weight holds non-finite values");
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  const std::vector<float> v = w.to_f32();
  Tensor q = Tensor::zeros(DType::e4m3, w.shape());
  uint8_t* qp = q.ptr<uint8_t>();
  for (size_t i = 0; i < v.size(); ++i) qp[i] = f32_to_e4m3_satfinite(v[i] / s);
  return {{layer + ".weight", q},
          {layer + ".weight_scale", tensor_from_f32({s}, {})},
          {layer + ".comfy_quant", comfy_quant_marker(kComfyFp8)}};
}

NamedTensors quantize_linear_int8(const std::string& layer, const Tensor& w, int64_t group) {
  check_weight(layer, w);
  H3RT_CHECK(group == 0 || (convrot_group_valid(group) && w.size(1) % group == 0), "layer '", layer,
             "' ", shape_str(w.shape()), ": convrot group size ", group,
             " must be a power of 4 dividing its ", w.size(1), " input features");
  H3RT_CHECK(std::isfinite(abs_max(w)), "layer '", layer, "': the weight holds non-finite values");
  const Int8Rows q = int8_quantize_rows(w, group);
  nlohmann::json marker{{"format", kComfyInt8}};
  if (group > 0) {
    marker["convrot"] = true;
    marker["convrot_groupsize"] = group;
  }
  const std::string text = marker.dump();
  Tensor m = Tensor::zeros(DType::u8, {static_cast<int64_t>(text.size())});
  std::memcpy(m.data(), text.data(), text.size());
  return {
      {layer + ".weight", q.q}, {layer + ".weight_scale", q.scale}, {layer + ".comfy_quant", m}};
}

QuantizeCheckpointReport quantize_checkpoint(const std::string& in_path,
                                             const std::string& out_path,
                                             const QuantizeCheckpointOptions& o) {
  H3RT_CHECK(o.format == WeightFormat::nvfp4 || o.format == WeightFormat::fp8_scaled ||
                 o.format == WeightFormat::int8,
             "quantize-checkpoint: the target format must be nvfp4, fp8_scaled or int8, got ",
             weight_format_name(o.format));
  for (const char* kind : {"adaln", "io"})
    H3RT_CHECK(o.format == WeightFormat::int8 ||
                   std::find(o.layers.begin(), o.layers.end(), kind) == o.layers.end(),
               "quantize-checkpoint: layer kind '", kind,
               "' is quantized to int8 only (the CUDA backend runs those int8 layers as W8A8 "
               "GEMMs), not ",
               weight_format_name(o.format));
  const SafetensorsFile f = SafetensorsFile::open(in_path);
  const H3Config c = infer_config(f);
  model::TensorSource src;  // with _quantization_metadata turned into markers
  model::add_source_file(src, f, QkvLayout::autodetect);

  const std::vector<std::string> layers = chosen_layers(c, o.layers);
  for (const auto& entry : o.keep) {
    bool used = false;
    for (const auto& l : layers) used = used || kept(l, entry);
    H3RT_CHECK(used, "quantize-checkpoint: keep entry '", entry, "' matches none of the ",
               layers.size(), " chosen layers (e.g. '", layers.front(), "' or 'blocks.0')");
  }

  const auto group_of = [&](const std::string& layer) {
    if (is_adaln(layer) && o.adaln_int8_group >= 0) return o.adaln_int8_group;
    if (is_io(c, layer) && o.io_int8_group >= 0) return o.io_int8_group;
    return o.int8_group;
  };
  QuantizeCheckpointReport report;
  std::map<std::string, NamedTensors> replaced;  // "<layer>.weight" -> the quantized tensors
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string& layer = layers[i];
    auto w = src.find(layer + ".weight");
    H3RT_CHECK(w != src.end(), in_path, ": layer '", layer, "' has no weight tensor");
    const Tensor& t = w->second.tensor;
    bool keep = false;
    for (const auto& entry : o.keep) keep = keep || kept(layer, entry);
    const std::string head =
        detail::concat("[", i + 1, "/", layers.size(), "] ", layer, " ", describe(t));
    if (keep) {
      if (o.progress) o.progress(head + ": kept");
      ++report.kept;
      continue;
    }
    for (const auto& s : model::quantized_aux_suffixes())
      H3RT_CHECK(!src.count(layer + s), in_path, ": layer '", layer,
                 "' is already quantized ("
                 "it has '",
                 layer + s, "'); pass a checkpoint with bf16/f32 linears");
    H3RT_CHECK(!(o.format != WeightFormat::fp8_scaled && layer.ends_with(".qkv_proj") &&
                 w->second.qkv_layout == QkvLayout::per_head_interleaved),
               in_path,
               ": qkv_proj rows are per-head interleaved; a quantized qkv_proj needs fused "
               "[q; k; v] rows (reorder the checkpoint first)");
    if (o.progress) o.progress(head + " -> " + weight_format_name(o.format));
    replaced[layer + ".weight"] = o.format == WeightFormat::nvfp4 ? quantize_linear_nvfp4(layer, t)
                                  : o.format == WeightFormat::int8
                                      ? quantize_linear_int8(layer, t, group_of(layer))
                                      : quantize_linear_fp8(layer, t);
    ++report.quantized;
  }

  NamedTensors out;
  for (const auto& e : f.entries()) {
    report.in_bytes += e.end - e.begin;
    auto r = replaced.find(e.name);
    if (r == replaced.end()) {
      out.emplace_back(e.name, f.get(e.name));
      continue;
    }
    for (const auto& nt : r->second) out.push_back(nt);
  }
  for (const auto& [name, t] : out) report.out_bytes += t.nbytes();
  write_safetensors(out_path, out, f.metadata());
  return report;
}

}  // namespace h3rt
