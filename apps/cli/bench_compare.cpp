// `h3rt bench compare A.json B.json`: speedups of every timing present in both reports.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "h3rt/check.h"
#include "h3rt/compare.h"

namespace h3rt::cli {

void add_bench_compare_command(CLI::App& bench) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = bench.add_subcommand("compare",
                                   "Print two reports' timings side by side with "
                                   "speedups (first = before, second = after)");
  cmd->add_option("reports", *files, "two JSON reports (bench block, sample --report, ...)")
      ->required()
      ->expected(2)
      ->check(CLI::ExistingFile);
  cmd->callback([files] {
    const auto rows = compare_timings(read_json((*files)[0]), read_json((*files)[1]));
    H3RT_CHECK(!rows.empty(), "the reports share no timing fields");
    std::fputs(format_comparison(rows, "before", "after").c_str(), stdout);
  });
}

}  // namespace h3rt::cli
