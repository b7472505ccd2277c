#include <algorithm>
#include <cmath>

#include "h3rt/check.h"
#include "ops/adaln_curve/adaln_curve.h"
#include "sampler/fp_exact.h"

namespace h3rt::ops {

void adaln_curve_embed_cpu(const AdalnCurveEmbedParams& p) {
  H3RT_CHECK(p.table && p.t && p.out && p.grid >= 2 && p.rank > 0 && p.count >= 0,
             "adaln_curve_embed: bad params (grid ", p.grid, ", rank ", p.rank, ")");
  for (int64_t m = 0; m < p.count; ++m) {
    const float t = std::clamp(p.t[m], 0.0f, 1.0f);
    const float pos = fp::mul(t, static_cast<float>(p.grid - 1));
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(pos)), p.grid - 2);
    const float w = fp::sub(pos, static_cast<float>(i0));  // exact
    const float* a = p.table + i0 * p.rank;
    const float* b = a + p.rank;
    float* out = p.out + m * p.rank;
    for (int64_t j = 0; j < p.rank; ++j) {
      const float d = fp::sub(b[j], a[j]);
      out[j] = w < 0.5f ? std::fma(w, d, a[j]) : std::fma(fp::sub(w, 1.0f), d, b[j]);
    }
  }
}

void curve_modulate_cpu(const CurveModulateParams& p) {
  H3RT_CHECK(
      p.n && p.y && p.shift && p.scale && p.dim > 0 && p.rows >= 0 && p.table_row_stride >= p.dim,
      "curve_modulate: bad params");
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t t = p.row_table_index ? p.row_table_index[r] : 0;
    const float* sh = p.shift + t * p.table_row_stride;
    const float* sc = p.scale + t * p.table_row_stride;
    for (int64_t j = 0; j < p.dim; ++j) {
      const float n = p.n[r * p.dim + j];
      p.y[r * p.dim + j] = fp::add(fp::mul(n, fp::add(1.0f, sc[j])), sh[j]);
    }
  }
}

}  // namespace h3rt::ops
