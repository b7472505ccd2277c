#include <cmath>
#include <vector>

#include "h3rt/check.h"
#include "ops/linear/linear.h"
#include "ops/swiglu/swiglu.h"
#include "ops/time_embedding/time_embedding.h"

namespace h3rt::ops {

void time_sinusoid_cpu(const TimeSinusoidParams& p) {
  H3RT_CHECK(p.t && p.out && p.dim > 0 && p.dim % 2 == 0, "time_sinusoid: bad params");
  const int64_t half = p.dim / 2;
  const float neg_log = static_cast<float>(-std::log(10000.0));
  for (int64_t m = 0; m < p.count; ++m) {
    for (int64_t i = 0; i < half; ++i) {
      const float e = neg_log * static_cast<float>(i) / static_cast<float>(half);
      const float arg = p.t[m] * std::exp(e);
      p.out[m * p.dim + i] = std::cos(arg);
      p.out[m * p.dim + half + i] = std::sin(arg);
    }
  }
}

void time_embedding_cpu(const TimeEmbeddingParams& p) {
  H3RT_CHECK(p.w_in && p.w_out && p.sinusoid && p.temb && p.hidden > 0 && p.embed > 0,
             "time_embedding: bad params");
  time_sinusoid_cpu({p.t, p.sinusoid, p.count, p.dim});
  std::vector<float> h(p.count * p.hidden);
  linear_cpu({.x = p.sinusoid,
              .w = p.w_in,
              .bias = p.b_in,
              .y = h.data(),
              .rows = p.count,
              .in = p.dim,
              .out = p.hidden});
  for (float& v : h) v = silu(v);
  linear_cpu({.x = h.data(),
              .w = p.w_out,
              .bias = p.b_out,
              .y = p.temb,
              .rows = p.count,
              .in = p.hidden,
              .out = p.embed});
}

}  // namespace h3rt::ops
