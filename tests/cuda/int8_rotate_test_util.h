// The integer rotation form's tier rule (ops/int8_linear/rotate_quantize.cuh) on the host, for
// the GPU tests that force Int8RotateMath::kInteger and count the units of each tier.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/int8_linear/rotate_int32.h"

namespace h3rt::test {

// Units (512 columns of a row, as the team kernel and the fused producers split rows) that the
// integer form rotates in int64 (some group, G >= 16, or G = 4 one lane's 16 columns, outside the
// int32 tier: span of nonzero bf16 exponents > 14 or least exponent < 7, but every span within
// 45 - log2 G) and in double (some span beyond that). `int64_tier`: whether the GPU's code has
// the int64 tier (only where FP64 is slow: the integer form is the default there); without it
// those units take double too. x: rows of k bf16 bits at row stride ld.
struct RotateTiers {
  int64_t double_units = 0, int64_units = 0;
};
inline RotateTiers expected_rotate_tiers(const std::vector<uint16_t>& x, int64_t rows, int64_t k,
                                         int64_t ld, int group, bool int64_tier) {
  int log2g = 0;
  while ((1 << log2g) < group) ++log2g;
  const int limit = 45 - log2g;
  const int64_t span_cols = std::max(group, 16);
  auto exp_of = [](uint32_t mag) { return std::max(static_cast<int>(mag >> 7), 1); };
  RotateTiers t;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t u = 0; u < k; u += 512) {
      bool wide = false, not32 = false;
      for (int64_t c0 = u; c0 < std::min(u + 512, k); c0 += span_cols) {
        uint32_t lo = 0x8000, hi = 0;
        for (int64_t c = c0; c < c0 + span_cols; ++c) {
          const uint32_t mag = x[r * ld + c] & 0x7fffu;
          hi = std::max(hi, mag);
          if (mag) lo = std::min(lo, mag);
        }
        if (lo == 0x8000) continue;  // all zeros: any tier
        wide |= exp_of(hi) - exp_of(lo) > limit;
        not32 |= !ops::int8_detail::int32_tier(exp_of(lo), exp_of(hi));
      }
      t.double_units += wide || (not32 && !int64_tier);
      t.int64_units += not32 && !wide && int64_tier;
    }
  return t;
}

}  // namespace h3rt::test
