#include <cmath>
#include <vector>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"

namespace h3rt::ops {

namespace {

inline float rnd(float v, bool bf16) {
  return bf16 ? round_bf16(v) : v;
}

void head_rmsnorm(float* x, const float* w, int64_t d, float eps, bool bf16) {
  double ss = 0.0;
  for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float mean = static_cast<float>(ss / static_cast<double>(d));
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t j = 0; j < d; ++j) x[j] = rnd(x[j] * inv * (w ? w[j] : 1.0f), bf16);
}

// Rotate-half on the first R channels of one head; cos/sin already in the working precision.
void head_rope(float* x, const float* c, const float* s, int64_t rope_dim, bool bf16) {
  const int64_t h = rope_dim / 2;
  for (int64_t j = 0; j < h; ++j) {
    const float a = x[j], b = x[j + h];
    x[j] = rnd(rnd(a * c[j], bf16) - rnd(b * s[j], bf16), bf16);
    x[j + h] = rnd(rnd(b * c[j + h], bf16) + rnd(a * s[j + h], bf16), bf16);
  }
}

}  // namespace

void qk_norm_rope_cpu(const QkNormRopeParams& p) {
  H3RT_CHECK(p.qkv && p.rows >= 0 && p.heads > 0 && p.head_dim > 0, "qk_norm_rope: bad params");
  H3RT_CHECK(p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim, "qk_norm_rope: rope_dim ", p.rope_dim,
             " must be even and <= head_dim ", p.head_dim);
  const int64_t span = p.heads * p.head_dim;
  H3RT_CHECK(p.q_offset + span <= p.row_stride && p.k_offset + span <= p.row_stride,
             "qk_norm_rope: q/k columns exceed the row stride ", p.row_stride);
  H3RT_CHECK(!p.rope || (p.cos && p.sin), "qk_norm_rope: rope needs cos and sin tables");
  const int64_t ts = p.table_row_stride ? p.table_row_stride : p.rope_dim;
  std::vector<float> c(p.rope_dim), s(p.rope_dim);
  for (int64_t r = 0; r < p.rows; ++r) {
    if (p.rope) {
      for (int64_t j = 0; j < p.rope_dim; ++j) {
        c[j] = rnd(p.cos[r * ts + j], p.bf16);
        s[j] = rnd(p.sin[r * ts + j], p.bf16);
      }
    }
    float* row = p.qkv + r * p.row_stride;
    for (int which = 0; which < 2; ++which) {
      const int64_t off = which == 0 ? p.q_offset : p.k_offset;
      const float* w = which == 0 ? p.q_weight : p.k_weight;
      for (int64_t h = 0; h < p.heads; ++h) {
        float* x = row + off + h * p.head_dim;
        if (p.norm) head_rmsnorm(x, w, p.head_dim, p.eps, p.bf16);
        if (p.rope) head_rope(x, c.data(), s.data(), p.rope_dim, p.bf16);
      }
    }
  }
}

}  // namespace h3rt::ops
