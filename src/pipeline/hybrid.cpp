// Validation of the hybrid's options and the one mapping of its user-facing settings (CLI, C API,
// Python) to them (the policy itself is inline in h3rt/hybrid.h).
#include "h3rt/hybrid.h"

#include "h3rt/check.h"

namespace h3rt {

void check_hybrid_options(const HybridOptions& h, const StepCacheOptions& c) {
  const SparseAttention& s = h.sparse;
  H3RT_CHECK(std::isfinite(s.tau) && s.tau >= 0, "sparse attention tau must be finite and >= 0 ",
             "(0: off), got ", s.tau);
  H3RT_CHECK(h.dense_steps >= 0, "dense_steps must be >= 0, got ", h.dense_steps);
  H3RT_CHECK(s.dense_blocks >= 0, "sparse dense_blocks must be >= 0, got ", s.dense_blocks);
  H3RT_CHECK(s.band >= 0, "sparse band must be >= 0, got ", s.band);
  H3RT_CHECK(s.max_blocks >= 0, "sparse max_blocks must be >= 0 (0: no cap), got ", s.max_blocks);
  H3RT_CHECK(std::isfinite(c.threshold) && c.threshold >= 0,
             "step cache threshold must be finite and >= 0 (0: off), got ", c.threshold);
  H3RT_CHECK(c.max_reuses >= 1, "step cache max_reuses must be >= 1, got ", c.max_reuses);
}

HybridPolicy hybrid_policy(const HybridSettings& s, const HybridNames& n) {
  H3RT_CHECK(
      std::isfinite(s.sparse_attention) && s.sparse_attention >= 0 && s.sparse_attention <= 10,
      n.sparse_attention, " must be in [0, 10] (0: off), got ", s.sparse_attention);
  H3RT_CHECK(s.dense_steps >= 0 && s.dense_steps <= 1000, n.dense_steps,
             " must be in [0, 1000], got ", s.dense_steps);
  H3RT_CHECK(s.dense_blocks >= 0 && s.dense_blocks <= 1000, n.dense_blocks,
             " must be in [0, 1000], got ", s.dense_blocks);
  H3RT_CHECK(std::isfinite(s.step_cache) && s.step_cache >= 0 && s.step_cache <= 100, n.step_cache,
             " must be in [0, 100] (0: off), got ", s.step_cache);
  H3RT_CHECK(s.step_cache_max >= 1 && s.step_cache_max <= 1000, n.step_cache_max,
             " must be in [1, 1000], got ", s.step_cache_max,
             " (the step cache's max_reuses: reused steps in a row)");
  HybridPolicy p;
  p.hybrid.sparse.tau = static_cast<float>(s.sparse_attention);
  p.hybrid.sparse.dense_blocks = s.dense_blocks;
  p.hybrid.dense_steps = s.dense_steps;
  p.step_cache.threshold = s.step_cache;
  p.step_cache.max_reuses = s.step_cache_max;
  check_hybrid_options(p.hybrid, p.step_cache);
  return p;
}

}  // namespace h3rt
