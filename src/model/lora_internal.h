// Internal: the plan of a LoRA merge (which pairs go into which layer, what does not fit) and
// its two arithmetic steps (h3rt/lora.h), shared by the host merge and the GPU merge.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "h3rt/lora.h"
#include "h3rt/tensor.h"

namespace h3rt::model {

struct LoraLayerPlan {
  std::string layer;
  std::vector<std::pair<const LoraPair*, float>> pairs;  // with their scales, in list order
};
struct LoraPlan {
  std::vector<LoraLayerPlan> layers;  // in the order of their first pair
  LoraMergeReport report;             // pairs, layers, warnings (nothing merged yet)
};
// {out, in} of a model layer, or nullopt when the model has no such layer.
using LayerShape = std::function<std::optional<std::pair<int64_t, int64_t>>(const std::string&)>;
// Matches every pair to its layer; pairs that do not fit are one Error listing them all, or
// warnings under options.skip_unmatched.
LoraPlan plan_loras(const H3Config& config, const std::vector<Lora>& loras,
                    const LoraOptions& options, const LayerShape& shape_of);

// A' = the down matrix A [rank, in] as f32 values, rotated per group of `group` columns exactly
// as hadamard_rotate_rows does (group 0: A unchanged).
std::vector<float> lora_down_in_basis(const Tensor& down, int64_t group);

// w[o][i] = w[o][i] + scale * D[o][i] with D the f32 FMA chain over r ascending of
// up[o][r] * down[r][i] (up [out, rank], down [rank, in], w [out, in] row-major).
void add_lora_delta(float* w, int64_t out, int64_t in, const std::vector<float>& up,
                    const std::vector<float>& down, int64_t rank, float scale);

}  // namespace h3rt::model
