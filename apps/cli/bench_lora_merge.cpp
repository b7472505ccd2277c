// `h3rt bench lora-merge`: the GPU LoRA merge and unmerge of a synthetic rank-r LoRA into a
// synthetic model (see src/bench/lora_merge_bench.h).
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "cli/validators.h"
#include "h3rt/check.h"
#include "h3rt/report.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/lora_merge_bench.h"
#endif

namespace h3rt::cli {

void add_bench_lora_merge_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "lora-merge",
      "Time the GPU merge and unmerge of a synthetic LoRA (default rank 64, 259 pairs: every "
      "block's qkv/out/fc1/fc2/AdaLN, the refiner projections, condition_proj) into the "
      "synthetic h3 model with int8_convrot block projections (JSON report)");
#ifdef H3RT_HAVE_CUDA
  auto o = std::make_shared<bench::LoraMergeBenchOptions>();
  auto gemm = std::make_shared<std::string>("int8");
  auto out = std::make_shared<std::string>();
  cmd->add_option("--preset", o->preset, "model dimensions: h3 or tiny")
      ->check(CLI::IsMember({"h3", "tiny"}))
      ->capture_default_str();
  cmd->add_option("--gemm", *gemm, "block projections: int8 (int8_convrot) or bf16")
      ->check(CLI::IsMember({"int8", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--group", o->group, "int8 convrot group size")->capture_default_str();
  cmd->add_option("--rank", o->rank, "LoRA rank")->capture_default_str();
  cmd->add_option("--pairs", o->pairs, "LoRA pairs (at most the layers in the order above)")
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "merge + unmerge repetitions")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--out", *out, "write the report as JSON to this file");
  cmd->callback([o, gemm, out] {
    if (!out->empty()) check_output_path(*out, "--out");
    o->int8 = *gemm == "int8";
    const nlohmann::json rep = bench::run_lora_merge_bench(*o);
    if (!out->empty()) write_json(*out, rep);
  });
#else
  cmd->callback([] { H3RT_FAIL("bench lora-merge needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
