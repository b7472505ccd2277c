// The GEMM benches' shared timing options (commands.h).
#include <string>

#include "cli/commands.h"

namespace h3rt::cli {

void add_gemm_timing_options(CLI::App& cmd, int& warmup, int& iters, std::string& json_path) {
  cmd.add_option("--warmup", warmup, "untimed calls first")->capture_default_str();
  cmd.add_option("--iters", iters, "timed calls (median reported)")->capture_default_str();
  cmd.add_option("--out", json_path, "write the report as JSON to this file");
}

}  // namespace h3rt::cli
