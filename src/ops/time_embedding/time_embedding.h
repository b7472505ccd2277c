// time_embedding (README section 5, step 3), all float32:
//   f_i = expf(float32(-ln 10000) * i / half), i < half = dim/2
//   sinusoid = [cos(t*f_0..half-1) | sin(t*f_0..half-1)]   (cos first; t in [0, 1], unscaled)
//   temb = proj_out(silu(proj_in(sinusoid)))
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct TimeSinusoidParams {
  const float* t = nullptr;  // [count]
  float* out = nullptr;      // [count, dim]
  int64_t count = 0, dim = 256;
};

void time_sinusoid_cpu(const TimeSinusoidParams& p);

struct TimeEmbeddingParams {
  const float* t = nullptr;      // [count]
  const float* w_in = nullptr;   // [hidden, dim]
  const float* b_in = nullptr;   // [hidden]
  const float* w_out = nullptr;  // [embed, hidden]
  const float* b_out = nullptr;  // [embed]
  float* sinusoid = nullptr;     // [count, dim] output (also the MLP input)
  float* temb = nullptr;         // [count, embed] output
  int64_t count = 0, dim = 256, hidden = 0, embed = 0;
};

void time_embedding_cpu(const TimeEmbeddingParams& p);

}  // namespace h3rt::ops
