// LoRA merge into a loaded model's linear layers and the exact restore (h3rt/lora.h). Compiled
// with -ffp-contract=off: the delta's multiply and add are separate roundings by definition.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/parallel.h"
#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "h3rt/int8.h"
#include "h3rt/lora.h"
#include "h3rt/nvfp4.h"
#include "h3rt/quantize.h"
#include "model/lora_internal.h"
#include "model/weights.h"

namespace h3rt {

std::map<std::string, LinearWeight*> linear_layers(H3Weights& w) {
  std::map<std::string, LinearWeight*> m;
  auto add = [&](LinearWeight& l) {
    if (!l.name.empty()) m[l.name] = &l;
  };
  for (LinearWeight* l : {&w.video_in, &w.audio_in, &w.text_in, &w.time_in, &w.time_out,
                          &w.final_adaln, &w.video_out, &w.audio_out})
    add(*l);
  for (auto& b : w.refiner)
    for (LinearWeight* l : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2}) add(*l);
  for (auto& b : w.blocks)
    for (LinearWeight* l : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2, &b.adaln}) add(*l);
  return m;
}

namespace {

// The layer's working values (h3rt/lora.h): q * s for int8 (the stored basis), else `w`.
std::vector<float> working_values(const LinearWeight& l) {
  // Quantized bytes a CUDA model uses in place from the caller's device memory: merged on a
  // host copy (the merged layer is h3rt's own, as every merged layer is). bf16 and fp8 layers
  // are copied by dense_weight.
  if (l.data.device() == Device::cuda &&
      (l.format == WeightFormat::int8 || l.format == WeightFormat::nvfp4)) {
    LinearWeight h = l;  // no f32 copy to duplicate: w stays empty for a layer used in place
    h.data = model::host_copy(l.data, l.name + ".weight", "a LoRA merges into this layer");
    return working_values(h);
  }
  if (l.format != WeightFormat::int8) {
    const FloatVec& w = dense_weight(l);
    return std::vector<float>(w.begin(), w.end());
  }
  const Tensor q = l.data.contiguous_copy();
  const std::vector<float> s = int8_row_scales(l.scale, l.out);
  std::vector<float> v(static_cast<size_t>(l.out * l.in));
  for (int64_t r = 0; r < l.out; ++r)
    for (int64_t c = 0; c < l.in; ++c) v[r * l.in + c] = q.ptr<int8_t>()[r * l.in + c] * s[r];
  return v;
}

FloatVec float_vec(const std::vector<float>& v) {
  return FloatVec(v.begin(), v.end());
}

// A new layer with `l`'s identity (name, shapes, bias, input_scale, flags) and no weight.
LinearWeight same_layer(const LinearWeight& l) {
  LinearWeight n;
  n.name = l.name;
  n.format = l.format;
  n.out = l.out;
  n.in = l.in;
  n.input_scale = l.input_scale;
  n.bias_data = l.bias_data;
  n.b = l.b;
  n.fp8_dynamic_activations = l.fp8_dynamic_activations;
  n.int8_group = l.int8_group;
  return n;
}

// Stores the merged working values `v` in `l`'s format (h3rt/lora.h); a float layer keeps f32
// values beside its stored dtype only when `dense` (the model was loaded with dense copies).
LinearWeight store(const LinearWeight& l, const std::vector<float>& v, bool dense) {
  LinearWeight n = same_layer(l);
  const Tensor merged = tensor_from_f32(v, {l.out, l.in});
  switch (l.format) {
    case WeightFormat::int8: {
      const Int8Rows q = l.scale.numel() == 1 && l.scale.dim() <= 1 ? int8_quantize_tensor(merged)
                                                                    : int8_quantize_rows(merged, 0);
      n.data = q.q;
      n.scale = q.scale;
      return n;  // quantized layers: dense values on demand (dense_weight)
    }
    case WeightFormat::fp8_scaled: {
      const NamedTensors q = quantize_linear_fp8(l.name, merged);
      n.data = q.at(0).second;
      n.scale = q.at(1).second;
      return n;
    }
    case WeightFormat::nvfp4: {
      const NamedTensors q = quantize_linear_nvfp4(l.name, merged);
      n.data = q.at(0).second;
      n.scale = q.at(1).second;
      n.scale_2 = q.at(2).second;
      return n;
    }
    default:  // float layers keep their stored dtype (curve-form AdaLN may be f16)
      n.data = tensor_from_f32(v, {l.out, l.in}, l.data.dtype());
      if (dense) n.w = float_vec(n.data.to_f32());
      return n;
  }
}

LinearWeight merge_layer(const LinearWeight& l, const model::LoraLayerPlan& plan) {
  const bool dense = !l.w.empty();  // before working_values fills it
  std::vector<float> v = working_values(l);
  if (!dense) FloatVec().swap(l.w);  // the saved original stays without its f32 copy
  const int64_t group = l.format == WeightFormat::int8 ? l.int8_group : 0;
  for (const auto& [pair, scale] : plan.pairs)
    model::add_lora_delta(v.data(), l.out, l.in, pair->up.to_f32(),
                          model::lora_down_in_basis(pair->down, group), pair->rank(), scale);
  return store(l, v, dense);
}

std::string pair_name(const Lora& lora, const LoraPair& p) {
  return detail::concat("LoRA ", lora.path, ": '", p.up_key, "' ", shape_str(p.up.shape()), " / '",
                        p.down_key, "' ", shape_str(p.down.shape()));
}

bool is_time_or_adaln(const std::string& layer) {
  return layer.rfind("time_embedder.", 0) == 0 ||
         layer.find("adaln_proj.linear") != std::string::npos;
}

// Why a pair does not fit the model, or empty when it does.
std::string misfit(const H3Config& c, const model::LayerShape& shape_of, const LoraPair& p) {
  const char* pruned_hint =
      c.adaln_curve() && is_time_or_adaln(p.target)
          ? " (this checkpoint's AdaLN is the pruned curve form: no time embedder, AdaLN linears "
            "[*, k] on the adaln_t_table row; a LoRA made for the full AdaLN does not fit it)"
          : "";
  if (p.target.empty()) return detail::concat("module '", p.module, "' names no H3 linear layer");
  const auto shape = shape_of(p.target);
  if (!shape)
    return detail::concat("targets layer '", p.target, "', which this checkpoint does not have",
                          pruned_hint);
  const auto [out, in] = *shape;
  if (p.up.size(0) == out && p.down.size(1) == in) return {};
  return detail::concat("does not fit layer '", p.target, "' [", out, ", ", in,
                        "] (expected lora_up/B [", out, ", rank] and lora_down/A [rank, ", in, "])",
                        pruned_hint);
}

}  // namespace

namespace model {

std::vector<float> lora_down_in_basis(const Tensor& down, int64_t group) {
  std::vector<float> a = down.to_f32();
  if (group == 0) return a;
  std::vector<float> rot(a.size());
  hadamard_rotate_rows(a.data(), rot.data(), down.size(0), down.size(1), group);
  return rot;
}

void add_lora_delta(float* w, int64_t out, int64_t in, const std::vector<float>& up,
                    const std::vector<float>& down, int64_t rank, float scale) {
  const double work = static_cast<double>(out) * static_cast<double>(in) * rank;
  parallel_ranges(out, threads_for_work(work), [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(in));
    for (int64_t o = begin; o < end; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t r = 0; r < rank; ++r) {  // per element: the FMA chain over r ascending
        const float b = up[o * rank + r];
        const float* a = down.data() + r * in;
        for (int64_t i = 0; i < in; ++i) acc[i] = std::fma(b, a[i], acc[i]);
      }
      float* row = w + o * in;
      for (int64_t i = 0; i < in; ++i) {
        const float t = scale * acc[i];
        row[i] = row[i] + t;
      }
    }
  });
}

}  // namespace model

namespace model {

LoraPlan plan_loras(const H3Config& config, const std::vector<Lora>& loras,
                    const LoraOptions& options, const LayerShape& shape_of) {
  LoraPlan plan;
  std::vector<std::string> problems;
  std::map<std::string, size_t> index;  // layer -> position in plan.layers
  for (const Lora& lora : loras) {
    for (const std::string& u : lora.unsupported)
      problems.push_back("LoRA " + lora.path + ": " + u);
    for (const LoraPair& p : lora.pairs) {
      const std::string why = misfit(config, shape_of, p);
      if (!why.empty()) {
        problems.push_back(pair_name(lora, p) + " " + why);
        continue;
      }
      auto [it, fresh] = index.emplace(p.target, plan.layers.size());
      if (fresh) plan.layers.push_back({p.target, {}});
      plan.layers[it->second].pairs.emplace_back(&p, p.scale(lora.strength));
      ++plan.report.pairs;
    }
  }
  if (!problems.empty() && !options.skip_unmatched) {
    std::ostringstream os;
    os << problems.size()
       << " LoRA pair(s) or key(s) do not fit the model (--lora-skip-unmatched, or "
       << "LoraOptions::skip_unmatched, skips them with a warning):";
    for (const auto& l : problems) os << "\n  " << l;
    throw Error(os.str());
  }
  for (const auto& l : problems) plan.report.warnings.push_back("skipped " + l);
  plan.report.layers = static_cast<int>(plan.layers.size());
  return plan;
}

}  // namespace model

LoraMerge merge_loras(H3Model& model, const std::vector<Lora>& loras, const LoraOptions& options) {
  std::map<std::string, LinearWeight*> layers = linear_layers(model.weights);
  const model::LoraPlan plan =
      model::plan_loras(model.config, loras, options,
                        [&](const std::string& name) -> std::optional<std::pair<int64_t, int64_t>> {
                          auto it = layers.find(name);
                          if (it == layers.end()) return std::nullopt;
                          return std::make_pair(it->second->out, it->second->in);
                        });
  LoraMerge merge;
  merge.report = plan.report;
  for (const model::LoraLayerPlan& lp : plan.layers) {
    LinearWeight& l = *layers.at(lp.layer);
    LinearWeight merged = merge_layer(l, lp);
    merge.saved.push_back(std::move(l));
    l = std::move(merged);
  }
  return merge;
}

void unmerge_loras(H3Model& model, LoraMerge& merge) {
  std::map<std::string, LinearWeight*> layers = linear_layers(model.weights);
  for (LinearWeight& saved : merge.saved) {
    auto it = layers.find(saved.name);
    H3RT_CHECK(it != layers.end(), "unmerge: the model has no layer '", saved.name,
               "' (not the model the LoRA was merged into)");
    *it->second = std::move(saved);
  }
  merge.saved.clear();
  merge.report = {};
}

}  // namespace h3rt
