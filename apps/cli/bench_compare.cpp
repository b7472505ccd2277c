// `h3rt bench compare A.json B.json [--plot F.svg]`: speedups of every timing present in both
// reports, and a picture of both (src/bench/plot.h).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "bench/plot.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#include "h3rt/compare.h"

namespace h3rt::cli {

void add_bench_compare_command(CLI::App& bench) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = bench.add_subcommand("compare",
                                   "Print two reports' timings (and telemetry energies) "
                                   "side by side with the ratio before / after: speedups, "
                                   "and for joules above 1 when after used less (first = "
                                   "before, second = after)");
  cmd->add_option("reports", *files, "two JSON reports (bench block, sample --report, ...)")
      ->required()
      ->expected(2)
      ->check(CLI::ExistingFile);
  auto plot = std::make_shared<std::string>();
  cmd->add_option("--plot", *plot,
                  "Also draw both as one SVG: two block breakdowns (bench block reports, or "
                  "bench/torch_block.py's peer JSON) as bars side by side, or two step / sample "
                  "timelines one above the other");
  cmd->callback([files, plot] {
    if (!plot->empty()) check_output_path(*plot, "--plot");
    const nlohmann::json a = read_json((*files)[0]), b = read_json((*files)[1]);
    if (!plot->empty()) {
      const auto name = [](const std::string& f) {
        return std::filesystem::path(f).filename().string();
      };
      bench::write_svg(*plot,
                       bench::plot_comparison_svg(a, name((*files)[0]), b, name((*files)[1])));
    }
    const auto rows = compare_timings(a, b);
    if (rows.empty() && !plot->empty()) {  // e.g. ours against the peer's JSON: the picture only
      std::fputs("the reports share no timing fields; wrote the picture only\n", stdout);
      return;
    }
    H3RT_CHECK(!rows.empty(), "the reports share no timing fields");
    std::fputs(format_comparison(rows, "before", "after").c_str(), stdout);
  });
}

}  // namespace h3rt::cli
