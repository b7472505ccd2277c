// `h3rt bench block`: one H3 DiT block on the GPU at a request's shape (default: the seed
// workload, 1344x768, 124 frames, 37,810 rows) with synthetic bf16 weights, reporting per
// component p50 times (CUDA events between stages), the uninstrumented block time and a CUDA
// graph replay, launches per block, peak device memory, and bytes moved per component from a
// written-down model with roofline times for this GPU and for a GB10 (273 GB/s).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace h3rt::bench {

struct BlockBenchOptions {
  bool h3_dims = true;  // false: the tiny config
  int64_t text_len = 100, audio_len = 207, frames = 37, height = 48, width = 84;  // latents
  int reps = 10, warmup = 2;
  bool fp8 = false;          // fp8 e4m3 GEMMs (per-tensor scales) instead of bf16
  bool fp8_dynamic = false;  // fp8: activation scales computed per call (amax) instead of static
  bool nvfp4 = false;        // NVFP4 W4A4 GEMMs
  bool nvfp4_static_input_scale = true;  // producers encode the input; else computed per call
  int int8_group = -1;  // >= 0: int8 W8A8 GEMMs (weights quantized on the device), this convrot
                        // group (0: no rotation)
  bool sage_attention = false;  // Sage 8-bit attention (with its pre-pass) instead of flash bf16
  uint64_t seed = 440420;
  double sustain_seconds = 0;  // > 0: also the graph back to back for about this long (energy)
};

nlohmann::json run_block_bench(const BlockBenchOptions& o);

}  // namespace h3rt::bench
