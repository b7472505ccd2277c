// `h3rt prune-adaln`: a curve-form ("pruned", ComfyUI adaln_t_table) AdaLN checkpoint from a
// full one, with the fit's error against the full model's AdaLN outputs.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "h3rt/adaln_curve.h"

namespace h3rt::cli {

namespace {

void print_error(const char* what, const CurveFitError& e) {
  std::printf("adaln fit error at %s (%lld timesteps): max abs %.9g, rel L2 %.9g\n", what,
              (long long)e.points, e.max_abs, e.rel_l2);
}

}  // namespace

void add_prune_adaln_command(CLI::App& app) {
  struct Opts {
    std::string in, out;
    int64_t grid = 1025, rank = 8;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "prune-adaln",
      "Replace the time embedder and the AdaLN linears of a full H3 checkpoint by the curve form "
      "(adaln_t_table [grid, rank] and [*, rank] AdaLN linears, as ComfyUI's pruned files); "
      "prints the fit's error on the AdaLN outputs at grid nodes and midpoints");
  cmd->add_option("--in", o->in, "full-form .safetensors (time_embedder.*)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "output .safetensors")->required();
  cmd->add_option("--grid", o->grid, "table rows (t_i = i / (grid - 1))")->capture_default_str();
  cmd->add_option("--rank", o->rank,
                  "table columns; time_embed_dim + 1 or more keeps the exact basis "
                  "[silu(time_embedder(t)), 1]")
      ->capture_default_str();
  cmd->callback([o] {
    check_output_path(o->out, "--out");
    PruneAdalnOptions p;
    p.grid = o->grid;
    p.rank = o->rank;
    p.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    const PruneAdalnReport r = prune_adaln(o->in, o->out, p);
    print_error("grid nodes", r.nodes);
    print_error("midpoints", r.midpoints);
    if (r.node_stride > 1 || r.row_stride > 1)
      std::printf("(checked every %lld-th grid node and every %lld-th output row)\n",
                  (long long)r.node_stride, (long long)r.row_stride);
    std::fprintf(stderr, "h3rt prune-adaln: %s basis, wrote %s\n", r.exact_basis ? "exact" : "PCA",
                 o->out.c_str());
  });
}

}  // namespace h3rt::cli
