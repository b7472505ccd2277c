// `h3rt bench-quantize-nvfp4`: times the NVFP4 quantize kernels at the seed activation shape.
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/nvfp4_quantize_bench.h"
#endif

namespace h3rt::cli {

void add_bench_nvfp4_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize-nvfp4",
                                 "Time the NVFP4 quantize kernels (given g, two-pass, single "
                                 "launch, fast math) on the GPU");
#ifdef H3RT_HAVE_CUDA
  auto opt = std::make_shared<bench::Nvfp4BenchOptions>();
  cmd->add_option("--rows", opt->rows, "rows")->capture_default_str();
  cmd->add_option("--cols", opt->cols, "cols (multiple of 16)")->capture_default_str();
  cmd->add_option("--buffers", opt->buffers, "distinct input tensors rotated")
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "untimed runs")->capture_default_str();
  cmd->add_option("--iters", opt->iters, "timed runs (median reported)")->capture_default_str();
  cmd->add_option("--out", opt->json_path, "write results as JSON to this file");
  cmd->callback([opt] {
    if (!opt->json_path.empty()) check_output_path(opt->json_path, "--out");
    bench::run_nvfp4_quantize_bench(*opt);
  });
#else
  cmd->callback([] { H3RT_FAIL("bench-quantize-nvfp4 needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
