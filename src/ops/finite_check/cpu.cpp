// finite_check on the host (finite_check.h): an OR over each chunk's exponent tests (branch-free,
// so the compiler vectorises it), then the index search only in a chunk that has a hit.
#include <algorithm>
#include <bit>

#include "ops/finite_check/finite_check.h"

namespace h3rt::ops {
namespace {

constexpr int64_t kChunk = 1024;

// Bit tests on the representation (std::isfinite may be folded away under fast-math).
bool bad(float v) {
  return (std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u;
}
bool bad(uint16_t v) {
  return (v & 0x7f80u) == 0x7f80u;
}

template <typename T>
int64_t first_bad(const T* x, int64_t n) {
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t e = std::min(n, b + kChunk);
    unsigned any = 0;
    for (int64_t i = b; i < e; ++i) any |= bad(x[i]);
    if (!any) continue;
    for (int64_t i = b; i < e; ++i)
      if (bad(x[i])) return i;
  }
  return -1;
}

}  // namespace

int64_t first_non_finite_cpu(const float* x, int64_t n) {
  return first_bad(x, n);
}

int64_t first_non_finite_bf16_cpu(const uint16_t* x, int64_t n) {
  return first_bad(x, n);
}

}  // namespace h3rt::ops
