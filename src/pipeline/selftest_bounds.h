// The bounds of the self-test's forward cases (h3rt/selftest.h), apart from the GPU runs so the
// CPU suite can check that they fail on wrong data.
#pragma once

#include <string>

#include "h3rt/memory.h"

namespace h3rt::selftest_detail {

struct VelocityError {
  double mean_abs = 0, max_abs = 0, rel_l2 = 0, cosine = 1;
};
// `got` against `ref` (the same length; a length mismatch or a non-finite value gives infinite
// errors and cosine 0).
VelocityError velocity_error(const FloatVec& got, const FloatVec& ref);

// "" when the GPU forward's error is within the GPU suite's rule for a modality: mean <= 2x and
// max <= 3x the CPU bf16 forward's error against the same fp32 reference; else what is not.
std::string bf16_rule_failure(const VelocityError& gpu, const VelocityError& cpu_bf16,
                              const char* modality);
// "" when a forward with Sage attention is within rel L2 <= 0.05 and cosine >= 0.999 of the CPU
// fp32 forward (exact attention); else what is not. The tiny model on an H100 measured rel L2
// 0.0045-0.0051 (bench/RESULTS.md, session 37): the bound has a 10x margin.
std::string sage_forward_failure(const VelocityError& gpu, const char* modality);

}  // namespace h3rt::selftest_detail
