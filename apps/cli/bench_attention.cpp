// `h3rt bench attention`: times the Sage attention pre-pass and every kernel variant at the seed
// shape, next to the dense bf16 flash kernel on the same input; with --sparse also the router and
// the block-sparse kernel.
#include <memory>
#include <string>
#include <utility>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "cli/validators.h"
#include "h3rt/check.h"
#ifdef H3RT_HAVE_CUDA
#include "bench/attention_sage_bench.h"
#endif

namespace h3rt::cli {
#ifdef H3RT_HAVE_CUDA
namespace {

// The Sage variants that exist, and a clear error for the retired ones.
CLI::Validator sage_variant_check() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v == "w4" || v == "wgmma_pp3") return {};
        if (v == "w8" || v == "wgmma" || v == "wgmma_pingpong" || v == "wgmma_pp_overlap" ||
            v == "wgmma3" || v == "wgmma_pp3_mc")
          return "Sage variant '" + v +
                 "' was retired (slower than wgmma_pp3 / w4 in bench/RESULTS.md); "
                 "use w4 or wgmma_pp3";
        return "unknown Sage variant '" + v + "' (w4, wgmma_pp3)";
      },
      "VARIANT");
}

}  // namespace
#endif

void add_bench_attention_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("attention",
                                 "Time the 8-bit Sage attention (pre-pass + each kernel "
                                 "variant; with --sparse its block-sparse form) and bf16 flash "
                                 "attention on the GPU");
#ifdef H3RT_HAVE_CUDA
  auto opt = std::make_shared<bench::AttentionBenchOptions>();
  cmd->add_option("--seq", opt->seq, "sequence length")->capture_default_str();
  cmd->add_option("--heads", opt->heads, "attention heads (head_dim 128)")->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "untimed runs")->capture_default_str();
  cmd->add_option("--iters", opt->iters, "timed runs (median reported)")->capture_default_str();
  cmd->add_option("--sustain", opt->sustain_seconds,
                  "also run each Sage kernel's whole call (pre-pass + kernel) back to back for "
                  "about this many seconds, with SM clock, power and joules per call from NVML "
                  "(\"sustained\" in --out): whether the attention alone runs at the power limit")
      ->check(non_negative_number());
  cmd->add_option("--out", opt->json_path, "write results as JSON to this file");
  cmd->add_option("--kernels", opt->kernels, "Sage variants to time: w4, wgmma_pp3 (default: all)")
      ->check(sage_variant_check());
  cmd->add_option("--sparse", opt->sparse_tau,
                  "also time block-sparse Sage at this router tau (> 0): router, sparse kernel "
                  "and the computed fraction of key blocks, beside dense Sage")
      ->check(positive_number());
  cmd->add_option("--sparse-prefix", opt->sparse_prefix_rows,
                  "with --sparse: rows [0, N) are the prefix (keys always computed, rows dense; "
                  "default: the seed shape's text + audio rows; capped at --seq)")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--sparse-band", opt->sparse_band,
                  "with --sparse: key blocks within +-N of a query tile always computed")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--sparse-max-blocks", opt->sparse_max_blocks,
                  "with --sparse: cap on routed key blocks per query tile beyond the forced "
                  "ones (0: none)")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--prepass", opt->prepass, "pre-pass algorithms to time side by side")
      ->check(CLI::IsMember({"two_launch", "fused_l2"}))
      ->capture_default_str();
  auto files = std::make_shared<std::pair<std::string, std::string>>();
  auto* in = cmd->add_option("--inputs", files->first,
                             "instead of timing: run the Sage attention on every bf16 "
                             "[S, 3*H*128] QKV tensor of this .safetensors file");
  cmd->add_option("--outputs", files->second, "where --inputs writes the bf16 [S, H*128] outputs")
      ->needs(in);
  in->needs("--outputs");
  cmd->callback([opt, files] {
    if (!opt->json_path.empty()) check_output_path(opt->json_path, "--out");
    if (!files->second.empty()) check_output_path(files->second, "--outputs");
    if (!files->first.empty())
      bench::run_attention_on_file(files->first, files->second);
    else
      bench::run_attention_bench(*opt);
  });
#else
  cmd->callback([] { H3RT_FAIL("bench-attention needs a CUDA build (H3RT_CUDA=ON)"); });
#endif
}

}  // namespace h3rt::cli
