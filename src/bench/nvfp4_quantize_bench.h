// Benchmark of the NVFP4 quantize kernels at the seed activation shape (37810 x 5376 bf16):
// each variant (given g, two-pass, single launch, fast math) is timed with CUDA events per launch
// after a warm-up; inputs rotate over `buffers` distinct tensors (3 x 406 MB by default) so L2
// never holds the next input. GB/s counts unique bytes: bf16 input + qdata + scales.
#pragma once

#include <cstdint>
#include <string>

namespace h3rt::bench {

struct Nvfp4BenchOptions {
  int64_t rows = 37810;
  int64_t cols = 5376;
  int buffers = 3;
  int warmup = 5;
  int iters = 30;         // median over these
  std::string json_path;  // optional: write the results as JSON here
};

// Prints one line per variant and returns 0; throws h3rt::Error on CUDA failures.
int run_nvfp4_quantize_bench(const Nvfp4BenchOptions& opt);

}  // namespace h3rt::bench
