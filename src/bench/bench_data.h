// Synthetic device data for the benchmarks: hashed bf16 values, reproducible from a salt.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace h3rt::bench {

// x[i] (bf16 bits, n elements of rows of `cols`) = U(-amp, amp), times a per-row factor in
// [0.25, 4] when `row_spread` (rows of different magnitude, as activations have).
void fill_hashed_bf16(void* x, int64_t n, int64_t cols, float amp, bool row_spread, uint64_t salt,
                      cudaStream_t stream);

}  // namespace h3rt::bench
