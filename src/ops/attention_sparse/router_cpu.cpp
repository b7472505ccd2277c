// The CPU reference router (router.h). Compiled with -ffp-contract=off (CMakeLists.txt): the
// GPU router does the same fp32 operations (router_rules.h) and must choose the same blocks.
#include <algorithm>

#include "h3rt/check.h"
#include "ops/attention_sparse/router.h"
#include "ops/attention_sparse/router_rules.h"

namespace h3rt::attention_sparse {
namespace {

// Pooled means of one head: [n][D] over groups of `group` rows of x.
std::vector<float> pool(const float* x, int64_t stride, int64_t h, const RouterShape& s,
                        int64_t group, int64_t n) {
  const int64_t D = s.head_dim;
  std::vector<float> out(n * D);
  for (int64_t g = 0; g < n; ++g) {
    const int64_t r0 = g * group, rows = std::min(group, s.seq - r0);
    const float* base = x + r0 * stride + h * D;
    for (int64_t d = 0; d < D; ++d)
      out[g * D + d] = rules::pooled_mean([&](int64_t i) { return base[i * stride + d]; }, rows);
  }
  return out;
}

// Scores [n_qtiles][n_kblocks] of head h.
std::vector<float> head_scores(const RouterInput& in, const RouterShape& s, int64_t h) {
  const int64_t nq = s.n_qtiles(), nk = s.n_kblocks(), D = s.head_dim;
  const std::vector<float> qb = pool(in.q, in.q_row_stride, h, s, s.q_tile, nq);
  const std::vector<float> kb = pool(in.k, in.k_row_stride, h, s, kKeyBlock, nk);
  std::vector<float> out(nq * nk);
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j)
      out[i * nk + j] = rules::dot([&](int64_t d) { return qb[i * D + d]; },
                                   [&](int64_t d) { return kb[j * D + d]; }, D);
  return out;
}

void check_input(const RouterInput& in, const RouterShape& s) {
  H3RT_CHECK(in.q && in.k, "sparse router: null q or k");
  H3RT_CHECK(in.q_row_stride >= s.heads * s.head_dim && in.k_row_stride >= s.heads * s.head_dim,
             "sparse router: row strides ", in.q_row_stride, " / ", in.k_row_stride,
             " < heads*head_dim = ", s.heads * s.head_dim);
}

// The list of one (head, tile) from its scores row; returns its count.
int32_t select_tile(const float* score, const RouterShape& s, const SparseAttention& cfg,
                    int64_t tile, bool head_dense, int32_t* list) {
  const int64_t nk = s.n_kblocks();
  rules::TileRule rule = rules::tile_rule(tile, s.q_tile, s.seq, s.prefix_rows, cfg.band,
                                          cfg.video_rows_only, kKeyBlock);
  rule.dense = rule.dense || head_dense;
  const rules::RowStats st = rules::row_stats(score, nk);
  std::vector<float> z(nk);
  std::vector<unsigned char> cand(nk);
  for (int64_t j = 0; j < nk; ++j) {
    z[j] = rules::z_score(score[j], st);
    cand[j] = !rule.forced(j) && z[j] >= cfg.tau;
  }
  int32_t n = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const bool optional =
        cand[j] &&
        (cfg.max_blocks <= 0 || rules::rank_of(j, z.data(), cand.data(), nk) < cfg.max_blocks);
    if (rule.forced(j) || optional) list[n++] = static_cast<int32_t>(j);
  }
  return n;
}

}  // namespace

void check_router_args(const RouterShape& s, const SparseAttention& cfg) {
  H3RT_CHECK(s.seq > 0 && s.heads > 0 && s.head_dim > 0 && s.q_tile > 0,
             "sparse router: empty shape (seq ", s.seq, ", heads ", s.heads, ", q_tile ", s.q_tile,
             ")");
  H3RT_CHECK(s.prefix_rows >= 0 && s.prefix_rows <= s.seq, "sparse router: prefix_rows ",
             s.prefix_rows, " outside [0, ", s.seq, "]");
  H3RT_CHECK(cfg.band >= 0, "sparse attention: band ", cfg.band, " must be >= 0");
  H3RT_CHECK(cfg.max_blocks >= 0, "sparse attention: max_blocks ", cfg.max_blocks, " must be >= 0");
  H3RT_CHECK(cfg.enabled(), "sparse attention: tau ", cfg.tau, " must be > 0 to route");
}

int64_t prefix_rows_of(const SequenceLayout& layout) {
  return layout.video_indices.empty() ? layout.seq_len() : layout.video_indices.front();
}

HostBlockLists full_block_lists(const RouterShape& s) {
  HostBlockLists out;
  out.shape = s;
  const int64_t tiles = s.heads * s.n_qtiles(), nk = s.n_kblocks();
  out.index.resize(tiles * nk);
  out.count.assign(tiles, static_cast<int32_t>(nk));
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t j = 0; j < nk; ++j) out.index[t * nk + j] = static_cast<int32_t>(j);
  out.stats = {tiles * nk, tiles * nk};
  return out;
}

std::vector<float> pooled_scores_cpu(const RouterInput& in, const RouterShape& s) {
  check_input(in, s);
  std::vector<float> out;
  for (int64_t h = 0; h < s.heads; ++h) {
    const std::vector<float> sc = head_scores(in, s, h);
    out.insert(out.end(), sc.begin(), sc.end());
  }
  return out;
}

HostBlockLists route_cpu(const RouterInput& in, const RouterShape& s, const SparseAttention& cfg) {
  check_router_args(s, cfg);
  check_input(in, s);
  HostBlockLists out;
  out.shape = s;
  const int64_t nq = s.n_qtiles(), nk = s.n_kblocks();
  out.index.assign(s.heads * nq * nk, 0);
  out.count.assign(s.heads * nq, 0);
  for (int64_t h = 0; h < s.heads; ++h) {
    const std::vector<float> sc = head_scores(in, s, h);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t t = h * nq + i;
      const bool head_dense = in.dense_heads && in.dense_heads[h];
      out.count[t] = select_tile(&sc[i * nk], s, cfg, i, head_dense, &out.index[t * nk]);
      out.stats.key_blocks_computed += out.count[t];
    }
  }
  out.stats.key_blocks_total = s.heads * nq * nk;
  return out;
}

}  // namespace h3rt::attention_sparse
