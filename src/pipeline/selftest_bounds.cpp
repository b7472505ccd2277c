// The self-test's forward bounds (selftest_bounds.h).
#include "pipeline/selftest_bounds.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/pair_sums.h"

namespace h3rt::selftest_detail {

VelocityError velocity_error(const FloatVec& got, const FloatVec& ref) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  VelocityError e;
  PairSums s;
  double sum = 0;
  bool bad = got.size() != ref.size() || got.empty();
  for (size_t i = 0; !bad && i < got.size(); ++i) {
    const double g = got[i], r = ref[i], d = std::fabs(g - r);
    bad = !std::isfinite(g) || !std::isfinite(r);
    sum += d, e.max_abs = std::max(e.max_abs, d);
    s.add(r, g);
  }
  if (bad) return {kInf, kInf, kInf, 0.0};
  e.mean_abs = sum / static_cast<double>(got.size());
  e.rel_l2 = s.rel_l2();
  e.cosine = s.cosine();
  return e;
}

std::string bf16_rule_failure(const VelocityError& gpu, const VelocityError& cpu,
                              const char* modality) {
  char b[200];
  if (!(gpu.mean_abs <= 2.0 * cpu.mean_abs)) {
    std::snprintf(b, sizeof b, "%s mean |error| %.3g > 2x the CPU bf16 forward's %.3g", modality,
                  gpu.mean_abs, cpu.mean_abs);
    return b;
  }
  if (!(gpu.max_abs <= 3.0 * cpu.max_abs)) {
    std::snprintf(b, sizeof b, "%s max |error| %.3g > 3x the CPU bf16 forward's %.3g", modality,
                  gpu.max_abs, cpu.max_abs);
    return b;
  }
  return "";
}

std::string sage_forward_failure(const VelocityError& gpu, const char* modality) {
  char b[200];
  if (!(gpu.rel_l2 <= 0.05 && gpu.cosine >= 0.999)) {
    std::snprintf(b, sizeof b, "%s rel L2 %.3g, cosine %.5f (bounds 0.05, 0.999)", modality,
                  gpu.rel_l2, gpu.cosine);
    return b;
  }
  return "";
}

}  // namespace h3rt::selftest_detail
