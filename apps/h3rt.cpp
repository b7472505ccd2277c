// h3rt: the command-line interface. Errors from the runtime (h3rt::Error) become one line on
// stderr and exit code 1 (130 for a run stopped by Ctrl-C); this is the only place that exits.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "h3rt/build_info.h"
#include "h3rt/check.h"
#include "h3rt/pipeline.h"

int main(int argc, char** argv) {
  CLI::App app{"h3rt: MiniMax H3 audio-video diffusion runtime"};
  app.require_subcommand(1);
  app.fallthrough(false);
  app.set_version_flag(
      "--version", [] { return h3rt::build_summary(h3rt::build_info()); },
      "Print h3rt's version and what this build holds (CUDA archs, toolkit, driver, int8 GEMM "
      "paths) and exit");
  app.add_flag_callback(
      "--verbose", [] { h3rt::set_error_locations(true); },
      "Errors also name the failed check's source file and line (as H3RT_DEBUG=1 does); give it "
      "before the verb: h3rt --verbose sample ...");
  h3rt::cli::add_sample_command(app);
  h3rt::cli::add_forward_command(app);
  h3rt::cli::add_info_command(app);
  h3rt::cli::add_compare_command(app);
  h3rt::cli::add_selftest_command(app);
  CLI::App* bench = app.add_subcommand("bench",
                                       "Benchmarks on the GPU (JSON reports shaped like the "
                                       "reference stack's measurements) and report comparison");
  bench->require_subcommand(1);
  h3rt::cli::add_bench_block_command(*bench);
  h3rt::cli::add_bench_step_command(*bench);
  h3rt::cli::add_bench_compare_command(*bench);
  h3rt::cli::add_bench_load_command(*bench);
  h3rt::cli::add_bench_attention_command(*bench);
  h3rt::cli::add_quantize_nvfp4_command(app);
  h3rt::cli::add_quantize_checkpoint_command(app);
  h3rt::cli::add_int8_convrot_command(app);
  h3rt::cli::add_make_lora_command(app);
  h3rt::cli::add_prune_adaln_command(app);
  h3rt::cli::add_bench_nvfp4_command(*bench);
  h3rt::cli::add_bench_kernels_command(*bench);
  h3rt::cli::add_bench_nvfp4_gemm_command(*bench);
  h3rt::cli::add_bench_nvfp4_fusion_command(*bench);
  h3rt::cli::add_bench_int8_gemm_command(*bench);
  h3rt::cli::add_bench_gemm_algos_command(*bench);
  h3rt::cli::add_bench_lora_merge_command(*bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help); any usage error exits 1 like every other error.
    return app.exit(e) == 0 ? 0 : 1;
  } catch (const h3rt::Cancelled& e) {  // Ctrl-C in sample: stopped at a step boundary
    std::fprintf(stderr, "h3rt: %s\n", e.what());
    return 130;
  } catch (const h3rt::Error& e) {
    std::fprintf(stderr, "h3rt: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "h3rt: error: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "h3rt: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
