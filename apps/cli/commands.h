// The CLI's verbs. Each adds one subcommand (options + callback) to the app.
#pragma once

#include <CLI/CLI.hpp>

namespace h3rt::cli {

void add_sample_command(CLI::App& app);
void add_forward_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_compare_command(CLI::App& app);  // latent quality gate figures
void add_selftest_command(CLI::App& app);  // the GPU kernels against the CPU reference
// Benchmarks: each adds a subcommand to the `bench` verb.
void add_bench_block_command(CLI::App& bench);
void add_bench_step_command(CLI::App& bench);  // `bench step` and `bench sample`
void add_bench_compare_command(CLI::App& bench);
void add_bench_load_command(CLI::App& bench);  // host memory of a checkpoint's load
void add_bench_attention_command(CLI::App& app);
void add_quantize_nvfp4_command(CLI::App& app);
void add_quantize_checkpoint_command(CLI::App& app);
void add_int8_convrot_command(CLI::App& app);
void add_make_lora_command(CLI::App& app);  // a synthetic turbo-shaped LoRA file
void add_prune_adaln_command(CLI::App& app);
void add_bench_nvfp4_command(CLI::App& app);
void add_bench_kernels_command(CLI::App& app);
void add_bench_nvfp4_gemm_command(CLI::App& bench);
void add_bench_nvfp4_fusion_command(CLI::App& app);
void add_bench_int8_gemm_command(CLI::App& bench);
// The timing options of the GEMM benches (nvfp4-gemm, int8-gemm, gemm-algos): --warmup, --iters
// (the median is reported) and --out (the JSON report).
void add_gemm_timing_options(CLI::App& cmd, int& warmup, int& iters, std::string& json_path);
void add_bench_gemm_algos_command(CLI::App& bench);
void add_bench_lora_merge_command(CLI::App& bench);

}  // namespace h3rt::cli
