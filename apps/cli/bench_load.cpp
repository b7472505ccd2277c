// `h3rt bench load CHECKPOINT [--backend cpu|cuda]` (src/bench/load_bench.h).
#include <cstdio>
#include <memory>

#include "bench/load_bench.h"
#include "cli/commands.h"

namespace h3rt::cli {

void add_bench_load_command(CLI::App& bench) {
  auto path = std::make_shared<std::string>();
  auto backend = std::make_shared<std::string>("cuda");
  auto gather = std::make_shared<bool>(false);
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
  cmd->add_flag("--gather", *gather,
                "Also time what --weight-stream-source file does per block: every layer's "
                "stored bytes copied into a staging buffer by 8 threads, first from disk (the "
                "file's cached pages dropped first; --backend cuda only) then from the page "
                "cache: gather_cold_gbps, gather_warm_gbps");
  cmd->callback([path, backend, gather] {
    std::printf("%s\n", bench::run_load_bench(*path, *backend, *gather).dump(2).c_str());
  });
}

}  // namespace h3rt::cli
