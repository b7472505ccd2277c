#include <algorithm>
#include <cmath>
#include <vector>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/attention/attention.h"

namespace h3rt::ops {

void attention_cpu(const AttentionParams& p) {
  H3RT_CHECK(p.q && p.k && p.v && p.out && p.rows > 0 && p.heads > 0 && p.head_dim > 0,
             "attention: bad params");
  const int64_t inner = p.heads * p.head_dim;
  const int64_t qs = p.q_row_stride ? p.q_row_stride : inner;
  const int64_t ks = p.k_row_stride ? p.k_row_stride : inner;
  const int64_t vs = p.v_row_stride ? p.v_row_stride : inner;
  const int64_t os = p.out_row_stride ? p.out_row_stride : inner;
  H3RT_CHECK(qs >= inner && ks >= inner && vs >= inner && os >= inner,
             "attention: row stride smaller than heads*head_dim");
  const double scale = p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  std::vector<double> score(p.rows), acc(p.head_dim);
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t col = h * p.head_dim;
    for (int64_t i = 0; i < p.rows; ++i) {
      const float* qi = p.q + i * qs + col;
      double mx = -INFINITY;
      for (int64_t j = 0; j < p.rows; ++j) {
        const float* kj = p.k + j * ks + col;
        double d = 0.0;
        for (int64_t c = 0; c < p.head_dim; ++c) d += static_cast<double>(qi[c]) * kj[c];
        score[j] = d * scale;
        mx = std::max(mx, score[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < p.rows; ++j) sum += (score[j] = std::exp(score[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < p.rows; ++j) {
        const float* vj = p.v + j * vs + col;
        for (int64_t c = 0; c < p.head_dim; ++c) acc[c] += score[j] * vj[c];
      }
      float* oi = p.out + i * os + col;
      for (int64_t c = 0; c < p.head_dim; ++c) {
        const float o = static_cast<float>(acc[c] / sum);
        oi[c] = p.round_bf16 ? round_bf16(o) : o;
      }
    }
  }
}

}  // namespace h3rt::ops
