// `h3rt bench nvfp4-fusion`: fused NVFP4 producers vs "producer writes bf16, then
// nvfp4_quantize" at the seed shape (S = 37,810, H = 5376, 56 heads x 128, F = 14336), for
// rmsnorm_modulate (norm1 -> qkv), the fused residual + rmsnorm_modulate (norm2 -> fc1), swiglu
// (-> fc2) with a given and a computed global scale, swiglu's silu table kernel (given scale),
// and the flash and Sage attention epilogues (-> out_proj, given scale only; Sage timed with its
// pre-pass). Each sequence is timed with CUDA events as a whole (median of `iters` after
// `warmup`); the bf16-only producer, the unfused and the fused sequence are timed interleaved,
// one run of each per iteration, so clock and temperature drift during the measurement affects
// all three alike. Every activation tensor is hundreds of MB (far above L2), so no rotation is
// needed. After timing, the fused and unfused NVFP4 bytes of the same inputs are compared
// (qdata, scales, g) and the result is reported. The byte model of src/bench/nvfp4_fusion_bytes.h
// is included in the JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

struct Nvfp4FusionBenchOptions {
  int64_t rows = 37810, hidden = 5376, heads = 56, ffn = 14336;
  int warmup = 2;
  int iters = 10;
  int attention_iters = 3;  // the attention runs are ~100x longer
  bool attention = true;
};

// Prints a table and returns the results; throws h3rt::Error on CUDA failures.
nlohmann::json run_nvfp4_fusion_bench(const Nvfp4FusionBenchOptions& opt);

}  // namespace h3rt::bench
