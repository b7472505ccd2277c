// Sweep of cuBLASLt's algorithms at the H3 block projections (#18: "GEMMs at the floor"): for
// qkv 21504 x 5376, out 5376 x 7168, fc1 28672 x 5376 and fc2 5376 x 14336 (N x K), at each S
// (default 37,810 rows, the seed shape and 1344x768, and 15,499, 864x480), for bf16 and fp8 e4m3
// operands with the block's epilogue (no bias: H3's block projections have none; bf16 output,
// per-tensor scales for fp8, no fast accumulation), every algorithm cuBLASLt's heuristic offers (up
// to `max_algos`, best first) is run and timed: CUDA events around each call after a warm-up, the
// median of `iters`. "default" is what h3rt runs (Gemm::algo 0: index 0, or a configuration
// preferred for the shape and GPU, timed separately); the report gives, per shape, its time, the
// fastest index, that algorithm's configuration (cuBLASLt's algo id, tile, stages, split-K and its
// reduction scheme: 1 and 4 reduce in bf16, less exact than one float32 accumulation, swizzle,
// cluster) and the ratio, and per (S, kind) the totals of the four shapes. Operands are synthetic
// hashed values (fp8: quantized from them with scale 1). Algorithms that refuse to run are listed
// as such. The int8 GEMMs have their own sweep (bench int8-gemm: CUTLASS configs and cuBLASLt).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3rt::bench {

struct GemmAlgosBenchOptions {
  std::vector<int64_t> rows = {37810, 15499};
  std::vector<std::string> kinds = {"fp8", "bf16"};
  int64_t hidden = 5376, inner = 7168, ffn = 14336;
  int max_algos = 16;
  int warmup = 2;
  int iters = 7;
  std::string json_path;
};

// Runs on the current CUDA device; prints a table and returns the report.
nlohmann::json run_gemm_algos_bench(const GemmAlgosBenchOptions& opt);

}  // namespace h3rt::bench
