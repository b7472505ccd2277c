// `h3rt bench int8-gemm`: times the int8 W8A8 kernels (rotate+quantize, the int8 GEMM on each
// path) against the fp8 and bf16 cuBLASLt GEMMs at the H3 projections (see
// src/bench/int8_gemm_bench.h).
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/int8_gemm_bench.h"
#endif

namespace h3rt::cli {

void add_bench_int8_gemm_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("int8-gemm",
                                 "Time the int8 W8A8 activation quantizer (each kernel; the team "
                                 "kernel and the fused rmsnorm producer in both rotation forms, "
                                 "double and integer) and GEMMs (every CUTLASS sm90 config, "
                                 "the CUTLASS mma.sync kernel of sm_120 / sm_121, cuBLASLt + "
                                 "epilogue) against fp8 and bf16 cuBLASLt at the H3 "
                                 "projections (JSON report). The integer rotation is the default "
                                 "on Hopper and sm_120 / sm_121 (weak FP64); its speed on the "
                                 "latter cannot be measured on another GPU");
#ifdef H3RT_HAVE_CUDA
  auto opt = std::make_shared<bench::Int8GemmBenchOptions>();
  auto rows = std::make_shared<int64_t>(0);
  cmd->add_option("--rows", *rows, "packed rows S (default: 37810 and 15399)");
  cmd->add_option("--group", opt->group, "rotation group (0: plain per-row int8)")
      ->capture_default_str();
  add_gemm_timing_options(*cmd, opt->warmup, opt->iters, opt->json_path);
  cmd->callback([opt, rows] {
    if (!opt->json_path.empty()) check_output_path(opt->json_path, "--out");
    if (*rows > 0) opt->rows = {*rows};
    bench::run_int8_gemm_bench(*opt);
  });
#else
  cmd->callback([] { H3RT_FAIL("bench int8-gemm needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
