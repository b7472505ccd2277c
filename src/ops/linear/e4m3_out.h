// An optional e4m3 output of a producer (norm+modulate, SwiGLU) for the fp8 GEMM that consumes
// it, with the layer's static input scale s: q = e4m3_satfinite(float(y) / s) of the bf16 y the
// producer computes (IEEE division, round to nearest even), bit-identical to writing y and running
// quantize_e4m3_cuda on it (linear.h), which uses the same device code (e4m3_out.cuh). The bf16
// intermediate then need not reach memory. Constraints: q 8-byte aligned, q_row_stride a multiple
// of 8 bytes.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_fp8.h>

#include <cstdint>

#include "h3rt/check.h"

namespace h3rt::ops {

struct E4m3Out {
  __nv_fp8_e4m3* q = nullptr;    // [rows, cols], row stride q_row_stride (0: cols); null: off
  int64_t q_row_stride = 0;      // elements (bytes)
  const float* scale = nullptr;  // device scalar s
  bool enabled() const { return q != nullptr; }
};

// Validates an enabled E4m3Out (throws naming `op`).
inline void check_e4m3_out(const E4m3Out& o, const char* op) {
  H3RT_CHECK(o.scale && reinterpret_cast<uintptr_t>(o.q) % 8 == 0 && o.q_row_stride % 8 == 0, op,
             ": the e4m3 output needs a scale, an 8-byte aligned q and a row stride that is a "
             "multiple of 8");
}

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
