// `h3rt bench attention`: times the Sage attention pre-pass and every kernel variant at the seed
// shape, next to the dense bf16 flash kernel on the same input.
#include <memory>

#include "cli/commands.h"
#include "h3rt/check.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/attention_sage_bench.h"
#endif

namespace h3rt::cli {

void add_bench_attention_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("attention",
                                 "Time the 8-bit Sage attention (pre-pass + each kernel "
                                 "variant) and bf16 flash attention on the GPU");
#ifdef H3RT_HAVE_CUDA
  auto opt = std::make_shared<bench::AttentionBenchOptions>();
  cmd->add_option("--seq", opt->seq, "sequence length")->capture_default_str();
  cmd->add_option("--heads", opt->heads, "attention heads (head_dim 128)")->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "untimed runs")->capture_default_str();
  cmd->add_option("--iters", opt->iters, "timed runs (median reported)")->capture_default_str();
  cmd->add_option("--out", opt->json_path, "write results as JSON to this file");
  cmd->callback([opt] { bench::run_attention_bench(*opt); });
#else
  cmd->callback([] { H3RT_FAIL("bench-attention needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
