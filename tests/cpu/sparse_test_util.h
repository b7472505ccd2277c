// Helpers of the CPU and GPU tests of sparse attention: a SparseAttention configuration in one
// call, random block lists.
#pragma once

#include <cstdint>

#include "h3rt/pipeline.h"
#include "h3rt/sparse.h"
#include "ops/attention_sparse/router.h"

namespace h3rt::test {

inline SparseAttention sparse_config(float tau, int band, int64_t max_blocks = 0,
                                     bool video_rows_only = true) {
  SparseAttention c;
  c.tau = tau;
  c.band = band;
  c.max_blocks = max_blocks;
  c.video_rows_only = video_rows_only;
  return c;
}

// Per (head, tile) a random non-empty ascending subset of the key blocks (each kept with
// probability 1/3, one always).
template <class Rng>
attention_sparse::HostBlockLists random_block_lists(const attention_sparse::RouterShape& s,
                                                    Rng& rng) {
  attention_sparse::HostBlockLists l = attention_sparse::full_block_lists(s);
  const int64_t nk = s.n_kblocks();
  l.stats.key_blocks_computed = 0;
  for (size_t t = 0; t < l.count.size(); ++t) {
    int32_t n = 0;
    const int32_t kept = static_cast<int32_t>(rng() % nk);
    for (int32_t j = 0; j < nk; ++j)
      if (j == kept || rng() % 3 == 0) l.index[t * nk + n++] = j;
    l.count[t] = n;
    l.stats.key_blocks_computed += n;
  }
  return l;
}

// The sparse-check loop tests' request: a 32 x 32 latent, 3 latent frames: 768 video rows
// (12 64-row tiles) past a short prefix; width 256 halves it (6 tiles: the CPU tests, which run
// under ASan + UBSan in CI too).
inline Request check_request(const H3Config& c, int64_t width = 512) {
  RequestOptions r;
  r.width = width;
  r.height = 512;
  r.frames = 9;
  r.text_tokens = 3;
  return make_request(c, r);
}

// The sparse-check loop tests' options: 4 steps, the first dense, then sparse at tau 0.5 in every
// block (no band), checked on the first sparse step and every `every`-th after it.
inline SampleOptions check_options(int every, double bound) {
  SampleOptions o;
  o.steps = 4;
  o.hybrid.sparse.tau = 0.5f;
  o.hybrid.sparse.band = 0;
  o.hybrid.sparse.dense_blocks = 0;
  o.hybrid.dense_steps = 1;
  o.hybrid.check.every = every;
  o.hybrid.check.bound = bound;
  return o;
}

}  // namespace h3rt::test
