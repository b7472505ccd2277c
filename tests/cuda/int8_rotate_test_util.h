// The integer rotation form's fallback rule (ops/int8_linear/rotate_quantize.cuh) on the host,
// for the GPU tests that force Int8RotateMath::kInteger and count the units that fell back.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace h3rt::test {

// Units (512 columns of a row, as the team kernel and the fused producers split rows) whose
// integer rotation must fall back to double: some span of nonzero bf16 exponents over one
// group (G >= 16; G = 4: one lane's 16 columns) exceeds 45 - log2 G. x: rows of k bf16 bits at
// row stride ld.
inline int64_t expected_fallback_units(const std::vector<uint16_t>& x, int64_t rows, int64_t k,
                                       int64_t ld, int group) {
  int log2g = 0;
  while ((1 << log2g) < group) ++log2g;
  const int limit = 45 - log2g;
  const int64_t span_cols = std::max(group, 16);
  auto exp_of = [](uint32_t mag) { return std::max(static_cast<int>(mag >> 7), 1); };
  int64_t units = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t u = 0; u < k; u += 512) {
      bool fallback = false;
      for (int64_t c0 = u; c0 < std::min(u + 512, k); c0 += span_cols) {
        uint32_t lo = 0x8000, hi = 0;
        for (int64_t c = c0; c < c0 + span_cols; ++c) {
          const uint32_t mag = x[r * ld + c] & 0x7fffu;
          hi = std::max(hi, mag);
          if (mag) lo = std::min(lo, mag);
        }
        fallback |= lo != 0x8000 && exp_of(hi) - exp_of(lo) > limit;
      }
      units += fallback;
    }
  return units;
}

}  // namespace h3rt::test
