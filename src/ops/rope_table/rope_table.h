// rope_table: cos/sin tables [rows, 6*freqs] of the 3-axis (t, h, w) rotary embedding
// (README section 5, step 1). Per row, p = float32(position) for each axis; the 3*freqs angles
// [p_t*inv_freq | p_h*inv_freq | p_w*inv_freq] are single float32 multiplies (never float64:
// the error grows with the position), duplicated to [a | a], then cosf/sinf.
#pragma once

#include <cstdint>
#include <vector>

namespace h3rt::ops {

// inv_freq[i] = 1 / 10000^(2i / (2*freqs)) in float32, as the reference builds it.
std::vector<float> rope_inv_freq(int64_t freqs, float theta = 10000.0f);

struct RopeTableParams {
  const double* positions = nullptr;  // [rows, 3] (t, h, w)
  const float* inv_freq = nullptr;    // [freqs]
  float* cos = nullptr;               // [rows, 6*freqs]
  float* sin = nullptr;
  int64_t rows = 0, freqs = 16;
};

void rope_table_cpu(const RopeTableParams& p);

}  // namespace h3rt::ops
