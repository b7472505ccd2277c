#include <algorithm>

#include "core/parallel.h"
#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/linear/linear.h"

namespace h3rt::ops {
namespace {

constexpr int64_t kGroup = 8;  // outputs computed together

// Outputs [o0, o0 + n) of one row, n <= kGroup. The n double sums are independent chains, so
// their adds overlap; each still adds its products in input order, exactly as one output at a
// time would (the float x float products are exact in double).
void dot_group(const LinearParams& p, const float* xr, float* yr, int64_t o0, int64_t n) {
  double acc[kGroup] = {};
  const float* w[kGroup];
  for (int64_t k = 0; k < kGroup; ++k) w[k] = p.w + (o0 + std::min(k, n - 1)) * p.in;
  for (int64_t i = 0; i < p.in; ++i) {
    const double xi = xr[i];
    for (int64_t k = 0; k < kGroup; ++k) acc[k] += xi * w[k][i];
  }
  for (int64_t k = 0; k < n; ++k) {
    double a = acc[k];
    if (p.bias) a += p.bias[o0 + k];
    const float v = static_cast<float>(a);
    yr[o0 + k] = p.round_bf16 ? round_bf16(v) : v;
  }
}

// Output groups [g0, g1) of every row.
void linear_groups(const LinearParams& p, int64_t xs, int64_t ys, int64_t g0, int64_t g1) {
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t g = g0; g < g1; ++g)
      dot_group(p, p.x + r * xs, p.y + r * ys, g * kGroup, std::min(kGroup, p.out - g * kGroup));
}

}  // namespace

void linear_cpu(const LinearParams& p) {
  const int64_t xs = p.x_row_stride ? p.x_row_stride : p.in;
  const int64_t ys = p.y_row_stride ? p.y_row_stride : p.out;
  H3RT_CHECK(p.rows >= 0 && p.in > 0 && p.out > 0, "linear: bad dims rows=", p.rows, " in=", p.in,
             " out=", p.out);
  H3RT_CHECK(xs >= p.in && ys >= p.out, "linear: row stride smaller than the row");
  H3RT_CHECK(p.w && (p.rows == 0 || (p.x && p.y)), "linear: null pointer");  // no rows: no x, y
  // Large products are split over threads by output groups. Every output is still computed by
  // one thread in one order, so the result does not depend on the thread count.
  const int64_t groups = (p.out + kGroup - 1) / kGroup;
  const double work = static_cast<double>(p.rows) * p.in * p.out;
  parallel_ranges(groups, threads_for_work(work),
                  [&](int64_t g0, int64_t g1) { linear_groups(p, xs, ys, g0, g1); });
}

}  // namespace h3rt::ops
