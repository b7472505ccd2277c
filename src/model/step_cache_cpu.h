// First-block step caching on the CPU forward (h3rt/hybrid.h): the cache's host buffers and the
// three operations a forward needs around block 0.
#pragma once

#include <cstdint>

#include "h3rt/hybrid.h"

namespace h3rt::model {

// sum |(out0 - in0) - r_prev| / sum |r_prev| over n values (float64 sums), against the cached
// block-0 residual; NaN when the cache holds no CPU state of n values.
double step_cache_rel_l1_cpu(const StepCache& cache, const float* in0, const float* out0,
                             int64_t n);
// x (block 0's output) += the cached residual, rounded to bf16 when `bf16` (the stream dtype).
void step_cache_apply_cpu(const StepCache& cache, float* x, int64_t n, bool bf16);
// After a forward that ran every block: the block-0 residual out0 - in0 and the rest's residual
// final - out0 become the cache.
void step_cache_refresh_cpu(StepCache& cache, const float* in0, const float* out0,
                            const float* final_x, int64_t n);

}  // namespace h3rt::model
