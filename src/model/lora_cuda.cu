// LoRA merge on the GPU (model/lora_cuda.h): per layer, the working values in f32, each pair's
// delta added in list order, then the layer stored again (bf16/f32 rounded; int8 through the
// row quantizer), exactly as the host merge computes it.
#include <cuda_bf16.h>

#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "model/lora_cuda.h"
#include "model/lora_internal.h"
#include "model/weights.h"
#include "ops/int8_linear/int8_linear.h"
#include "ops/lora_merge/lora_merge.h"

namespace h3rt::model {

std::map<std::string, DeviceLinear*> device_linear_layers(DeviceModel& m) {
  std::map<std::string, DeviceLinear*> out;
  out["video_patch_proj"] = &m.video_in;
  out["audio_patch_proj"] = &m.audio_in;
  out["condition_proj"] = &m.text_in;
  out["final_layer.adaln_proj.linear"] = &m.final_adaln;
  out["final_layer.video_out"] = &m.video_out;
  out["final_layer.audio_out"] = &m.audio_out;
  auto block = [&](const std::string& p, DeviceBlock& b, bool adaln) {
    out[p + "attn.qkv_proj"] = &b.qkv;
    out[p + "attn.out_proj"] = &b.out;
    out[p + "mlp.fc1"] = &b.fc1;
    out[p + "mlp.fc2"] = &b.fc2;
    if (adaln) out[p + "adaln_proj.linear"] = &b.adaln;
  };
  for (size_t i = 0; i < m.refiner.size(); ++i)
    block("token_refiner.blocks." + std::to_string(i) + ".", m.refiner[i], false);
  for (size_t i = 0; i < m.blocks.size(); ++i)
    block("blocks." + std::to_string(i) + ".", m.blocks[i], true);
  return out;
}

namespace {

// A LoRA matrix as device f32 values.
Tensor device_f32(const Tensor& host, cudaStream_t s) {
  const Tensor c = host.is_contiguous() ? host : host.contiguous_copy();
  const Tensor raw = cuda::to_device(c, s);
  Tensor f = cuda::device_empty(DType::f32, c.shape());
  H3RT_CUDA_CHECK(ops::lora_to_f32_cuda(raw.data(), c.dtype(), f.ptr<float>(), c.numel(), s));
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // `raw` returns to the arena
  return f;
}

void check_mergeable(const std::string& name, const DeviceLinear& l, const H3Config& c) {
  H3RT_CHECK(!l.fp8() && !l.nvfp4(), "LoRA: layer '", name,
             "' is fp8/nvfp4 on the GPU; the GPU merge takes bf16, f32 and int8 layers (merge on "
             "the host: load the checkpoint file)");
  H3RT_CHECK(l.int8() || (l.w.data() && (l.w.dtype() == DType::bf16 || l.w.dtype() == DType::f32)),
             "LoRA: layer '", name, "' holds no bf16/f32/int8 weight on the GPU",
             c.pdd_heads > 1 ? " (PDD head banks stay on the host)" : "");
}

// The merged copy of `l` (new tensors; `l` untouched).
DeviceLinear merge_layer(const DeviceLinear& l, const LoraLayerPlan& plan, cudaStream_t s) {
  Tensor w = cuda::device_empty(DType::f32, {l.out, l.in});
  if (l.int8())
    H3RT_CUDA_CHECK(ops::lora_working_values_cuda(l.wi8.data(), DType::i8, l.wi8_scale.ptr<float>(),
                                                  w.ptr<float>(), l.out, l.in, s));
  else
    H3RT_CUDA_CHECK(ops::lora_working_values_cuda(l.w.data(), l.w.dtype(), nullptr, w.ptr<float>(),
                                                  l.out, l.in, s));
  const int group = l.int8() ? l.int8_group : 0;
  for (const auto& [pair, scale] : plan.pairs) {
    const Tensor up = device_f32(pair->up, s);
    Tensor down = device_f32(pair->down, s);
    if (group > 0) {
      Tensor rot = cuda::device_empty(DType::f32, down.shape());
      H3RT_CUDA_CHECK(ops::lora_rotate_rows_cuda(down.ptr<float>(), rot.ptr<float>(), down.size(0),
                                                 down.size(1), group, s));
      down = rot;
    }
    H3RT_CUDA_CHECK(ops::lora_add_delta_cuda(w.ptr<float>(), l.out, l.in, up.ptr<float>(),
                                             down.ptr<float>(), pair->rank(), scale, s));
    H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // up/down return to the arena
  }
  DeviceLinear n = l;
  if (!l.int8()) {
    n.w = cuda::device_empty(l.w.dtype(), {l.out, l.in});
    H3RT_CUDA_CHECK(ops::lora_store_cuda(w.ptr<float>(), n.w.data(), l.w.dtype(), l.out * l.in, s));
  } else {
    Tensor x = cuda::device_empty(DType::bf16, {l.out, l.in});
    H3RT_CUDA_CHECK(ops::lora_store_cuda(w.ptr<float>(), x.data(), DType::bf16, l.out * l.in, s));
    n.wi8 = cuda::device_empty(DType::i8, {l.out, l.in});
    n.wi8_scale = cuda::device_empty(DType::f32, {l.out});
    ops::Int8QuantizeCudaParams q;
    q.x = x.ptr<__nv_bfloat16>();
    q.q = n.wi8.ptr<int8_t>();
    q.scale = n.wi8_scale.ptr<float>();
    q.rows = l.out;
    q.k = l.in;
    q.group = 0;  // the working values are already in the stored (rotated) basis
    H3RT_CUDA_CHECK(ops::int8_quantize_rows_cuda(q, s));
  }
  H3RT_CUDA_CHECK(cudaStreamSynchronize(s));  // the scratch returns to the arena
  return n;
}

}  // namespace

namespace {

void refuse_host_side_targets(const std::vector<Lora>& loras) {
  for (const Lora& lora : loras)
    for (const LoraPair& p : lora.pairs)
      H3RT_CHECK(p.target.rfind("time_embedder.", 0) != 0, "LoRA ", lora.path, ": '", p.up_key,
                 "' targets ", p.target,
                 ", which the CUDA backend runs on the host; merge it on the host (load the "
                 "checkpoint file)");
}

// Merges the planned layers found in `layers` in place (the originals are dropped).
void merge_found(const LoraPlan& plan, const std::map<std::string, DeviceLinear*>& layers,
                 const H3Config& c, cudaStream_t s) {
  for (const LoraLayerPlan& lp : plan.layers) {
    auto it = layers.find(lp.layer);
    if (it == layers.end()) continue;
    check_mergeable(lp.layer, *it->second, c);
    *it->second = merge_layer(*it->second, lp, s);
  }
}

}  // namespace

LoraMergeCuda merge_loras_cuda(DeviceModel& m, const std::vector<Lora>& loras,
                               const LoraOptions& options, cudaStream_t s) {
  std::map<std::string, DeviceLinear*> layers = device_linear_layers(m);
  refuse_host_side_targets(loras);
  const LoraPlan plan =
      plan_loras(m.config, loras, options,
                 [&](const std::string& name) -> std::optional<std::pair<int64_t, int64_t>> {
                   auto it = layers.find(name);
                   if (it == layers.end()) return std::nullopt;
                   return std::make_pair(it->second->out, it->second->in);
                 });
  for (const LoraLayerPlan& lp : plan.layers)
    check_mergeable(lp.layer, *layers.at(lp.layer), m.config);
  LoraMergeCuda merge;
  merge.report = plan.report;
  for (const LoraLayerPlan& lp : plan.layers) {
    DeviceLinear& l = *layers.at(lp.layer);
    DeviceLinear merged = merge_layer(l, lp, s);
    merge.saved.emplace_back(lp.layer, std::move(l));
    l = std::move(merged);
  }
  return merge;
}

BlockwiseLoraMergeCuda::BlockwiseLoraMergeCuda(const H3Config& c, std::vector<Lora> loras,
                                               const LoraOptions& options)
    : loras_(std::move(loras)), config_(c) {
  refuse_host_side_targets(loras_);
  // The device model's layers (device_linear_layers) are the config's 2-D weights but the
  // host-side time embedder.
  std::map<std::string, std::pair<int64_t, int64_t>> shapes;
  for (const WeightSpec& w : weight_specs(c))
    if (w.shape.size() == 2 && w.key.ends_with(".weight") && w.key.rfind("time_embedder.", 0) != 0)
      shapes[w.key.substr(0, w.key.size() - 7)] = {w.shape[0], w.shape[1]};
  plan_ = plan_loras(c, loras_, options,
                     [&](const std::string& name) -> std::optional<std::pair<int64_t, int64_t>> {
                       auto it = shapes.find(name);
                       if (it == shapes.end()) return std::nullopt;
                       return it->second;
                     });
}

void BlockwiseLoraMergeCuda::merge_block(size_t i, DeviceBlock& b, cudaStream_t s) {
  const std::string p = "blocks." + std::to_string(i) + ".";
  merge_found(plan_,
              {{p + "attn.qkv_proj", &b.qkv},
               {p + "attn.out_proj", &b.out},
               {p + "mlp.fc1", &b.fc1},
               {p + "mlp.fc2", &b.fc2},
               {p + "adaln_proj.linear", &b.adaln}},
              config_, s);
}

void BlockwiseLoraMergeCuda::merge_rest(DeviceModel& m, cudaStream_t s) {
  std::map<std::string, DeviceLinear*> layers = device_linear_layers(m);
  std::erase_if(layers, [](const auto& kv) { return kv.first.rfind("blocks.", 0) == 0; });
  merge_found(plan_, layers, config_, s);
}

void unmerge_loras_cuda(DeviceModel& m, LoraMergeCuda& merge) {
  std::map<std::string, DeviceLinear*> layers = device_linear_layers(m);
  for (auto& [name, saved] : merge.saved) *layers.at(name) = std::move(saved);
  merge.saved.clear();
  merge.report = {};
}

}  // namespace h3rt::model
