// `h3rt bench lora-merge` (see lora_merge_bench.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "bench/lora_merge_bench.h"
#include "cuda/arena.h"
#include "cuda/runtime.h"
#include "h3rt/lora.h"
#include "model/lora_cuda.h"
#include "model/model_cuda.h"

namespace h3rt::bench {
namespace {

// Hashed bf16 values in [-1, 1) / sqrt(cols).
Tensor hashed(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v(rows * cols);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
  const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = (static_cast<float>(s >> 40) / float(1 << 23) - 1.0f) * scale;
  }
  return tensor_from_f32(v, {rows, cols}, DType::bf16);
}

std::vector<std::string> target_order(const H3Config& c) {
  std::vector<std::string> t;
  for (int64_t i = 0; i < c.layers; ++i)
    for (const char* l :
         {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2", "adaln_proj.linear"})
      t.push_back("blocks." + std::to_string(i) + "." + l);
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    for (const char* l : {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"})
      t.push_back("token_refiner.blocks." + std::to_string(i) + "." + l);
  t.push_back("condition_proj");
  t.push_back("final_layer.adaln_proj.linear");
  return t;
}

Lora synthetic_lora(model::DeviceModel& m, const LoraMergeBenchOptions& o) {
  auto layers = model::device_linear_layers(m);
  Lora lora{"<synthetic>", 1.0, {}, {}, nullptr};
  const std::vector<std::string> order = target_order(m.config);
  for (int i = 0; i < o.pairs && i < static_cast<int>(order.size()); ++i) {
    const model::DeviceLinear& l = *layers.at(order[i]);
    LoraPair p;
    p.module = "diffusion_model." + order[i];
    p.target = order[i];
    p.up_key = p.module + ".lora_B.weight";
    p.down_key = p.module + ".lora_A.weight";
    p.alpha_key = p.module + ".alpha";
    p.up = hashed(l.out, o.rank, 2 * i);
    p.down = hashed(o.rank, l.in, 2 * i + 1);
    p.alpha = static_cast<double>(o.rank);
    lora.pairs.push_back(std::move(p));
  }
  return lora;
}

// Device-side byte comparison of two tensors (host round trip of a flag only).
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.data() == b.data()) return true;
  if (!a.data() || !b.data() || a.nbytes() != b.nbytes()) return false;
  const Tensor ha = cuda::to_host(a), hb = cuda::to_host(b);
  return std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

nlohmann::json run_lora_merge_bench(const LoraMergeBenchOptions& o) {
  const std::optional<H3Config> config = config_preset(o.preset);
  H3RT_CHECK(config, "bench lora-merge: unknown preset '", o.preset, "' (tiny or h3)");
  cuda::Stream stream;
  model::DeviceModel m = model::make_synthetic_device_model(*config, o.weights_seed);
  if (o.int8)
    for (auto* blocks : {&m.blocks, &m.refiner})
      for (model::DeviceBlock& b : *blocks)
        for (model::DeviceLinear* l : {&b.qkv, &b.out, &b.fc1, &b.fc2})
          model::convert_linear_to_int8(*l, o.group, stream);
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  const Lora lora = synthetic_lora(m, o);
  // Views of the original tensors, to check the restore (the merge moves them out and back).
  std::map<std::string, model::DeviceLinear> before;
  for (const auto& [name, l] : model::device_linear_layers(m)) before[name] = *l;
  cuda::default_arena().reset_peak();
  nlohmann::json rep = {{"preset", o.preset},
                        {"int8", o.int8},
                        {"group", o.group},
                        {"rank", o.rank},
                        {"pairs", lora.pairs.size()}};
  std::vector<double> merge_s, unmerge_s;
  for (int r = 0; r < o.reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    model::LoraMergeCuda merge = model::merge_loras_cuda(m, {lora}, {}, stream);
    H3RT_CUDA_CHECK(cudaDeviceSynchronize());
    merge_s.push_back(seconds_since(t0));
    rep["layers"] = merge.report.layers;
    t0 = std::chrono::steady_clock::now();
    model::unmerge_loras_cuda(m, merge);
    H3RT_CUDA_CHECK(cudaDeviceSynchronize());
    unmerge_s.push_back(seconds_since(t0));
    std::printf("bench lora-merge: %zu pairs into %s (%s): merge %.3f s, unmerge %.3f s\n",
                lora.pairs.size(), o.preset.c_str(), o.int8 ? "int8_convrot projections" : "bf16",
                merge_s.back(), unmerge_s.back());
  }
  bool restored = true;
  for (const auto& [name, l] : model::device_linear_layers(m)) {
    const model::DeviceLinear& b = before.at(name);
    restored = restored && same_bytes(l->w, b.w) && same_bytes(l->wi8, b.wi8) &&
               same_bytes(l->wi8_scale, b.wi8_scale);
  }
  const auto mem = cuda::default_arena().stats();
  rep["merge_s"] = merge_s;
  rep["unmerge_s"] = unmerge_s;
  rep["peak_allocated_bytes"] = mem.peak_allocated;
  rep["restored"] = restored;
  std::printf(
      "bench lora-merge: unmerge restored the weights byte for byte: %s; peak device %.1f GB\n",
      restored ? "yes" : "NO", mem.peak_allocated / 1e9);
  return rep;
}

}  // namespace h3rt::bench
