// DeviceLoop in a build without CUDA: none (the loop keeps its state on the host).
#include "pipeline/device_loop.h"

#ifndef H3RT_HAVE_CUDA
namespace h3rt {
std::unique_ptr<DeviceLoop> DeviceLoop::create(int64_t, int64_t) {
  return nullptr;
}
}  // namespace h3rt
#endif
