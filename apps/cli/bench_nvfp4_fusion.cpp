// `h3rt bench nvfp4-fusion`: fused NVFP4 producers vs producer + nvfp4_quantize at the seed
// shape (see src/bench/nvfp4_fusion_bench.h); prints a table and writes JSON.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#include "h3rt/report.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/nvfp4_fusion_bench.h"
#endif

namespace h3rt::cli {

void add_bench_nvfp4_fusion_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("nvfp4-fusion",
                                 "Time NVFP4 quantization fused into its producers (rmsnorm "
                                 "modulate, swiglu, flash and Sage attention epilogues) vs "
                                 "producer + quantize");
#ifdef H3RT_HAVE_CUDA
  struct Args {
    bench::Nvfp4FusionBenchOptions o;
    std::string out = "bench_nvfp4_fusion.json";
    bool no_attention = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--rows", a->o.rows, "rows (S)")->capture_default_str();
  cmd->add_option("--hidden", a->o.hidden, "hidden width")->capture_default_str();
  cmd->add_option("--ffn", a->o.ffn, "SwiGLU width")->capture_default_str();
  cmd->add_option("--warmup", a->o.warmup, "untimed runs")->capture_default_str();
  cmd->add_option("--iters", a->o.iters, "timed runs (median)")->capture_default_str();
  cmd->add_option("--attention-iters", a->o.attention_iters, "timed attention runs")
      ->capture_default_str();
  cmd->add_flag("--no-attention", a->no_attention, "skip the attention epilogues");
  cmd->add_option("--out", a->out, "JSON report path")->capture_default_str();
  cmd->callback([a] {
    check_output_path(a->out, "--out");
    a->o.attention = !a->no_attention;
    const nlohmann::json j = bench::run_nvfp4_fusion_bench(a->o);
    write_json(a->out, j);  // atomic (temp + rename)
  });
#else
  cmd->callback([] { H3RT_FAIL("bench nvfp4-fusion needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
