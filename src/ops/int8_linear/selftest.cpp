// The bound of the int8 self-test case (selftest.h): host code, tested on the CPU.
#include "ops/int8_linear/selftest.h"

namespace h3rt::ops {

std::string int8_selftest_failure(const Int8Selftest& r) {
  const auto differ = [&](int64_t n, const char* what) {
    return std::to_string(n) + " " + what + " of " + std::to_string(r.rows_checked) +
           " checked rows differ from the host reference (want 0)";
  };
  if (r.rows_checked <= 0) return "no row was checked";
  if (r.q_mismatches) return differ(r.q_mismatches, "quantized values");
  if (r.scale_mismatches) return differ(r.scale_mismatches, "row scales");
  if (r.y_mismatches) return differ(r.y_mismatches, "GEMM outputs");
  return "";
}

}  // namespace h3rt::ops
