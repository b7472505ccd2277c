#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/attention/attention.h"

namespace h3rt::ops {
namespace {

struct Strides {
  int64_t q, k, v, out;
  double scale;
};

// Scores of query row qi against keys [j, j + n), n <= 4: independent double chains, each
// summing its products in channel order (as one key at a time would).
void score_keys(const AttentionParams& p, const Strides& s, const float* qi, int64_t col, int64_t j,
                int64_t n, double* score) {
  const float* k[4];
  for (int64_t u = 0; u < 4; ++u) k[u] = p.k + (j + std::min(u, n - 1)) * s.k + col;
  double d[4] = {};
  for (int64_t c = 0; c < p.head_dim; ++c) {
    const double q = qi[c];
    for (int u = 0; u < 4; ++u) d[u] += q * k[u][c];
  }
  for (int64_t u = 0; u < n; ++u) score[j + u] = d[u] * s.scale;
}

// Block-sparse form: which keys the tile of row i attends to (all without a block list).
void key_mask(const AttentionParams& p, int64_t h, int64_t i, std::vector<char>& mask) {
  const attention_sparse::BlockList* b = p.blocks;
  if (!b) return;
  std::fill(mask.begin(), mask.end(), 0);
  const int64_t t = h * b->n_qtiles + i / b->q_tile, kb = attention_sparse::kKeyBlock;
  for (int32_t c = 0; c < b->count[t]; ++c) {
    const int64_t j0 = b->index[t * b->n_kblocks + c] * kb;
    std::fill(mask.begin() + j0, mask.begin() + std::min(j0 + kb, p.rows), 1);
  }
}

// Output rows [i0, i1) of head h.
void attend_rows(const AttentionParams& p, const Strides& s, int64_t h, int64_t i0, int64_t i1) {
  std::vector<double> score(p.rows), acc(p.head_dim);
  std::vector<char> mask(p.rows, 1);
  const int64_t col = h * p.head_dim;
  for (int64_t i = i0; i < i1; ++i) {
    const float* qi = p.q + i * s.q + col;
    for (int64_t j = 0; j < p.rows; j += 4)
      score_keys(p, s, qi, col, j, std::min<int64_t>(4, p.rows - j), score.data());
    key_mask(p, h, i, mask);
    double mx = -INFINITY;
    for (int64_t j = 0; j < p.rows; ++j)
      if (mask[j]) mx = std::max(mx, score[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < p.rows; ++j)
      if (mask[j]) sum += (score[j] = std::exp(score[j] - mx));
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < p.rows; ++j) {
      if (!mask[j]) continue;
      const float* vj = p.v + j * s.v + col;
      for (int64_t c = 0; c < p.head_dim; ++c) acc[c] += score[j] * vj[c];
    }
    float* oi = p.out + i * s.out + col;
    for (int64_t c = 0; c < p.head_dim; ++c) {
      const float o = static_cast<float>(acc[c] / sum);
      oi[c] = p.round_bf16 ? round_bf16(o) : o;
    }
  }
}

// Work unit u of `units` (heads x blocks of the rows [r0, r1)), ranges [u0, u1).
void attend_units(const AttentionParams& p, const Strides& s, int64_t r0, int64_t r1,
                  int64_t blocks, int64_t u0, int64_t u1) {
  const int64_t n = r1 - r0;
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t h = u / blocks, b = u % blocks;
    attend_rows(p, s, h, r0 + n * b / blocks, r0 + n * (b + 1) / blocks);
  }
}

}  // namespace

// Every output row is computed by one thread, in the same operation order whatever the thread
// count, so results do not depend on it.
void attention_cpu(const AttentionParams& p) {
  H3RT_CHECK(p.q && p.k && p.v && p.out && p.rows > 0 && p.heads > 0 && p.head_dim > 0,
             "attention: bad params");
  const int64_t inner = p.heads * p.head_dim;
  const Strides s{p.q_row_stride ? p.q_row_stride : inner, p.k_row_stride ? p.k_row_stride : inner,
                  p.v_row_stride ? p.v_row_stride : inner,
                  p.out_row_stride ? p.out_row_stride : inner,
                  p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim))};
  H3RT_CHECK(s.q >= inner && s.k >= inner && s.v >= inner && s.out >= inner,
             "attention: row stride smaller than heads*head_dim");
  if (p.blocks)
    H3RT_CHECK(p.blocks->heads == p.heads && p.blocks->q_tile > 0 &&
                   p.blocks->n_qtiles == (p.rows + p.blocks->q_tile - 1) / p.blocks->q_tile &&
                   p.blocks->n_kblocks ==
                       (p.rows + attention_sparse::kKeyBlock - 1) / attention_sparse::kKeyBlock,
               "attention: block lists of ", p.blocks->heads, " heads x ", p.blocks->n_qtiles,
               " tiles x ", p.blocks->n_kblocks, " key blocks do not fit ", p.rows, " rows, ",
               p.heads, " heads");
  const int64_t r0 = p.row_begin, r1 = p.row_end ? p.row_end : p.rows;
  H3RT_CHECK(r0 >= 0 && r0 < r1 && r1 <= p.rows, "attention: output rows [", r0, ", ", r1,
             ") outside [0, ", p.rows, ")");
  // Work units are heads x row blocks, one block per thread where there are few heads.
  const double work = 2.0 * static_cast<double>(r1 - r0) * p.rows * p.head_dim * p.heads;
  const int64_t threads = threads_for_work(work);
  const int64_t blocks = std::min<int64_t>(r1 - r0, threads);
  parallel_ranges(p.heads * blocks, threads,
                  [&](int64_t u0, int64_t u1) { attend_units(p, s, r0, r1, blocks, u0, u1); });
}

}  // namespace h3rt::ops
