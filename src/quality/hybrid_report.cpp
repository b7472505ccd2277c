// The "hybrid" and "gate" sections of the sample report.
#include <cmath>

#include "h3rt/quality.h"

namespace h3rt {
namespace {

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json step_json(int index, const HybridStep& s) {
  const char* cache = !s.cache.checked ? "off" : (s.cache.reused ? "reused" : "computed");
  return {{"step", index},
          {"attention", s.sparse ? "sparse" : "dense"},
          {"sparse_fraction", finite_or_null(s.sparse_fraction)},
          {"step_cache", cache},
          {"relative_l1", finite_or_null(s.cache.rel_l1)}};
}

}  // namespace

nlohmann::json hybrid_report(const SampleOptions& o, const SampleResult& r) {
  const SparseAttention& sp = o.hybrid.sparse;
  nlohmann::json steps = nlohmann::json::array();
  int sparse = 0, reused = 0;
  for (size_t i = 0; i < r.hybrid_steps.size(); ++i) {
    const HybridStep& s = r.hybrid_steps[i];
    steps.push_back(step_json(r.resumed_steps + static_cast<int>(i), s));
    sparse += s.sparse;
    reused += s.cache.reused;
  }
  return {{"sparse_attention",
           {{"tau", sp.tau},
            {"dense_steps", o.hybrid.dense_steps},
            {"dense_blocks", sp.dense_blocks},
            {"video_rows_only", sp.video_rows_only},
            {"band", sp.band},
            {"max_blocks", sp.max_blocks}}},
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
