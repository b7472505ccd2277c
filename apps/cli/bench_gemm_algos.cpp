// `h3rt bench gemm-algos`: times every algorithm cuBLASLt's heuristic offers at the H3
// projections, for bf16 and fp8 operands (see src/bench/gemm_algos_bench.h).
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/gemm_algos_bench.h"
#endif

namespace h3rt::cli {

void add_bench_gemm_algos_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gemm-algos",
      "Time every algorithm cuBLASLt's heuristic offers (up to --max-algos, best first) and "
      "what h3rt runs (the first, unless a configuration measured faster is preferred for the "
      "shape and GPU; H3RT_CUBLASLT_TABLE=0 turns that off) for the bf16 and fp8 GEMMs of the "
      "H3 projections (qkv, out, fc1, fc2) with the block's epilogue, and report the fastest per "
      "shape (JSON report)");
#ifdef H3RT_HAVE_CUDA
  auto opt = std::make_shared<bench::GemmAlgosBenchOptions>();
  auto rows = std::make_shared<int64_t>(0);
  cmd->add_option("--rows", *rows, "packed rows S (default: 37810 and 15499)");
  cmd->add_option("--kinds", opt->kinds, "operand kinds, comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp8", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--max-algos", opt->max_algos, "heuristic algorithms tried per GEMM (1..32)")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  add_gemm_timing_options(*cmd, opt->warmup, opt->iters, opt->json_path);
  cmd->callback([opt, rows] {
    if (!opt->json_path.empty()) check_output_path(opt->json_path, "--out");
    if (*rows > 0) opt->rows = {*rows};
    bench::run_gemm_algos_bench(*opt);
  });
#else
  cmd->callback([] { H3RT_FAIL("bench gemm-algos needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
