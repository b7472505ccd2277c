// Block-sparse attention: the router choosing, per (head, query tile), the key blocks (of
// kKeyBlock = 128 keys) a query tile attends to, and the block-list format the sparse kernels
// (attention_sage, the CPU model's fp32 attention) read.
//
// Router (h3rt/sparse.h gives the user-facing meaning). Query tile i holds rows
// [i*q_tile, min((i+1)*q_tile, S)), key block j keys [128 j, min(128 (j+1), S)); padded rows and
// keys take no part. Per head, in fp32 with one rounding per operation and a fixed order
// (router_rules.h; the GPU router does the same operations, so it chooses the same blocks):
//   qbar[d] = (sum over the tile's rows r, ascending, of q[r][d]) / rows   (k likewise: kbar_j)
//   score_j = fma chain over d = 0..D-1 ascending: acc = fma(qbar[d], kbar_j[d], acc), acc0 = 0
//   mu = (sum_j score_j, j ascending) / n;  var = (fma chain of (score_j - mu)^2) / n;
//   sd = sqrt(var);  z_j = (score_j - mu) / sd  (0 when sd == 0)
// Forced blocks: every j with 128 j < prefix_rows (a key block holding a prefix key), and the
// band: the key blocks overlapping the tile's rows, widened by `band` blocks either side. With
// video_rows_only a tile holding a prefix row (q0 < prefix_rows) takes every block. Optional
// blocks: the others with z_j >= tau; with max_blocks > 0 only the max_blocks highest z
// (ties: the lower index first). The list is the union, ascending; it is never empty. A head
// marked in `dense_heads` (the sparse check's decision, h3rt/hybrid.h) takes every block in
// every tile.
#pragma once

#include <cstdint>
#include <vector>

#include "h3rt/layout.h"
#include "h3rt/sparse.h"

namespace h3rt::attention_sparse {

constexpr int64_t kKeyBlock = 128;

// Block lists (host or device pointers): head h, query tile i (rows [i*q_tile, (i+1)*q_tile))
// computes the key blocks index[(h*n_qtiles + i)*n_kblocks + c], c < count[h*n_qtiles + i],
// ascending; 1 <= count <= n_kblocks.
struct BlockList {
  const int32_t* index = nullptr;  // [heads][n_qtiles][n_kblocks]
  const int32_t* count = nullptr;  // [heads][n_qtiles]
  int64_t heads = 0, q_tile = 0, n_qtiles = 0, n_kblocks = 0;
  bool enabled() const { return index != nullptr; }
};

struct RouterShape {
  int64_t seq = 0, heads = 0, head_dim = 128;
  int64_t q_tile = 0;       // query rows per tile: the sparse kernel's rows per CTA
  int64_t prefix_rows = 0;  // rows [0, prefix_rows): text, audio and conditioning (not generated)
  int64_t n_qtiles() const { return q_tile > 0 ? (seq + q_tile - 1) / q_tile : 0; }
  int64_t n_kblocks() const { return (seq + kKeyBlock - 1) / kKeyBlock; }
};

// Owning host block lists.
struct HostBlockLists {
  RouterShape shape;
  std::vector<int32_t> index, count;
  SparseStats stats;  // pairs computed / total over every head and tile
  BlockList view() const {
    return {index.data(), count.data(),     shape.heads,
            shape.q_tile, shape.n_qtiles(), shape.n_kblocks()};
  }
};

// Every key block for every tile (the dense computation as a list).
HostBlockLists full_block_lists(const RouterShape& shape);

// q and k: float rows, head h at columns [h*head_dim, (h+1)*head_dim) of each row.
struct RouterInput {
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0;  // elements
  const uint8_t* dense_heads = nullptr;        // optional [heads]: nonzero = every key block
};

// The CPU reference router (throws h3rt::Error for bad shapes or an options value out of range).
HostBlockLists route_cpu(const RouterInput& in, const RouterShape& shape,
                         const SparseAttention& cfg);

// The per-(head, tile) pooled scores the router ranks (score_j above),
// [heads][n_qtiles][n_kblocks]: for tests and diagnostics.
std::vector<float> pooled_scores_cpu(const RouterInput& in, const RouterShape& shape);

void check_router_args(const RouterShape& shape, const SparseAttention& cfg);

// The prefix of a packed layout: the rows before the first target video row (text, conditioning
// and target audio come first in packed order; every row when there is no target video).
int64_t prefix_rows_of(const SequenceLayout& layout);

}  // namespace h3rt::attention_sparse
