// finite_check on the host (finite_check.h).
#include <cstring>

#include "ops/finite_check/finite_check.h"

namespace h3rt::ops {

int64_t first_non_finite_cpu(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return i;
  }
  return -1;
}

int64_t first_non_finite_bf16_cpu(const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if ((x[i] & 0x7f80u) == 0x7f80u) return i;
  return -1;
}

}  // namespace h3rt::ops
