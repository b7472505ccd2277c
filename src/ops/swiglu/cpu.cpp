#include <cmath>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/swiglu/swiglu.h"

namespace h3rt::ops {

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

void swiglu_cpu(const SwigluParams& p) {
  H3RT_CHECK(p.in && p.out && p.ffn > 0 && p.rows >= 0, "swiglu: bad params");
  const int64_t is = p.in_row_stride ? p.in_row_stride : 2 * p.ffn;
  H3RT_CHECK(is >= 2 * p.ffn, "swiglu: row stride smaller than 2*ffn");
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* g = p.in + r * is;
    const float* v = g + p.ffn;
    float* o = p.out + r * p.ffn;
    for (int64_t j = 0; j < p.ffn; ++j) {
      const float s = silu(g[j]);
      o[j] = p.bf16 ? round_bf16(round_bf16(s) * v[j]) : s * v[j];
    }
  }
}

}  // namespace h3rt::ops
