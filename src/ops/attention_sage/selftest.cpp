// The bounds of the Sage self-test case (selftest.h); host code, tested on the CPU.
#include "ops/attention_sage/selftest.h"

#include <algorithm>
#include <cstdio>

namespace h3rt::attention_sage {

std::string sage_selftest_failure(const SageSelftest& r) {
  char b[200];
  if (r.prepass_mismatches != 0) {
    std::snprintf(b, sizeof b, "%lld pre-pass values differ from the CPU reference (want 0)",
                  static_cast<long long>(r.prepass_mismatches));
    return b;
  }
  if (r.non_finite != 0) {
    std::snprintf(b, sizeof b, "%lld output values are NaN or infinite",
                  static_cast<long long>(r.non_finite));
    return b;
  }
  if (!(r.rel_l2_sage <= 4e-3)) {
    std::snprintf(b, sizeof b, "rel L2 %.3g against the CPU Sage reference (bound 4e-3)",
                  r.rel_l2_sage);
    return b;
  }
  if (!r.exact_checked) return "";
  const double exact_bound = std::min(0.05, 1.1 * r.ref_rel_l2_exact + 2e-3);
  if (!(r.rel_l2_exact <= exact_bound)) {
    std::snprintf(b, sizeof b, "rel L2 %.4f against fp64 attention (bound %.4f)", r.rel_l2_exact,
                  exact_bound);
    return b;
  }
  if (!(r.cosine_exact >= 0.999)) {
    std::snprintf(b, sizeof b, "cosine %.6f against fp64 attention (bound 0.999)", r.cosine_exact);
    return b;
  }
  return "";
}

}  // namespace h3rt::attention_sage
