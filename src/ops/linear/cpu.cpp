#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/linear/linear.h"

namespace h3rt::ops {

void linear_cpu(const LinearParams& p) {
  const int64_t xs = p.x_row_stride ? p.x_row_stride : p.in;
  const int64_t ys = p.y_row_stride ? p.y_row_stride : p.out;
  H3RT_CHECK(p.rows >= 0 && p.in > 0 && p.out > 0, "linear: bad dims rows=", p.rows, " in=", p.in,
             " out=", p.out);
  H3RT_CHECK(xs >= p.in && ys >= p.out, "linear: row stride smaller than the row");
  H3RT_CHECK(p.x && p.w && p.y, "linear: null pointer");
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* xr = p.x + r * xs;
    float* yr = p.y + r * ys;
    for (int64_t o = 0; o < p.out; ++o) {
      const float* wr = p.w + o * p.in;
      double acc = 0.0;
      for (int64_t i = 0; i < p.in; ++i) acc += static_cast<double>(xr[i]) * wr[i];
      if (p.bias) acc += p.bias[o];
      const float v = static_cast<float>(acc);
      yr[o] = p.round_bf16 ? round_bf16(v) : v;
    }
  }
}

}  // namespace h3rt::ops
