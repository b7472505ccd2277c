// `h3rt bench-kernels`: times the CUDA block kernels and cuBLASLt GEMMs at the seed shape and
// writes a JSON report (see src/bench/block_kernels_bench.h for the method and byte model).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#include "h3rt/report.h"

#ifdef H3RT_HAVE_CUDA
#include "bench/block_kernels_bench.h"
#endif

namespace h3rt::cli {

namespace {
struct BenchKernelsArgs {
  std::string out = "bench_kernels.json";
  int64_t rows = 37810, hidden = 5376, heads = 56, ffn = 14336;
  int iters = 20, warmup = 3;
  bool no_gemm = false, no_attention = false;
};
}  // namespace

void add_bench_kernels_command(CLI::App& app) {
  auto args = std::make_shared<BenchKernelsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "kernels", "Time the CUDA block kernels, GEMMs and attention (JSON report)");
  cmd->add_option("--out", args->out, "JSON report path")->capture_default_str();
  cmd->add_option("--rows", args->rows, "packed rows S")->capture_default_str();
  cmd->add_option("--hidden", args->hidden, "hidden size H")->capture_default_str();
  cmd->add_option("--heads", args->heads, "attention heads (x128)")->capture_default_str();
  cmd->add_option("--ffn", args->ffn, "SwiGLU width F")->capture_default_str();
  cmd->add_option("--iters", args->iters, "timed launches (median)")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed launches first")->capture_default_str();
  cmd->add_flag("--no-gemm", args->no_gemm, "skip the cuBLASLt GEMMs");
  cmd->add_flag("--no-attention", args->no_attention, "skip attention");
  cmd->callback([args] {
#ifdef H3RT_HAVE_CUDA
    check_output_path(args->out, "--out");
    bench::BlockKernelsBenchOptions o;
    o.rows = args->rows;
    o.hidden = args->hidden;
    o.heads = args->heads;
    o.ffn = args->ffn;
    o.iters = args->iters;
    o.warmup = args->warmup;
    o.gemm = !args->no_gemm;
    o.attention = !args->no_attention;
    const nlohmann::json j = bench::run_block_kernels_bench(o);
    write_json(args->out, j);  // atomic (temp + rename)
#else
    H3RT_FAIL("bench-kernels: this build has no CUDA backend (configure with -DH3RT_CUDA=ON)");
#endif
  });
}

}  // namespace h3rt::cli
