// The int8 W8A8 path on the current GPU at a release shape against the host reference: a case
// of `h3rt selftest` (h3rt/selftest.h). Rotate + quantize of every activation row and the int8
// GEMM with its epilogue are bit-exact with include/h3rt/int8.h, so sampled rows must match
// byte for byte.
#pragma once

#include <cstdint>
#include <string>

namespace h3rt::ops {

struct Int8Selftest {
  std::string quantizer, gemm;  // the kernels the device ran (kAuto resolved)
  int64_t rows = 0, in = 0, out = 0, group = 0;
  int64_t rows_checked = 0;
  int64_t q_mismatches = 0, scale_mismatches = 0, y_mismatches = 0;  // over the checked rows
};

// "" when every checked byte matched, else which output differed and in how many elements.
std::string int8_selftest_failure(const Int8Selftest& r);

// Random bf16 activations [rows, in] (uniform in [-4, 4)), int8 weights [out, in] with per-row
// scales and a bf16 bias, drawn from `seed`; on the device: int8_quantize_rows_cuda (group) and
// int8_linear_cuda, automatic paths; then 16 rows (the first, the last, both sides of the
// 128-row tile edges near the start, the rest drawn from `seed`) against int8_quantize_rows and
// int8_linear on the host. CUDA builds only; throws on a CUDA error.
Int8Selftest run_int8_selftest(int64_t rows, int64_t in, int64_t out, int group, uint64_t seed);

}  // namespace h3rt::ops
