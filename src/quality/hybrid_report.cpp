// The "hybrid" and "gate" sections of the sample report.
#include <algorithm>
#include <cmath>

#include "h3rt/quality.h"

namespace h3rt {
namespace {

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// A check step's findings: the sample, the errors (max and median over (block, head), the max
// per head over the blocks) and the (block, head) pairs turned dense; null on other steps.
nlohmann::json check_json(const SparseCheckRecord& k) {
  if (!k.checked) return nullptr;
  std::vector<double> all = k.rel_l1;
  std::vector<double> head_max(k.heads, 0.0);
  for (size_t i = 0; i < all.size(); ++i)
    head_max[i % k.heads] = std::max(head_max[i % k.heads], all[i]);
  double median = NAN;
  if (!all.empty()) {
    std::sort(all.begin(), all.end());
    median = all[all.size() / 2];
  }
  nlohmann::json turned = nlohmann::json::array(), heads = nlohmann::json::array();
  for (const int64_t t : k.turned_dense) turned.push_back({t / k.heads, t % k.heads});
  for (const double e : head_max) heads.push_back(finite_or_null(e));
  return {{"tiles_per_block", k.tiles},
          {"blocks_checked", k.blocks.size()},
          {"rel_l1_max", all.empty() ? nlohmann::json(nullptr) : finite_or_null(all.back())},
          {"rel_l1_median", finite_or_null(median)},
          {"head_rel_l1_max", heads},
          {"turned_dense", turned},
          {"dense_heads", k.dense_heads}};
}

nlohmann::json step_json(int index, const HybridStep& s) {
  const char* cache = !s.cache.checked ? "off" : (s.cache.reused ? "reused" : "computed");
  return {{"step", index},
          {"attention", s.sparse ? "sparse" : "dense"},
          {"sparse_fraction", finite_or_null(s.sparse_fraction)},
          {"step_cache", cache},
          {"relative_l1", finite_or_null(s.cache.rel_l1)},
          {"sparse_check", check_json(s.check)}};
}

}  // namespace

nlohmann::json hybrid_report(const SampleOptions& o, const SampleResult& r) {
  const SparseAttention& sp = o.hybrid.sparse;
  nlohmann::json steps = nlohmann::json::array();
  int sparse = 0, reused = 0, checks = 0;
  int64_t dense_heads = 0;
  for (size_t i = 0; i < r.hybrid_steps.size(); ++i) {
    const HybridStep& s = r.hybrid_steps[i];
    steps.push_back(step_json(r.resumed_steps + static_cast<int>(i), s));
    sparse += s.sparse;
    reused += s.cache.reused;
    checks += s.check.checked;
    if (s.check.checked) dense_heads = s.check.dense_heads;
  }
  const SparseCheckOptions& k = o.hybrid.check;
  return {{"sparse_attention",
           {{"tau", sp.tau},
            {"dense_steps", o.hybrid.dense_steps},
            {"dense_blocks", sp.dense_blocks},
            {"video_rows_only", sp.video_rows_only},
            {"band", sp.band},
            {"max_blocks", sp.max_blocks},
            {"check",
             {{"every", k.every},
              {"bound", k.bound},
              {"tiles", k.tiles},
              {"check_steps", checks},
              {"dense_heads", dense_heads}}}}},
          {"step_cache",
           {{"threshold", o.step_cache.threshold}, {"max_reuses", o.step_cache.max_reuses}}},
          {"sparse_steps", sparse},
          {"reused_steps", reused},
          {"steps", steps}};
}

nlohmann::json gate_report(const GateResult& g, const nlohmann::json& files) {
  return {{"dense_seconds", g.dense_seconds},
          {"approx_seconds", g.approx_seconds},
          {"speedup", g.approx_seconds > 0 ? g.dense_seconds / g.approx_seconds : 0.0},
          {"files", files},
          {"comparison", to_json(g.comparison)}};
}

}  // namespace h3rt
