// The Sage op on the current GPU against its CPU references: the first case of `h3rt selftest`
// (h3rt/selftest.h). The bounds are the GPU suite's (tests/cuda/test_attention_sage.cu).
#pragma once

#include <cstdint>
#include <string>

namespace h3rt::attention_sage {

struct SageSelftest {
  std::string variant;  // the kernel the device ran (sage_resolve_variant(automatic))
  int64_t seq = 0, heads = 0;
  int64_t prepass_mismatches = 0;  // pre-pass output elements differing from the CPU reference
  int64_t non_finite = 0;          // output values that are NaN or infinite
  double rel_l2_sage = 0;          // output against the CPU Sage reference (RowSum::p8)
  double rel_l2_exact = 0, cosine_exact = 0;  // output against fp64 attention
  double ref_rel_l2_exact = 0;                // that CPU Sage reference against fp64 attention
  // Above kSampledFrom rows the output is compared on `rows_checked` sampled rows only, against
  // the CPU Sage reference (whole rows would take minutes), without the fp64 figures.
  int64_t rows_checked = 0;
  bool exact_checked = true;
};
inline constexpr int64_t kSampledFrom = 4096;

// "" when `r` is within the bounds: no pre-pass mismatch, every value finite, rel_l2_sage <=
// 4e-3 and, when exact_checked, rel_l2_exact <= min(0.05, 1.1 * ref_rel_l2_exact + 2e-3) and
// cosine_exact >= 0.999; else the first bound missed, with both figures.
std::string sage_selftest_failure(const SageSelftest& r);

// The pre-pass and the attention kernel as the model dispatches them (automatic choices) on
// bf16 N(0, 1) Q/K/V rows (S = seq, `heads` heads, a padded row stride) drawn from `seed`. The
// whole pre-pass is compared; above kSampledFrom rows the output on 32 rows (the first and last
// ones, both sides of the 64- and 192-row tile edges, the rest drawn from `seed`). CUDA builds
// only; throws on a CUDA error.
SageSelftest run_sage_selftest(int64_t seq, int64_t heads, uint64_t seed);

}  // namespace h3rt::attention_sage
