// Validation of the hybrid's options (the policy itself is inline in h3rt/hybrid.h).
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

}  // namespace h3rt
