#include <cmath>

#include "h3rt/check.h"
#include "ops/rope_table/rope_table.h"

namespace h3rt::ops {

std::vector<float> rope_inv_freq(int64_t freqs, float theta) {
  std::vector<float> f(freqs);
  const float dim = static_cast<float>(2 * freqs);
  for (int64_t i = 0; i < freqs; ++i) {
    const float e = static_cast<float>(2 * i) / dim;  // exact: arange(0, 2F, 2) / 2F
    f[i] = 1.0f / std::pow(theta, e);
  }
  return f;
}

void rope_table_cpu(const RopeTableParams& p) {
  H3RT_CHECK(p.positions && p.inv_freq && p.cos && p.sin && p.freqs > 0, "rope_table: bad params");
  const int64_t half = 3 * p.freqs, width = 2 * half;
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int axis = 0; axis < 3; ++axis) {
      const float pos = static_cast<float>(p.positions[r * 3 + axis]);
      for (int64_t i = 0; i < p.freqs; ++i) {
        const float a = pos * p.inv_freq[i];
        const int64_t j = axis * p.freqs + i;
        const float c = std::cos(a), s = std::sin(a);
        p.cos[r * width + j] = p.cos[r * width + j + half] = c;
        p.sin[r * width + j] = p.sin[r * width + j + half] = s;
      }
    }
  }
}

}  // namespace h3rt::ops
