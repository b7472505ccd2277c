// First-block step caching on the GPU forward session (h3rt/hybrid.h): the kernels around
// block 0. Every launch is stream-ordered and capturable; the only value the host reads is the
// relative L1 (one double), copied to pinned memory by the caller.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace h3rt::model {

// Blocks of the first pass of the relative-L1 reduction (fixed, so the sum order is fixed and
// the value deterministic): `partials` holds 2 * kStepCacheReduceBlocks doubles.
inline constexpr int kStepCacheReduceBlocks = 256;

// *rel_l1 = sum |(out0 - in0) - ref| / sum |ref| over n values (float64 sums, two passes),
// the block-0 residual against the cached one `ref`.
cudaError_t step_cache_rel_l1_cuda(const __nv_bfloat16* in0, const __nv_bfloat16* out0,
                                   const float* ref, int64_t n, double* partials, double* rel_l1,
                                   cudaStream_t s);
// block0_res = out0 - in0, rest_res = final - out0 (float32, from the bf16 stream values).
cudaError_t step_cache_refresh_cuda(const __nv_bfloat16* in0, const __nv_bfloat16* out0,
                                    const __nv_bfloat16* final_x, float* block0_res,
                                    float* rest_res, int64_t n, cudaStream_t s);
// x = bf16(x + rest_res): block 0's output plus the cached residual of blocks 1..end.
cudaError_t step_cache_apply_cuda(__nv_bfloat16* x, const float* rest_res, int64_t n,
                                  cudaStream_t s);

}  // namespace h3rt::model
#endif
