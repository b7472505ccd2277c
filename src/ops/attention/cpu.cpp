#include <algorithm>
#include <cmath>
#include <functional>
#include <system_error>
#include <thread>
#include <vector>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/attention/attention.h"

namespace h3rt::ops {
namespace {

struct Strides {
  int64_t q, k, v, out;
  double scale;
};

// Scores of query row qi against keys [j, j + 4): four independent double chains, each summing
// its products in channel order (as one key at a time would).
void scores4(const AttentionParams& p, const Strides& s, const float* qi, int64_t col, int64_t j,
             double* score) {
  const float* k[4];
  for (int u = 0; u < 4; ++u) k[u] = p.k + (j + u) * s.k + col;
  double d[4] = {};
  for (int64_t c = 0; c < p.head_dim; ++c) {
    const double q = qi[c];
    for (int u = 0; u < 4; ++u) d[u] += q * k[u][c];
  }
  for (int u = 0; u < 4; ++u) score[j + u] = d[u] * s.scale;
}

// Output rows [i0, i1) of head h.
void attend_rows(const AttentionParams& p, const Strides& s, int64_t h, int64_t i0, int64_t i1) {
  std::vector<double> score(p.rows), acc(p.head_dim);
  const int64_t col = h * p.head_dim, full = p.rows / 4 * 4;
  for (int64_t i = i0; i < i1; ++i) {
    const float* qi = p.q + i * s.q + col;
    for (int64_t j = 0; j < full; j += 4) scores4(p, s, qi, col, j, score.data());
    for (int64_t j = full; j < p.rows; ++j) {
      const float* kj = p.k + j * s.k + col;
      double d = 0.0;
      for (int64_t c = 0; c < p.head_dim; ++c) d += static_cast<double>(qi[c]) * kj[c];
      score[j] = d * s.scale;
    }
    double mx = -INFINITY;
    for (int64_t j = 0; j < p.rows; ++j) mx = std::max(mx, score[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < p.rows; ++j) sum += (score[j] = std::exp(score[j] - mx));
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < p.rows; ++j) {
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

// Work unit u of `units` (heads x row blocks), ranges [u0, u1).
void attend_units(const AttentionParams& p, const Strides& s, int64_t blocks, int64_t u0,
                  int64_t u1) {
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t h = u / blocks, b = u % blocks;
    attend_rows(p, s, h, p.rows * b / blocks, p.rows * (b + 1) / blocks);
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
  // Threads get at least ~1M multiply-adds each (2 * rows^2 * head_dim per head).
  const double work = 2.0 * static_cast<double>(p.rows) * p.rows * p.head_dim * p.heads;
  const int64_t hw = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  const int64_t threads = std::min(hw, static_cast<int64_t>(work / 1e6) + 1);
  const int64_t blocks = std::min<int64_t>(p.rows, threads), units = p.heads * blocks;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t u0 = units * t / threads, u1 = units * (t + 1) / threads;
    try {
      pool.emplace_back(attend_units, std::cref(p), std::cref(s), blocks, u0, u1);
    } catch (const std::system_error&) {  // no thread to be had: this one does the share
      attend_units(p, s, blocks, u0, u1);
    }
  }
  attend_units(p, s, blocks, 0, units / threads);
  for (std::thread& t : pool) t.join();
}

}  // namespace h3rt::ops
