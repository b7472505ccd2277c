// The step/block hybrid of a sampling run (opt-in, off by default): which steps get block-sparse
// attention (h3rt/sparse.h), and first-block step caching (reuse the rest of the network's
// residual when block 0's residual barely changed). Both are approximations of the dense run;
// `h3rt sample --gate` (h3rt/quality.h) measures how far they move the latents.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "h3rt/sparse.h"

namespace h3rt {

// The online check of the sparse attention (`--sparse-check K`; off by default). On the sparse
// steps n = step - dense_steps with n % every == 0 (the first sparse step, then every K-th), in
// each sparse block that ran, a seeded sample of `tiles` query tiles (the same tiles for every
// head; drawn from the tiles that route at all, i.e. past the prefix rows with
// video_rows_only, by sparse_check_tiles from the run's seed, the step and the block) is
// recomputed densely with the same attention kernel (the Sage kernel with full block lists on
// CUDA, the fp32 attention on the CPU) and compared with the sparse output of the same rows:
// per head, relative L1 = sum |sparse - dense| / sum |dense| over the sampled rows' 128
// channels (sparse_check_rel_l1). A head keeps sparse attention in that block only while its
// error is strictly below `bound`; otherwise every query tile of that (block, head) takes every
// key block from the next forward on, for the rest of the run (the lists are then full, and
// the kernels are bit-identical to dense with full lists). Per (block, head): errors differ a
// lot between blocks, and a head that is fine in most blocks keeps its savings there. Bound
// 0.05: above the 0.02-0.04 that block-sparse Sage measured against dense Sage on smooth local
// attention (tests/cuda/test_attention_sparse.cu) and below the 8-bit kernel's own error
// against fp64 (relative L2 ~0.07, test_attention_sage.cu): a head turns dense when skipping
// blocks costs about as much as the quantization does. 0 turns every checked head dense. A
// resumed run starts with every head sparse again.
struct SparseCheckOptions {
  int every = 0;        // K: 0 = off (the sparse run is unchanged bit for bit)
  double bound = 0.05;  // relative L1 at or above which a head turns dense
  int tiles = 4;        // query tiles sampled per checked block
  bool enabled() const { return every > 0; }
};

// Which steps run sparse: the first dense_steps steps are dense (the trajectory's early,
// high-noise steps set the layout and are the most sensitive), the rest get `sparse`.
struct HybridOptions {
  SparseAttention sparse;  // tau <= 0: every step dense
  int dense_steps = 10;
  SparseCheckOptions check;  // the online check of the sparse steps (off by default)
};

// The policy's decisions (pure functions of the options, tested on their own).
inline bool sparse_step(const HybridOptions& h, int step) {
  return h.sparse.enabled() && step >= h.dense_steps;
}
// Within a sparse forward, block `block` is sparse from dense_blocks on.
inline bool sparse_block(const SparseAttention& s, int64_t block) {
  return s.enabled() && block >= s.dense_blocks;
}
// Whether sparse step `step` is a check step: the first sparse step, then every K-th.
inline bool sparse_check_step(const HybridOptions& h, int step) {
  return sparse_step(h, step) && h.check.enabled() && (step - h.dense_steps) % h.check.every == 0;
}
// sum |sparse - dense| / sum |dense| (0 / 0 = 0; diff / 0 = inf).
inline double sparse_check_rel_l1(double diff, double ref) {
  return ref > 0 ? diff / ref : (diff > 0 ? INFINITY : 0.0);
}
// A head stays sparse only while its error is strictly below the bound (NaN: dense).
inline bool sparse_check_keeps(double rel_l1, double bound) {
  return rel_l1 < bound;
}
// The query tiles a check samples in `block` at `step`: min(count, n_qtiles - first_tile)
// distinct tiles of [first_tile, n_qtiles), ascending; a pure function of its arguments
// (splitmix64 draws, Floyd's sampling).
std::vector<int64_t> sparse_check_tiles(uint64_t seed, int step, int64_t block, int64_t first_tile,
                                        int64_t n_qtiles, int count);
// The first query tile the router routes (the tiles before it hold a prefix row and take every
// key block with video_rows_only, so their error is 0).
inline int64_t sparse_check_first_tile(const SparseAttention& s, int64_t prefix_rows,
                                       int64_t q_tile) {
  return s.video_rows_only ? (prefix_rows + q_tile - 1) / q_tile : 0;
}

// What one check step measured (HybridStep::check; the report's "sparse_check").
struct SparseCheckRecord {
  bool checked = false;  // the forward ran the check
  int tiles = 0;         // query tiles sampled per checked block (all heads)
  int64_t heads = 0;
  std::vector<int64_t> blocks;        // the blocks checked, ascending
  std::vector<double> rel_l1;         // [blocks.size()][heads]
  std::vector<int64_t> turned_dense;  // block * heads + head: dense from the next forward on
  int64_t dense_heads = 0;            // (block, head) pairs dense after this step
};

// One sampling run's check state (owned by the loop, passed to each sparse forward through
// ForwardInputs::sparse_check): the options, the run's seed, the per-(block, head) dense flags
// the router reads (every head sparse at the start) and what the last checking forward found.
class SparseCheck {
 public:
  SparseCheck(SparseCheckOptions o = {}, uint64_t seed = 0) : options_(o), seed_(seed) {}
  const SparseCheckOptions& options() const { return options_; }
  uint64_t seed() const { return seed_; }

  // Before each forward: its step and whether it checks (a new record starts).
  void begin(int step, bool check);
  bool checking() const { return checking_; }
  int step() const { return step_; }

  // The forward's shape: the flags are sized on first use (all sparse); another shape throws.
  void shape(int64_t blocks, int64_t heads);
  // Block `block`'s flags [heads] (1: every key block), or null before shape().
  const uint8_t* dense_heads(int64_t block) const {
    return dense_.empty() ? nullptr : dense_.data() + block * heads_;
  }
  const std::vector<uint8_t>& dense() const { return dense_; }
  // This step's sample in `block`.
  std::vector<int64_t> tiles(int64_t block, int64_t first_tile, int64_t n_qtiles) const {
    return sparse_check_tiles(seed_, step_, block, first_tile, n_qtiles, options_.tiles);
  }
  // A checked block's per-head sums (diff[h] = sum |sparse - dense|, ref[h] = sum |dense|) over
  // `tiles` sampled tiles: recorded, and heads at or above the bound turn dense in that block.
  void record(int64_t block, int tiles, const double* diff, const double* ref);
  const SparseCheckRecord& last() const { return last_; }

 private:
  SparseCheckOptions options_;
  uint64_t seed_;
  int step_ = -1;
  bool checking_ = false;
  int64_t blocks_ = 0, heads_ = 0;
  std::vector<uint8_t> dense_;  // [blocks][heads]
  SparseCheckRecord last_;
};

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
// band, max_blocks >= 0; check every >= 0, bound finite and >= 0, tiles in [1, 64]; threshold
// finite and >= 0, max_reuses >= 1.
void check_hybrid_options(const HybridOptions& h, const StepCacheOptions& c);

// The hybrid's seven settings as its callers take them (`h3rt sample`'s flags, the C API's
// h3rt_sample_request fields, h3rt.sample's keywords), with each one's name in the caller's
// spelling for the errors.
struct HybridSettings {
  double sparse_attention = 0;  // the router's tau, in [0, 10]; 0: every step dense
  int dense_steps = 10;         // in [0, 1000]
  int dense_blocks = 2;         // in [0, 1000]
  double step_cache = 0;        // the relative-L1 threshold, in [0, 100]; 0: off
  int step_cache_max = 3;       // reused steps in a row at most, in [1, 1000]
  int sparse_check = 0;         // the check's K, in [0, 1000]; 0: off
  double sparse_check_bound = 0.05;  // in [0, 100]
};
struct HybridNames {
  const char *sparse_attention, *dense_steps, *dense_blocks, *step_cache, *step_cache_max,
      *sparse_check, *sparse_check_bound;
};
inline constexpr HybridNames kHybridFlagNames = {
    "--sparse-attention", "--dense-steps",  "--dense-blocks",      "--step-cache",
    "--step-cache-max",   "--sparse-check", "--sparse-check-bound"};
inline constexpr HybridNames kHybridFieldNames = {
    "sparse_attention", "dense_steps",  "dense_blocks",      "step_cache",
    "step_cache_max",   "sparse_check", "sparse_check_bound"};

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
  SparseCheckRecord check;       // checked false: not a check step
};

}  // namespace h3rt
