// Deterministic synthetic weights, so the model runs with no checkpoint.
//
// Element e of tensor number k (its index in weight_specs order) is drawn from a counter-based
// hash: u = splitmix64(splitmix64(seed ^ splitmix64(k)) + e), mapped to a uniform value in
// [-1, 1) from its top 24 bits. Then, by key:
//   - linear weights and biases: u / sqrt(fan_in) (fan_in = the weight's input width),
//   - norm weights: 1 + 0.1 u (near the identity, as trained RMSNorm gains are),
//   - rope.inv_freq: the formula's exact float32 values (it is not a free parameter).
// Tensors the release stores as bf16 are rounded to bf16, so fp32 and bf16 runs see the same
// values, as with a real checkpoint. The result goes through the checkpoint assembly, so it is
// validated like a file.
#include <cmath>

#include "h3rt/formats.h"
#include "model/weights.h"
#include "ops/rope_table/rope_table.h"
#include "core/host_device.h"

namespace h3rt {

namespace {

float uniform_pm1(uint64_t h) {
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Tensor synth_tensor(const model::WeightSpec& spec, uint64_t seed, uint64_t k, int64_t fan_in,
                    const H3Config& c) {
  const int64_t n = shape_numel(spec.shape);
  std::vector<float> v(n);
  if (spec.key == "rope.inv_freq") {
    v = ops::rope_inv_freq(c.rope_freqs, c.rope_theta);
  } else {
    // The only 1-D ".weight" tensors are RMSNorm gains.
    const bool norm = spec.shape.size() == 1 && ends_with(spec.key, ".weight");
    const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
    const uint64_t base = splitmix64(seed ^ splitmix64(k));
    for (int64_t e = 0; e < n; ++e) {
      const float u = uniform_pm1(splitmix64(base + static_cast<uint64_t>(e)));
      v[e] = norm ? 1.0f + 0.1f * u : u * scale;
    }
  }
  return tensor_from_f32(v, spec.shape, spec.dtype);  // bf16 storage rounds (RNE)
}

}  // namespace

NamedTensors synthetic_checkpoint(const H3Config& config, uint64_t seed) {
  config.validate();
  const auto specs = model::weight_specs(config);
  NamedTensors out;
  int64_t fan_in = 1;
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto& s = specs[k];
    if (s.shape.size() == 2) fan_in = s.shape[1];  // a bias follows its weight
    out.emplace_back(s.key, synth_tensor(s, seed, k, fan_in, config));
  }
  return out;
}

H3Model make_synthetic_model(const H3Config& config, uint64_t seed) {
  model::TensorSource src;
  for (auto& [key, t] : synthetic_checkpoint(config, seed))
    src[key] = {std::move(t), "<synthetic>", QkvLayout::fused_thirds};
  return {config, model::assemble_weights(config, src)};
}

WeightBytes estimate_weight_bytes(const H3Config& config) {
  WeightBytes b;
  for (const auto& s : model::weight_specs(config)) {
    const int64_t n = shape_numel(s.shape);
    b.params += n;
    b.stored_bytes += n * dtype_size(s.dtype);
  }
  b.cpu_bytes = b.stored_bytes + 4 * b.params;
  return b;
}

}  // namespace h3rt
