// `h3rt bench load CHECKPOINT [--backend cpu|cuda]` (src/bench/load_bench.h).
#include <cstdio>
#include <memory>

#include "bench/load_bench.h"
#include "cli/commands.h"

namespace h3rt::cli {

void add_bench_load_command(CLI::App& bench) {
  auto path = std::make_shared<std::string>();
  auto backend = std::make_shared<std::string>("cuda");
  auto* cmd = bench.add_subcommand(
      "load",
      "Load a checkpoint's weights into host memory as a backend does and print JSON: the load "
      "and read times, h3rt's peak heap bytes and the process's peak resident set (the mapped "
      "file's pages read count there; the kernel can drop them again). Uses no GPU");
  cmd->add_option("checkpoint", *path, "a .safetensors checkpoint")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--backend", *backend,
                  "cuda (the default): the stored bytes only, as the CUDA backend loads and "
                  "uploads them; cpu: with the float32 copies of the float layers that the CPU "
                  "reference computes from")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->callback([path, backend] {
    std::printf("%s\n", bench::run_load_bench(*path, *backend).dump(2).c_str());
  });
}

}  // namespace h3rt::cli
