// `h3rt selftest`: the GPU kernels this build runs on this GPU against the CPU reference
// (h3rt/selftest.h); exit status 1 when a case fails.
#include "h3rt/selftest.h"

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/check.h"
#include "h3rt/report.h"

namespace h3rt::cli {
namespace {

struct SelftestCliOptions {
  uint64_t seed = 0;
  std::string json;
};

}  // namespace

void add_selftest_command(CLI::App& app) {
  auto o = std::make_shared<SelftestCliOptions>();
  auto* cmd = app.add_subcommand(
      "selftest",
      "Check the GPU kernels this build runs on this GPU against the CPU reference on fresh "
      "random data (about 15 s on an H100 host): the Sage attention op (up to 864x480's 15,499 "
      "rows), the int8 quantizer and GEMM at H3's widths, and the tiny model's forward with "
      "bf16, fp8_scaled, int8_convrot and nvfp4 block projections. h3rt's own GPU test suite has "
      "run on sm_90 only: on Blackwell (sm_100/120/121) this is the check of its kernels. Exit "
      "status 1 when a case fails");
  cmd->add_option("--seed", o->seed, "Seed of the random data (0: a fresh one, printed)");
  cmd->add_option("--json", o->json, "Also write the report as JSON (- for stdout instead)");
  cmd->callback([o] {
    if (!o->json.empty() && o->json != "-") check_output_path(o->json, "--json");
    SelftestOptions so;
    so.seed = o->seed;
    so.progress = [](const std::string& name) {
      std::fprintf(stderr, "selftest: %s\n", name.c_str());
    };
    const SelftestReport r = selftest(so);
    if (o->json != "-") std::fputs(format_selftest(r).c_str(), stdout);
    if (!o->json.empty()) write_json(o->json, to_json(r));
    H3RT_CHECK(r.passed(), "selftest failed on ", r.device, " (seed ", r.seed,
               "): do not trust h3rt's GPU results on this device; please report it with the "
               "output above");
  });
}

}  // namespace h3rt::cli
