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
  cuda::require_cuda_device("bench lora-merge");
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
  const Lora lora = make_synthetic_lora(m.config, o.rank, o.pairs);
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
