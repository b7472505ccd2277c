// `h3rt bench lora-merge`: the GPU LoRA merge (model/lora_cuda.h) into a synthetic model of a
// preset's dimensions generated on the GPU, its block projections converted to int8_convrot
// (group `group`) unless `int8` is off. The LoRA is synthetic too (hashed bf16 values, rank
// `rank`, alpha = rank) over the first `pairs` layers in the order: every block's qkv, out,
// fc1, fc2 and AdaLN, the refiner blocks' four projections, condition_proj, the final AdaLN
// (the release's turbo LoRA shape: 50 x 5 + 2 x 4 + 1 = 259 pairs). Per repetition: merge
// (host-to-device copies of the LoRA matrices included) and unmerge, wall seconds after a
// device synchronize; then a check that every layer holds its original tensors again (the
// unmerge moves them back; a layer whose buffers differ is compared byte for byte). JSON: preset,
// pairs, layers, rank, group, merge_s / unmerge_s per repetition, peak device bytes, restored
// (bool).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

struct LoraMergeBenchOptions {
  std::string preset = "h3";
  bool int8 = true;
  int group = 256;
  int64_t rank = 64;
  int pairs = 259;
  int reps = 2;
  uint64_t weights_seed = 0;
};

nlohmann::json run_lora_merge_bench(const LoraMergeBenchOptions& o);

}  // namespace h3rt::bench
