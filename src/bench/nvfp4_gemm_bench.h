// Benchmark of the NVFP4 GEMMs at the seed shape: M = 37,810 packed rows against the four H3
// projections (N x K): qkv 21504 x 5376, attention out 5376 x 7168, fc1 28672 x 5376,
// fc2 5376 x 14336 (hidden 5376, inner 56 x 128 = 7168, ffn 14336), all with a bf16 bias.
//
// Per shape and algorithm: CUDA-event time of each call after a warm-up, median over `iters`.
// Algorithms: cuBLASLt bf16 (the speed reference, bf16 W and A), kDequantCublas W4A4 and W4A16,
// and kBlockScaledSm100 W4A4 where it runs on this device (else recorded as not supported). The NVFP4 operands come from our GPU quantizer applied to the same
// synthetic bf16 data. The dequantization kernel is also timed alone (weights and activations).
// Totals per algorithm over the four shapes and their ratio to the bf16 total.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace h3rt::bench {

struct Nvfp4GemmBenchOptions {
  int64_t rows = 37810;
  int64_t hidden = 5376;
  int64_t inner = 7168;  // heads x head_dim
  int64_t ffn = 14336;
  int warmup = 3;
  int iters = 10;         // median over these
  std::string json_path;  // optional: write the report here
};

// Prints one line per shape and algorithm; returns the report. Throws h3rt::Error on failures.
nlohmann::json run_nvfp4_gemm_bench(const Nvfp4GemmBenchOptions& opt);

}  // namespace h3rt::bench
