// Device fill with h3rt's seeded Gaussian noise (contract: sampler/noise.h). Bit-identical to
// the host's gaussian_noise() for the same (seed, stream, offset, n) on every architecture:
// the kernel runs the same header code, with _rn intrinsics that are never fused into FMAs.
// Layout: out[k] = value (offset + k), k < n, a contiguous float32 device buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace h3rt {

struct GaussianNoiseParams {
  uint64_t seed = 0;
  uint64_t stream = 0;
  int64_t offset = 0;    // first sequence index, >= 0
  float* out = nullptr;  // device pointer, n floats
  int64_t n = 0;
};

// Enqueues the fill on `s`; returns cudaErrorInvalidValue for a negative offset or count.
cudaError_t gaussian_noise_cuda(const GaussianNoiseParams& p, cudaStream_t s);

}  // namespace h3rt
