// Validation of the hybrid's options and the one mapping of its user-facing settings (CLI, C API,
// Python) to them (the policy itself is inline in h3rt/hybrid.h).
#include "h3rt/hybrid.h"

#include <algorithm>

#include "h3rt/check.h"
#include "core/host_device.h"

namespace h3rt {
namespace {

}  // namespace

std::vector<int64_t> sparse_check_tiles(uint64_t seed, int step, int64_t block, int64_t first_tile,
                                        int64_t n_qtiles, int count) {
  const int64_t n = std::max<int64_t>(0, n_qtiles - first_tile);
  const int64_t k = std::min<int64_t>(std::max(count, 0), n);
  const uint64_t base = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step)) ^
                                   static_cast<uint64_t>(block));
  std::vector<int64_t> picked;  // Floyd: k draws, each from a growing range
  for (int64_t j = n - k; j < n; ++j) {
    const auto t = static_cast<int64_t>(splitmix64(base ^ static_cast<uint64_t>(j)) %
                                        static_cast<uint64_t>(j + 1));
    picked.push_back(std::find(picked.begin(), picked.end(), t) == picked.end() ? t : j);
  }
  std::sort(picked.begin(), picked.end());
  for (int64_t& t : picked) t += first_tile;
  return picked;
}

void SparseCheck::begin(int step, bool check) {
  step_ = step;
  checking_ = check && options_.enabled();
  last_ = {};
  last_.checked = checking_;
  last_.tiles = 0;
}

void SparseCheck::shape(int64_t blocks, int64_t heads) {
  if (dense_.empty()) {
    blocks_ = blocks;
    heads_ = heads;
    dense_.assign(blocks * heads, 0);
    return;
  }
  H3RT_CHECK(blocks == blocks_ && heads == heads_, "sparse check: a forward of ", blocks,
             " blocks x ", heads, " heads, the run's flags are ", blocks_, " x ", heads_);
}

void SparseCheck::record(int64_t block, int tiles, const double* diff, const double* ref) {
  H3RT_CHECK(checking_ && block >= 0 && block < blocks_,
             "sparse check: record outside a checking forward, or block ", block, " of ", blocks_);
  last_.tiles = tiles;
  last_.heads = heads_;
  last_.blocks.push_back(block);
  for (int64_t h = 0; h < heads_; ++h) {
    const double e = sparse_check_rel_l1(diff[h], ref[h]);
    last_.rel_l1.push_back(e);
    uint8_t& d = dense_[block * heads_ + h];
    if (!d && !sparse_check_keeps(e, options_.bound)) {
      d = 1;
      last_.turned_dense.push_back(block * heads_ + h);
    }
  }
  last_.dense_heads = std::count(dense_.begin(), dense_.end(), uint8_t{1});
}

void check_hybrid_options(const HybridOptions& h, const StepCacheOptions& c) {
  const SparseAttention& s = h.sparse;
  H3RT_CHECK(std::isfinite(s.tau) && s.tau >= 0, "sparse attention tau must be finite and >= 0 ",
             "(0: off), got ", s.tau);
  H3RT_CHECK(h.dense_steps >= 0, "dense_steps must be >= 0, got ", h.dense_steps);
  H3RT_CHECK(s.dense_blocks >= 0, "sparse dense_blocks must be >= 0, got ", s.dense_blocks);
  H3RT_CHECK(s.band >= 0, "sparse band must be >= 0, got ", s.band);
  H3RT_CHECK(s.max_blocks >= 0, "sparse max_blocks must be >= 0 (0: no cap), got ", s.max_blocks);
  const SparseCheckOptions& k = h.check;
  H3RT_CHECK(k.every >= 0, "sparse check every must be >= 0 (0: off), got ", k.every);
  H3RT_CHECK(std::isfinite(k.bound) && k.bound >= 0, "sparse check bound must be finite and >= 0, ",
             "got ", k.bound);
  H3RT_CHECK(k.tiles >= 1 && k.tiles <= 64, "sparse check tiles must be in [1, 64], got ", k.tiles);
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
  H3RT_CHECK(s.sparse_check >= 0 && s.sparse_check <= 1000, n.sparse_check,
             " must be in [0, 1000] (0: off), got ", s.sparse_check);
  H3RT_CHECK(s.sparse_check == 0 || s.sparse_attention > 0, n.sparse_check,
             " checks the sparse attention: give ", n.sparse_attention, " too");
  H3RT_CHECK(std::isfinite(s.sparse_check_bound) && s.sparse_check_bound >= 0 &&
                 s.sparse_check_bound <= 100,
             n.sparse_check_bound, " must be in [0, 100], got ", s.sparse_check_bound);
  HybridPolicy p;
  p.hybrid.sparse.tau = static_cast<float>(s.sparse_attention);
  p.hybrid.sparse.dense_blocks = s.dense_blocks;
  p.hybrid.dense_steps = s.dense_steps;
  p.hybrid.check.every = s.sparse_check;
  p.hybrid.check.bound = s.sparse_check_bound;
  p.step_cache.threshold = s.step_cache;
  p.step_cache.max_reuses = s.step_cache_max;
  check_hybrid_options(p.hybrid, p.step_cache);
  return p;
}

}  // namespace h3rt
