// Kernel launches counted by CUPTI's activity API (every kernel the work runs, cuBLASLt's own
// included), for the reports' "kernel launches per block".
#pragma once

#ifdef H3RT_HAVE_CUPTI
#include <cstdint>
#include <functional>

namespace h3rt::bench {

// Runs `work` (which must finish its GPU work before returning) with kernel activity recording
// on, and returns the number of kernels it launched.
int64_t count_kernel_launches(const std::function<void()>& work);

}  // namespace h3rt::bench
#endif
