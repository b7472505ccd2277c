#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/gated_residual/gated_residual.h"

namespace h3rt::ops {

void gated_residual_cpu(const GatedResidualParams& p) {
  H3RT_CHECK(p.x && p.y && p.dim > 0 && p.rows >= 0, "gated_residual: bad params");
  H3RT_CHECK(!p.gate || p.table_row_stride >= p.dim, "gated_residual: table row stride");
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t t = p.row_table_index ? p.row_table_index[r] : 0;
    const float* g = p.gate ? p.gate + t * p.table_row_stride : nullptr;
    float* x = p.x + r * p.dim;
    const float* y = p.y + r * p.dim;
    for (int64_t j = 0; j < p.dim; ++j) {
      float d = g ? g[j] * y[j] : y[j];
      if (p.bf16) d = round_bf16(d);
      x[j] = p.bf16 ? round_bf16(x[j] + d) : x[j] + d;
    }
  }
}

}  // namespace h3rt::ops
