#include <cmath>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/fp8_quantize/fp8_quantize.h"

namespace h3rt::ops {

float fp8_absmax_cpu(const float* x, int64_t rows, int64_t cols, int64_t x_row_stride) {
  const int64_t ld = x_row_stride ? x_row_stride : cols;
  float m = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, std::fabs(x[r * ld + c]));
  return m;
}

void fp8_quantize_dynamic_cpu(const Fp8QuantizeParams& p) {
  const int64_t xs = p.x_row_stride ? p.x_row_stride : p.cols;
  const int64_t qs = p.q_row_stride ? p.q_row_stride : p.cols;
  H3RT_CHECK(p.rows >= 0 && p.cols > 0 && xs >= p.cols && qs >= p.cols,
             "fp8_quantize_dynamic_cpu: bad shape rows ", p.rows, ", cols ", p.cols,
             ", row strides ", xs, " / ", qs);
  H3RT_CHECK((p.x && p.q) || p.rows == 0, "fp8_quantize_dynamic_cpu: null x or q");
  H3RT_CHECK(p.scale, "fp8_quantize_dynamic_cpu: null scale");
  const float amax = fp8_absmax_cpu(p.x, p.rows, p.cols, xs);
  const float s = fp8_dynamic_scale(amax);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c)
      p.q[r * qs + c] = f32_to_e4m3_satfinite(p.x[r * xs + c] / s);
  *p.scale = s;
  if (p.amax) *p.amax = amax;
}

}  // namespace h3rt::ops
