// The step/block hybrid of a sampling run (opt-in, off by default): which steps get block-sparse
// attention (h3rt/sparse.h), and first-block step caching (reuse the rest of the network's
// residual when block 0's residual barely changed). Both are approximations of the dense run;
// `h3rt sample --gate` (h3rt/quality.h) measures how far they move the latents.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>

#include "h3rt/sparse.h"

namespace h3rt {

// Which steps run sparse: the first dense_steps steps are dense (the trajectory's early,
// high-noise steps set the layout and are the most sensitive), the rest get `sparse`.
struct HybridOptions {
  SparseAttention sparse;  // tau <= 0: every step dense
  int dense_steps = 10;
};

// The policy's decisions (pure functions of the options, tested on their own).
inline bool sparse_step(const HybridOptions& h, int step) {
  return h.sparse.enabled() && step >= h.dense_steps;
}
// Within a sparse forward, block `block` is sparse from dense_blocks on.
inline bool sparse_block(const SparseAttention& s, int64_t block) {
  return s.enabled() && block >= s.dense_blocks;
}

// First-block step caching. After block 0 the forward compares block 0's residual (its output
// minus its input, over all packed rows) with the residual of the last step that ran every block
// (the step that refreshed the cache; reused steps do not refresh it, so slow drift still adds
// up) by relative L1: sum |r - r_prev| / sum |r_prev|. Below `threshold`, and with fewer than
// max_reuses reuses in a row, the forward skips blocks 1..end and adds the cached residual
// (final hidden minus block 0's output of that step) to this step's block-0 output.
struct StepCacheOptions {
  double threshold = 0;  // <= 0: off (every step computes every block)
  int max_reuses = 3;    // consecutive reused steps at most (>= 1)
  bool enabled() const { return threshold > 0; }
};

// Whether a forward reuses the cache: only with a cached step to compare against, a relative
// L1 strictly below the threshold and fewer than max_reuses reuses since the last refresh.
inline bool reuse_cached_step(const StepCacheOptions& o, bool have_cache, double rel_l1,
                              int consecutive_reuses) {
  return o.enabled() && have_cache && std::isfinite(rel_l1) && rel_l1 < o.threshold &&
         consecutive_reuses < o.max_reuses;
}

// The cache of one sampling run (owned by the loop, passed to each forward through
// ForwardInputs::step_cache; never shared between runs). The backend keeps its buffers (host
// vectors on the CPU, device memory on CUDA) in `state`; a state of another backend or shape
// is replaced, which reads as "no cached step".
class StepCache {
 public:
  explicit StepCache(StepCacheOptions o = {}) : options_(o) {}
  const StepCacheOptions& options() const { return options_; }
  bool enabled() const { return options_.enabled(); }
  void reset() {
    state.reset();
    reuses_ = 0;
    last_ = {};
  }

  // What the last forward decided.
  struct Decision {
    bool checked = false;  // the cache was on for that forward
    bool reused = false;
    double rel_l1 = NAN;  // NaN: no cached step to compare with (the first forward)
  };
  const Decision& last() const { return last_; }
  int consecutive_reuses() const { return reuses_; }

  // Called by a forward after block 0 with the relative L1 (NaN without a cached step):
  // records and returns the decision. refreshed() after a forward that ran every block.
  bool decide(double rel_l1) {
    const bool reuse = reuse_cached_step(options_, !std::isnan(rel_l1), rel_l1, reuses_);
    last_ = {true, reuse, rel_l1};
    if (reuse) ++reuses_;
    return reuse;
  }
  void refreshed() { reuses_ = 0; }

  struct State {
    virtual ~State() = default;
  };
  std::unique_ptr<State> state;

 private:
  StepCacheOptions options_;
  int reuses_ = 0;
  Decision last_;
};

// Throws naming the field and its allowed range: tau finite and >= 0, dense_steps, dense_blocks,
// band, max_blocks >= 0; threshold finite and >= 0, max_reuses >= 1.
void check_hybrid_options(const HybridOptions& h, const StepCacheOptions& c);

// The hybrid's five settings as its callers take them (`h3rt sample`'s flags, the C API's
// h3rt_sample_request fields, h3rt.sample's keywords), with each one's name in the caller's
// spelling for the errors.
struct HybridSettings {
  double sparse_attention = 0;  // the router's tau, in [0, 10]; 0: every step dense
  int dense_steps = 10;         // in [0, 1000]
  int dense_blocks = 2;         // in [0, 1000]
  double step_cache = 0;        // the relative-L1 threshold, in [0, 100]; 0: off
  int step_cache_max = 3;       // reused steps in a row at most, in [1, 1000]
};
struct HybridNames {
  const char *sparse_attention, *dense_steps, *dense_blocks, *step_cache, *step_cache_max;
};
inline constexpr HybridNames kHybridFlagNames = {
    "--sparse-attention", "--dense-steps", "--dense-blocks", "--step-cache", "--step-cache-max"};
inline constexpr HybridNames kHybridFieldNames = {"sparse_attention", "dense_steps", "dense_blocks",
                                                  "step_cache", "step_cache_max"};

// The policy the settings ask for, range-checked: an Error names the option as `names` spells
// it, its range and the value given.
struct HybridPolicy {
  HybridOptions hybrid;
  StepCacheOptions step_cache;
};
HybridPolicy hybrid_policy(const HybridSettings& s, const HybridNames& names = kHybridFieldNames);

// What one step of a run did (SampleResult::hybrid_steps, the sample report's "hybrid").
struct HybridStep {
  bool sparse = false;           // the forward was given sparse attention
  double sparse_fraction = NAN;  // SparseStats::fraction() when the forward reported key
                                 // blocks (NaN: dense, or a forward without sparse support)
  StepCache::Decision cache;     // checked false: step caching off
};

}  // namespace h3rt
