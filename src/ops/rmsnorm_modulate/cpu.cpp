#include <cmath>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/rmsnorm_modulate/rmsnorm_modulate.h"

namespace h3rt::ops {

namespace {

// Round to bf16 in bf16 mode, identity in fp32 mode: each elementwise op of the reference's bf16
// run writes a bf16 tensor.
inline float rnd(float v, bool bf16) {
  return bf16 ? round_bf16(v) : v;
}

}  // namespace

void rmsnorm_modulate_cpu(const RmsNormModulateParams& p) {
  const int64_t xs = p.x_row_stride ? p.x_row_stride : p.dim;
  const int64_t ys = p.y_row_stride ? p.y_row_stride : p.dim;
  H3RT_CHECK(p.x && p.y && p.dim > 0 && p.rows >= 0, "rmsnorm_modulate: bad params");
  H3RT_CHECK((p.shift == nullptr) == (p.scale == nullptr),
             "rmsnorm_modulate: shift and scale come together");
  const bool modulate = p.scale != nullptr;
  H3RT_CHECK(!modulate || p.table_row_stride >= p.dim, "rmsnorm_modulate: table row stride");
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* xr = p.x + r * xs;
    float* yr = p.y + r * ys;
    double ss = 0.0;
    for (int64_t j = 0; j < p.dim; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    // mean(x^2) is a float32 value in the reference; rsqrt of it in float32.
    const float mean = static_cast<float>(ss / static_cast<double>(p.dim));
    const float inv = 1.0f / std::sqrt(mean + p.eps);
    const int64_t t = p.row_table_index ? p.row_table_index[r] : 0;
    const float* sh = modulate ? p.shift + t * p.table_row_stride : nullptr;
    const float* sc = modulate ? p.scale + t * p.table_row_stride : nullptr;
    for (int64_t j = 0; j < p.dim; ++j) {
      const float w = p.weight ? p.weight[j] : 1.0f;
      const float n = rnd(xr[j] * inv * w, p.bf16);
      if (p.norm_out) p.norm_out[r * p.dim + j] = n;
      yr[j] = modulate ? rnd(rnd(n * rnd(1.0f + sc[j], p.bf16), p.bf16) + sh[j], p.bf16) : n;
    }
  }
}

}  // namespace h3rt::ops
