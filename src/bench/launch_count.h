// Kernels recorded by CUPTI's activity API (every kernel the work runs, cuBLASLt's own
// included): their count for the reports' "kernel launches per block", and their GPU start and
// end times for the kernel timeline (kernel_timeline.h).
#pragma once

#ifdef H3RT_HAVE_CUPTI
#include <cstdint>
#include <functional>
#include <vector>

#include "bench/kernel_timeline.h"

namespace h3rt::bench {

// Runs `work` (which must finish its GPU work before returning) with activity recording on, and
// returns every kernel, memset and memcpy it ran on the device.
std::vector<KernelSpan> record_device_activity(const std::function<void()>& work);

// The number of kernels `work` launched (record_device_activity's kernels).
int64_t count_kernel_launches(const std::function<void()>& work);

}  // namespace h3rt::bench
#endif
