// Synthetic LoRAs of a config's shapes and LoRA files written in ComfyUI's key form (h3rt/lora.h):
// what `h3rt make-lora` writes and `h3rt bench lora-merge` merges.
#include <cmath>

#include "h3rt/lora.h"
#include "model/weights.h"

namespace h3rt {
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

// The release turbo LoRA's layer order.
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

}  // namespace

Lora make_synthetic_lora(const H3Config& c, int64_t rank, int pairs, uint64_t seed) {
  H3RT_CHECK(rank >= 1 && rank <= 4096, "LoRA rank must be in [1, 4096], got ", rank);
  H3RT_CHECK(pairs >= 1, "LoRA pairs must be >= 1, got ", pairs);
  std::map<std::string, Shape> shapes;  // "<layer>.weight" -> [out, in]
  for (const model::WeightSpec& w : model::weight_specs(c)) shapes[w.key] = w.shape;
  Lora lora{"<synthetic>", 1.0, {}, {}, nullptr};
  const std::vector<std::string> order = target_order(c);
  for (int i = 0; i < pairs && i < static_cast<int>(order.size()); ++i) {
    const auto it = shapes.find(order[i] + ".weight");
    H3RT_CHECK(it != shapes.end() && it->second.size() == 2, "synthetic LoRA: the config has no ",
               "dense layer ", order[i]);
    const int64_t out = it->second[0], in = it->second[1];
    const uint64_t k = (seed << 32) + 2 * static_cast<uint64_t>(i);
    LoraPair p;
    p.module = "diffusion_model." + order[i];
    p.target = order[i];
    p.up_key = p.module + ".lora_B.weight";
    p.down_key = p.module + ".lora_A.weight";
    p.alpha_key = p.module + ".alpha";
    p.up = hashed(out, rank, k);
    p.down = hashed(rank, in, k + 1);
    p.alpha = static_cast<double>(rank);
    lora.pairs.push_back(std::move(p));
  }
  return lora;
}

void write_lora(const std::string& path, const Lora& lora) {
  NamedTensors t;
  for (const LoraPair& p : lora.pairs) {
    t.push_back({p.up_key, p.up});
    t.push_back({p.down_key, p.down});
    if (!p.alpha_key.empty())
      t.push_back({p.alpha_key, tensor_from_f32({static_cast<float>(p.alpha)}, {})});
  }
  write_safetensors(path, t, {{"producer", "h3rt make-lora"}});
}

}  // namespace h3rt
