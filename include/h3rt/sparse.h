// Block-sparse attention for one forward (opt-in; issue "Sol" sparse attention). The sampling
// loop's hybrid policy decides per step whether a forward gets it; the forward applies it to
// the blocks from dense_blocks on. Off (every block dense) unless tau > 0.
#pragma once

#include <cstdint>

namespace h3rt {

struct SparseAttention {
  // Router threshold, per (head, query tile; a tile is the rows one attention CTA computes: 192
  // with the Hopper kernel, 64 with the sm_120/121 one and in the CPU model) and 128-key block j:
  // j is computed when the z-score of its pooled score (mean q of the tile . mean k of key block
  // j, over the key blocks of that row) is >= tau. For Gaussian scores tau = 1 keeps about 16% of
  // the optional blocks. <= 0: dense. Exact rules: src/ops/attention_sparse/router.h.
  float tau = 0;
  int dense_blocks = 2;         // the first N transformer blocks stay dense
  bool video_rows_only = true;  // prefix query rows (text, audio, conditioning) stay dense
  int band = 1;                 // key blocks within +-band of the query tile always computed
  int64_t max_blocks = 0;       // cap on computed key blocks per query tile beyond the forced
                                // ones (0: none)
  bool enabled() const { return tau > 0; }
};

// What a forward's sparse attention computed (summed over its sparse blocks and heads).
struct SparseStats {
  int64_t key_blocks_total = 0;     // (query block, key block) pairs of the sparse blocks
  int64_t key_blocks_computed = 0;  // of which computed
  double fraction() const {
    return key_blocks_total ? double(key_blocks_computed) / double(key_blocks_total) : 1.0;
  }
};

}  // namespace h3rt
