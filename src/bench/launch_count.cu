#include "bench/launch_count.h"

#ifdef H3RT_HAVE_CUPTI
#include <cupti.h>

#include <atomic>
#include <cstdlib>

#include "cuda/runtime.h"

namespace h3rt::bench {
namespace {

std::atomic<int64_t> g_kernels{0};

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  H3RT_FAIL("CUPTI ", what, " failed: ", msg ? msg : "unknown error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)
      ++g_kernels;
  std::free(buffer);
}

}  // namespace

int64_t count_kernel_launches(const std::function<void()>& work) {
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel activity");
  g_kernels = 0;
  work();
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disable kernel activity");
  return g_kernels.load();
}

}  // namespace h3rt::bench
#endif
