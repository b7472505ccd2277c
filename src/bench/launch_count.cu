#include "bench/launch_count.h"

#ifdef H3RT_HAVE_CUPTI
#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "cuda/runtime.h"

namespace h3rt::bench {
namespace {

std::mutex g_mutex;  // CUPTI may deliver buffers on its own thread
std::vector<KernelSpan> g_spans;

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
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      g_spans.push_back({k->start, k->end, k->name ? k->name : "", true});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      g_spans.push_back({m->start, m->end, "[memset]", false});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      g_spans.push_back({m->start, m->end, "[memcpy]", false});
    }
  std::free(buffer);
}

}  // namespace

std::vector<KernelSpan> record_device_activity(const std::function<void()>& work) {
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  constexpr CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                          CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMCPY};
  for (auto k : kinds) check(cuptiActivityEnable(k), "enable activity");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_spans.clear();
  }
  work();
  H3RT_CUDA_CHECK(cudaDeviceSynchronize());
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  for (auto k : kinds) check(cuptiActivityDisable(k), "disable activity");
  std::vector<KernelSpan> out;
  std::lock_guard<std::mutex> lock(g_mutex);
  out.swap(g_spans);
  return out;
}

int64_t count_kernel_launches(const std::function<void()>& work) {
  const auto spans = record_device_activity(work);
  return std::count_if(spans.begin(), spans.end(), [](const KernelSpan& k) { return k.kernel; });
}

}  // namespace h3rt::bench
#endif
