// `h3rt bench nvfp4-gemm`: times the NVFP4 GEMM algorithms against cuBLASLt bf16 at the seed
// shape's four projections (see src/bench/nvfp4_gemm_bench.h).
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/nvfp4_gemm_bench.h"
#endif

namespace h3rt::cli {

void add_bench_nvfp4_gemm_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("nvfp4-gemm",
                                 "Time the NVFP4 GEMMs (dequantize + cuBLASLt, Blackwell "
                                 "block-scaled) against cuBLASLt bf16 (JSON report)");
#ifdef H3RT_HAVE_CUDA
  auto opt = std::make_shared<bench::Nvfp4GemmBenchOptions>();
  cmd->add_option("--rows", opt->rows, "packed rows M")->capture_default_str();
  cmd->add_option("--hidden", opt->hidden, "hidden size (multiple of 64)")->capture_default_str();
  cmd->add_option("--inner", opt->inner, "attention width, heads x 128 (multiple of 64)")
      ->capture_default_str();
  cmd->add_option("--ffn", opt->ffn, "SwiGLU width (multiple of 64)")->capture_default_str();
  add_gemm_timing_options(*cmd, opt->warmup, opt->iters, opt->json_path);
  cmd->callback([opt] {
    if (!opt->json_path.empty()) check_output_path(opt->json_path, "--out");
    bench::run_nvfp4_gemm_bench(*opt);
  });
#else
  cmd->callback([] { H3RT_FAIL("bench nvfp4-gemm needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
