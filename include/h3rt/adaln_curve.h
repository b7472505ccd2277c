// Curve-form ("pruned") AdaLN checkpoints, ComfyUI's adaln_t_table: every AdaLN output of H3 is
// W silu(time_embedder(t)) + b, an affine function of one curve in R^Tm. A rank-k basis of that
// curve sampled on a grid replaces the time embedder and the [*, Tm] AdaLN linears by a table
// T [grid, k] and [*, k] linears (no silu), interpolated linearly between grid rows
// (ops/adaln_curve/adaln_curve.h; H3Config::adaln_curve_grid).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace h3rt {

struct PruneAdalnOptions {
  int64_t grid = 1025;  // table rows: t_i = i / (grid - 1)
  int64_t rank = 8;     // k; >= time_embed_dim + 1 takes the exact basis below
  std::function<void(const std::string&)> progress;  // one line per stage
};

// AdaLN outputs of the curve-form file (as the runtime computes them in float32) against the
// full model's, over every block's and the final layer's outputs at the checked timesteps.
struct CurveFitError {
  double max_abs = 0;  // max |pruned - full|
  double rel_l2 = 0;   // ||pruned - full||_2 / ||full||_2
  int64_t points = 0;  // timesteps checked
};

struct PruneAdalnReport {
  // rank >= Tm + 1: T[i] = [silu(TE(t_i)), 1], W' = [W | b], b' = 0, exact at grid nodes.
  // Otherwise (PCA): mu = the mean of the grid curve, V = its top-k principal directions,
  // T[i] = (silu(TE(t_i)) - mu) V, W' = W V, b' = b + W mu.
  bool exact_basis = false;
  double energy_retained = 1;  // PCA: fraction of the centered curve's energy in the basis
  CurveFitError nodes;         // at grid nodes t_i, i = 0, s, 2s, ... (s = node_stride)
  CurveFitError midpoints;     // at (t_i + t_{i+1}) / 2 for the same i (i < grid - 1)
  int64_t node_stride = 1;     // > 1 only when checking every node would be too slow
  int64_t row_stride = 1;      // every row_stride-th output row of each layer is checked
};

// Reads a full-form H3 checkpoint `in` (not quantized AdaLN layers), writes `out` atomically:
// every tensor as stored except the time embedder and the AdaLN linears, replaced by
// adaln_t_table [grid, rank] and float32 [*, rank] AdaLN linears with biases.
PruneAdalnReport prune_adaln(const std::string& in, const std::string& out,
                             const PruneAdalnOptions& options = {});

}  // namespace h3rt
