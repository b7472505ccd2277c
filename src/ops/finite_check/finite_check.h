// finite_check: where a buffer holds NaN or Inf (--check-finite). A NaN in a weight or an input
// spreads to every later stage, so the first stage whose output is non-finite names the culprit.
// The test is on the bits (exponent all ones), so it cannot be optimised away and treats every
// NaN payload and both infinities alike.
#pragma once

#include <cstdint>

namespace h3rt::ops {

// Index of the first NaN or Inf of x[0, n), or -1 when all are finite.
int64_t first_non_finite_cpu(const float* x, int64_t n);
// The same over bf16 bit patterns.
int64_t first_non_finite_bf16_cpu(const uint16_t* x, int64_t n);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace h3rt::ops {

// What a flag holds while nothing was flagged: the int that cudaMemsetAsync(flag, 0x7f, 4)
// writes, above any tag.
inline constexpr int kFiniteFlagClear = 0x7f7f7f7f;

// GPU check of n contiguous elements (bf16 when `bf16`, else float32) at device pointer x: if
// any is NaN or Inf, atomically lowers *flag to min(*flag, tag) (tags < kFiniteFlagClear). One
// launch, no host synchronisation, nothing but the flag written: capturable in a CUDA graph.
// Any alignment; reads 16-byte vectors where x is 16-byte aligned.
cudaError_t flag_non_finite_cuda(const void* x, bool bf16, int64_t n, int tag, int* flag,
                                 cudaStream_t stream);

}  // namespace h3rt::ops
#endif
