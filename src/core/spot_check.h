// Spot checks of outputs too large to compare whole against a host reference (the self-test's
// release-shape cases): which rows to compare, and byte-exact comparison.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace h3rt {

// `fixed` (rows the caller chose, in [0, n)), then rows drawn from `g` until `count` distinct
// rows (count <= n).
inline std::vector<int64_t> spot_rows(int64_t n, std::vector<int64_t> fixed, size_t count,
                                      std::mt19937_64& g) {
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  while (fixed.size() < count) {
    const int64_t t = pick(g);
    if (std::find(fixed.begin(), fixed.end(), t) == fixed.end()) fixed.push_back(t);
  }
  return fixed;
}

// Elements of a[0, n) and b[0, n) whose bytes differ.
template <typename T>
int64_t byte_mismatches(const T* a, const T* b, int64_t n) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) m += std::memcmp(a + i, b + i, sizeof(T)) != 0;
  return m;
}

}  // namespace h3rt
