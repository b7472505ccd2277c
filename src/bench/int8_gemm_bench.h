// Benchmark of the int8 W8A8 kernels (ops/int8_linear) at the H3 block projections (N x K):
// qkv 21504 x 5376, attention out 5376 x 7168, fc1 28672 x 5376, fc2 5376 x 14336, for
// S = 37,810 rows (the seed shape) and 15,399 (864x480), without bias as in the block (H3's
// block projections have none).
//
// Per S and shape: CUDA-event time of each call after a warm-up, median over `iters`, of the
// activation rotate+quantize (group `group`), the int8 GEMM on each variant this device runs
// (every CUTLASS sm90 config of ops::kInt8CutlassConfigs, JSON key int8_cutlass_<config>;
// int8_cutlass_sm80, the mma.sync kernel that sm_120 / sm_121 run, where this device runs its
// code (a figure for this GPU, not for a GB10); and int8_cublaslt: cuBLASLt + epilogue), and side by side the fp8 e4m3 cuBLASLt GEMM
// (linear_fp8_cuda) and cuBLASLt bf16 on the same shape. Operands are synthetic hashed bf16,
// quantized on the GPU. Prints a table (ms per variant, the fastest int8 variant and its ratio
// to fp8) and returns the report (per shape also the config kAuto's table picks today).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3rt::bench {

struct Int8GemmBenchOptions {
  std::vector<int64_t> rows = {37810, 15399};
  int64_t hidden = 5376;
  int64_t qkv_out = 21504;
  int64_t inner = 7168;  // heads x head_dim
  int64_t ffn = 14336;
  int group = 256;
  int warmup = 3;
  int iters = 10;
  std::string json_path;
};

nlohmann::json run_int8_gemm_bench(const Int8GemmBenchOptions& opt);

}  // namespace h3rt::bench
